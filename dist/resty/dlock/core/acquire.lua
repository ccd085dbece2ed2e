-- Generated from src/resty/dlock/core/acquire.ts by TypeScriptToLua: edit that file, not this one.
-- Taking a key: one script round trip per attempt, and between attempts the
-- waiting. Two ways to wait:
--   in line    locks (not under Redlock): see queued.lua.
--   by turns   permits, and locks under Redlock (no queue spans majorities):
--              one waiter per worker and key asks Redis when a release is
--              announced or the holder's lease ends (wait.lua, wakeups.lua).
local _M = {}
local backend = require("resty.dlock.redis.backend")
local lease = require("resty.dlock.core.lease")
local meter = require("resty.dlock.core.meter")
local orphans = require("resty.dlock.core.orphans")
local queued = require("resty.dlock.core.queued")
local recovery = require("resty.dlock.core.recovery")
local retry = require("resty.dlock.core.retry")
local waits = require("resty.dlock.core.wait")
local wakeups = require("resty.dlock.core.wakeups")
local clock = require("resty.dlock.core.clock")
local check = require("resty.dlock.core.check")
local call = backend.call
local taken = queued.taken
local clock_now = clock.now
local ngx_update_time = ngx.update_time
local math_min = math.min
local lua_type = type
local refused = meter.refused
local acquired = meter.acquired
local notSelf = check.notSelf
local phaseError = lease.phaseError
--- ms a waiter that joins this worker's turn for a key sleeps, at most, before it asks Redis itself.
local QUEUE_CAP = 1000
--- The deadline passed: why the last attempt failed (Redis never able to answer), or "timeout".
local function ended(res, err, retryAfter, subscribed, stray)
    if res == nil then
        return nil, err, nil, subscribed, stray
    end
    return nil, "timeout", retryAfter, subscribed, stray
end
--- Acquire by turns; `turn` is nil when not waiting (wait = 0).
local function byTurns(turn, store, kind, key, rkey, tok, ttl, wait, ...)
    local conf = store.redis
    local deadline = clock_now() * 1000 + wait
    local backoff = retry.FIRST_BACKOFF
    local retryAfter
    local subscribed = false
    local stray = false
    -- One Redis contender per worker and key: a waiter that finds others of this
    -- worker already waiting for a key held elsewhere, with its releases coming
    -- (a live subscription), queues behind them without asking Redis; releases
    -- wake them one at a time, first come first served.
    if wait > 0 and waits.waiters(rkey) > 0 and wakeups.live(conf, rkey) then
        subscribed = true
        wakeups.want(conf, rkey)
        waits.pause(turn, math_min(wait, QUEUE_CAP))
    end
    -- A waiter that finds the key held in this nginx queues up locally at once:
    -- asking Redis first would only hear "busy". (Without `wait`, Redis answers.)
    if wait > 0 and not kind.shared then
        local state, left = waits.awaitLocalHolder(store.dict, store.redis.keyspace, turn, deadline)
        if state == "timeout" then
            return nil, "timeout", left, subscribed, false
        end
    end
    while true do
        local fence
        local sent = clock_now() * 1000
        local res
        local err
        local fault
        if kind.fenced then
            res, err, fault = call(conf, kind.acquire, rkey, backend.fenceKey(conf, rkey), tok, ttl)
        else
            res, err, fault = call(conf, kind.acquire, rkey, tok, ttl, ...)
        end
        if lua_type(res) == "table" then
            -- { "OK", fence } from the fenced script
            local reply = res
            fence = reply[2]
            res = reply[1]
        end
        if res == nil then
            local e = retry.failed(store, kind, rkey, tok, err, fault, wait, deadline, kind.release)
            if e ~= nil then
                return nil, e, nil, subscribed, stray
            end
        elseif res == "OK" then
            local l, spent = taken(store, kind, key, rkey, tok, ttl, sent, fence)
            if l ~= nil then
                return l, nil, nil, subscribed, false
            end
            -- Its answer came too late for a lease: a transient failure, which a waiter tries again.
            local e = retry.failed(store, kind, rkey, tok, spent, "transient", wait, deadline, kind.release)
            if e ~= nil then
                return nil, e, nil, subscribed, stray
            end
        else
            if fault == "lost" then
                stray = true
            end
            retryAfter = retry.pttlOf(res)
            if wait == 0 then
                return nil, "busy", retryAfter, subscribed, stray
            end
        end
        ngx_update_time()
        local left = deadline - clock_now() * 1000
        if left <= 0 then
            return ended(res, err, retryAfter, subscribed, stray)
        end
        local t = turn
        local here = "none"
        if not kind.shared then
            local holderLeft
            here, holderLeft = waits.awaitLocalHolder(store.dict, store.redis.keyspace, t, deadline)
            if here == "timeout" then
                return nil, "timeout", holderLeft, subscribed, stray
            end
        end
        if here == "none" then
            -- The holder is elsewhere: its release wakes us (wakeups.lua) once our
            -- subscription is live; until then, or without one, poll Redis with
            -- jittered exponential backoff. Never past the holder's expiry nor our deadline.
            subscribed = true
            wakeups.want(conf, rkey)
            local nap
            if retryAfter ~= nil and wakeups.live(conf, rkey) then
                -- The first of this worker's line sleeps until a release wakes it (or
                -- the holder's lease ends); the others until they are first, looking
                -- now and then in case the first is stuck.
                nap = (waits.first(t) or waits.waiters(rkey) == 0) and retryAfter + 1 or math_min(retryAfter + 1, QUEUE_CAP)
                -- A lock's holder may be another client's, which announces nothing: it is probed sooner (subscriptions.lua).
                if not kind.shared then
                    wakeups.expect(conf, rkey, retryAfter, not retry.heldHere(store, rkey))
                end
            else
                nap = retry.poll(backoff, retryAfter)
                backoff = math_min(backoff * 2, retry.MAX_BACKOFF)
            end
            if left < nap then
                nap = left
            end
            waits.pause(t, nap)
        end
    end
end
--- Try, and while `wait` allows, try again: lease on success; nil, "busy",
-- retry_after when wait = 0; nil, "timeout", retry_after at the deadline;
-- nil, "dlock: ..." on a Redis failure. rkey is key's Redis key (with the
-- prefix: options.acquire). `extra` goes to the script after ttl (by turns only).
local function acquire(store, kind, key, rkey, tok, ttl, wait, ...)
    if kind.drop ~= nil then
        return queued.queued(store, kind, key, rkey, tok, ttl, wait)
    end
    -- Without waiting there is no line to stand in: no turn to make.
    local turn = wait > 0 and waits.turn(rkey) or nil
    local l, err, retryAfter, subscribed, stray = byTurns(turn, store, kind, key, rkey, tok, ttl, wait, ...)
    -- Busy answers (Redlock) left keys a paused master may have taken for tok: cleaned up, owner-checked, once no
    -- attempt of this acquire will use tok again (earlier, a sweep could delete the key a later attempt took).
    if l == nil and stray then
        orphans.adoptAcquire(store.redis, kind.release, rkey, tok)
    end
    if turn ~= nil then
        waits.leave(turn, true)
    end
    if subscribed then
        wakeups.done(store.redis, rkey)
        -- Gave up (timeout, error) while others of this worker wait: the next one takes its turn.
        if l == nil then
            waits.wake(rkey)
        end
    end
    return l, err, retryAfter
end
--- Why an acquire on obj (a factory of metatable mt) cannot start: called with
-- "." (`method` names it), or in a phase without cosockets (`op`); nil when it
-- can. A worker's first acquire starts the recovery of the leases a reload
-- left behind, before it takes anything.
local function opening(obj, mt, method, op)
    local notOurs = notSelf(obj, mt, method)
    if notOurs ~= nil then
        return notOurs
    end
    recovery.start()
    local perr = phaseError(op)
    return perr
end
function _M.metered(store, kind, key, rkey, mint, mark, ttl, wait, busyCounts, ...)
    ngx_update_time()
    local t0 = clock_now()
    local tok, terr = mint()
    if tok == nil then
        refused(store.meter, terr)
        return nil, terr, nil
    end
    local l, err, retryAfter = acquire(store, kind, key, rkey, mark == nil and tok or mark .. tok, ttl, wait, ...)
    if l == nil then
        -- A first try whose caller waits next (a guard) has no outcome yet: the wait that follows has.
        if busyCounts or err ~= "busy" then
            refused(store.meter, err)
        end
        return nil, err, retryAfter
    end
    acquired(store.meter, l._since / 1000 - t0)
    return l, nil, nil
end
-- Exported by name: this module's own uses of them are locals, not lookups in its exports table.
_M.acquire = acquire
_M.opening = opening
return _M
