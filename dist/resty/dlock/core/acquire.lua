--[[ Generated with https://github.com/TypeScriptToLua/TypeScriptToLua ]]
local ____exports = {}
local backend = require("resty.dlock.redis.backend")
local lease = require("resty.dlock.core.lease")
local ledger = require("resty.dlock.core.ledger")
local orphans = require("resty.dlock.core.orphans")
local scripts = require("resty.dlock.redis.scripts")
local waits = require("resty.dlock.core.wait")
local wakeups = require("resty.dlock.core.wakeups")
local call = backend.call
local FIRST_BACKOFF = 2
local MAX_BACKOFF = 64
--- ms a ticket ends before its waiter gives up: more than a round trip to Redis.
local MARGIN = 10
--- ms a waiter in line sleeps, at most, with no word (see inLine).
local HORIZON = 2000
--- ms a waiter in line waits for its wake-up subscription to be confirmed before it polls.
local SETUP = 50
--- ms a waiter that joins this worker's turn for a key sleeps, at most, before it asks Redis itself.
local QUEUE_CAP = 1000
--- The next nap of a waiter that polls: jittered, doubling, never past the holder's expiry.
local function poll(backoff, retryAfter)
    local nap = backoff / 2 + math.random() * backoff / 2
    if retryAfter ~= nil and retryAfter + 1 < nap then
        nap = retryAfter + 1
    end
    return nap
end
--- An attempt failed on the way to or from Redis: the error to return now, or
-- nil to try again (a transient fault while there is time to wait). `release`
-- gives back a key taken on the master only; `cleanup` removes what a lost
-- reply may have left.
local function failed(store, kind, rkey, tok, err, fault, wait, deadline, cleanup)
    if fault == "replicas" then
        local gone = backend.own(store.redis, kind.release, rkey, tok)
        if gone == nil then
            orphans.adoptAcquire(store.redis, kind.release, rkey, tok)
        end
        return tostring(err) .. "; released"
    end
    if fault == "lost" then
        orphans.adoptAcquire(store.redis, cleanup, rkey, tok)
        return tostring(err) .. "; acquire outcome unknown, owner-checked cleanup scheduled"
    end
    if fault ~= "transient" or wait == 0 or deadline - ngx.now() * 1000 <= 0 then
        return err == nil and "dlock: redis failed" or err
    end
    return nil
end
--- Is rkey held in this nginx (its shared dict says so)? Then its release is announced: it is ours.
local function heldHere(store, rkey)
    local pid = ledger.holder(
        store.dict,
        ledger.recordKey(rkey, "", false)
    )
    return pid ~= nil
end
--- A busy reply's PTTL of the holder as retry_after (nil: the key has no expiry).
local function pttlOf(res)
    return type(res) == "number" and res >= 0 and res or nil
end
--- The deadline passed: why the last attempt failed (Redis never able to answer), or "timeout".
local function ended(res, err, retryAfter)
    if res == nil then
        return nil, err, nil
    end
    return nil, "timeout", retryAfter
end
--- Take our ticket back: in the background, and at once (a key handed to us meanwhile goes on to the next).
local function dropOf(store, kind, rkey, tok, wait)
    return {
        lost = "ticket",
        conf = store.redis,
        release = kind.drop,
        rkey = rkey,
        token = tok,
        deadline = ngx.now() + wait / 1000 + 1,
        settle = nil
    }
end
--- Ask Redis for the key once (our ticket along, once we have one).
local function attempt(place)
    local store = place.store
    local kind = place.kind
    local rkey = place.rkey
    local tok = place.tok
    local ttl = place.ttl
    local wait = place.wait
    local deadline = place.deadline
    local conf = store.redis
    local sent = ngx.now() * 1000
    local left = wait > 0 and math.max(
        1,
        math.floor(deadline - sent) - MARGIN
    ) or 0
    local res
    local err
    local fault
    if place.skey ~= nil then
        if place.fkey ~= nil then
            res, err, fault = call(
                conf,
                kind.acquire,
                rkey,
                place.skey,
                place.fkey,
                place.qkey,
                tok,
                ttl,
                left,
                place.ticket
            )
        else
            res, err, fault = call(
                conf,
                kind.acquire,
                rkey,
                place.skey,
                place.qkey,
                tok,
                ttl,
                left,
                place.ticket
            )
        end
    elseif place.fkey ~= nil then
        res, err, fault = call(
            conf,
            kind.acquire,
            rkey,
            place.fkey,
            place.qkey,
            tok,
            ttl,
            left,
            place.ticket
        )
    else
        res, err, fault = call(
            conf,
            kind.acquire,
            rkey,
            place.qkey,
            tok,
            ttl,
            left,
            place.ticket
        )
    end
    place.answered = res ~= nil
    if res == nil then
        local e = failed(
            store,
            kind,
            rkey,
            tok,
            err,
            fault,
            wait,
            deadline,
            kind.drop
        )
        if e ~= nil then
            if fault == "lost" then
                place.ticket = ""
            end
            return true, nil, e, nil
        end
        place.failure = err
        return false, nil, nil, nil
    end
    if res == "OK" then
        return true, lease.make(
            store,
            kind,
            place.key,
            tok,
            ttl,
            sent,
            nil
        ), nil, nil
    end
    if type(res) == "table" then
        local reply = res
        if reply[1] == "OK" then
            return true, lease.make(
                store,
                kind,
                place.key,
                tok,
                ttl,
                sent,
                reply[2]
            ), nil, nil
        end
        local pttl = reply[1]
        place.retryAfter = pttl >= 0 and pttl or nil
        if wait == 0 then
            return true, nil, "busy", place.retryAfter
        end
        local t = reply[2]
        if t ~= "" and place.ticket == "" then
            place.ticket = t
            place.ahead = reply[3]
            place.rec = ledger.waiting(
                store.dict,
                rkey,
                tok,
                place.key,
                wait
            )
            waits.holdTicket(
                place.turn,
                dropOf(
                    store,
                    kind,
                    rkey,
                    tok,
                    wait
                ),
                place.ahead
            )
        end
    else
        place.retryAfter = pttlOf(res)
        if wait == 0 then
            return true, nil, "busy", place.retryAfter
        end
    end
    return false, nil, nil, nil
end
--- Between attempts: sleep until the key may be ours (or our deadline). True and the results when the wait is over.
local function between(place)
    local conf = place.store.redis
    local rkey = place.rkey
    ngx.update_time()
    local rest = place.deadline - ngx.now() * 1000
    local retryAfter = place.retryAfter
    if rest <= 0 then
        if not place.answered then
            return true, nil, place.failure, nil
        end
        return true, nil, "timeout", retryAfter
    end
    local nap
    local live = wakeups.want(conf, rkey)
    local coming = not live and wakeups.coming(conf, rkey)
    if place.answered and retryAfter ~= nil and (live or coming and place.ahead > 0) then
        wakeups.expect(
            conf,
            rkey,
            retryAfter,
            not heldHere(place.store, rkey)
        )
        nap = HORIZON + math.random() * HORIZON / 4
    elseif place.answered and retryAfter ~= nil and coming then
        nap = math.min(SETUP, retryAfter + 1)
    else
        nap = poll(place.backoff, retryAfter)
        place.backoff = math.min(place.backoff * 2, MAX_BACKOFF)
    end
    if not waits.pause(
        place.turn,
        math.min(nap, rest)
    ) and nap >= rest then
        local left
        if retryAfter ~= nil then
            left = math.max(
                0,
                math.floor(retryAfter - rest)
            )
        end
        return true, nil, "timeout", left
    end
    return false, nil, nil, nil
end
local function queued(store, kind, key, tok, ttl, wait)
    local rkey = store.prefix .. key
    local place = {
        store = store,
        kind = kind,
        key = key,
        rkey = rkey,
        qkey = scripts.queueKey(rkey, store.redis.slotted),
        fkey = kind.fenced and backend.fenceKey(store.redis, rkey) or nil,
        skey = kind.reader == true and scripts.readersKey(rkey, store.redis.slotted) or nil,
        tok = tok,
        ttl = ttl,
        wait = wait,
        deadline = ngx.now() * 1000 + wait,
        ticket = "",
        rec = nil,
        ahead = -1,
        turn = wait > 0 and waits.turn(rkey, tok) or nil,
        answered = false,
        failure = nil,
        retryAfter = nil,
        backoff = FIRST_BACKOFF
    }
    if place.turn ~= nil and wakeups.live(store.redis, rkey) then
        waits.enter(place.turn)
    end
    local over, l, err, retryAfter = attempt(place)
    while not over do
        over, l, err, retryAfter = between(place)
        if not over then
            over, l, err, retryAfter = attempt(place)
        end
    end
    if place.turn ~= nil then
        waits.leave(place.turn)
        wakeups.done(store.redis, rkey)
    end
    if place.rec ~= nil then
        ledger.forget(store.dict, place.rec, tok)
    end
    if l == nil and place.ticket ~= "" and err ~= "timeout" then
        orphans.adopt(dropOf(
            store,
            kind,
            rkey,
            tok,
            wait
        ))
    end
    return l, err, retryAfter
end
local function byTurns(sub, turn, store, kind, key, tok, ttl, wait, ...)
    local rkey = turn.rkey
    local deadline = ngx.now() * 1000 + wait
    local backoff = FIRST_BACKOFF
    local retryAfter
    if wait > 0 and waits.waiters(rkey) > 0 and wakeups.live(store.redis, rkey) then
        sub.on = true
        wakeups.want(store.redis, rkey)
        waits.pause(
            turn,
            math.min(wait, QUEUE_CAP)
        )
    end
    if wait > 0 and not kind.shared then
        local state, left = waits.awaitLocalHolder(store.dict, turn, deadline)
        if state == "timeout" then
            return nil, "timeout", left
        end
    end
    while true do
        local fence
        local sent = ngx.now() * 1000
        local res
        local err
        local fault
        if kind.fenced then
            res, err, fault = call(
                store.redis,
                kind.acquire,
                rkey,
                backend.fenceKey(store.redis, rkey),
                tok,
                ttl
            )
        else
            res, err, fault = call(
                store.redis,
                kind.acquire,
                rkey,
                tok,
                ttl,
                ...
            )
        end
        if type(res) == "table" then
            local reply = res
            fence = reply[2]
            res = reply[1]
        end
        if res == nil then
            local e = failed(
                store,
                kind,
                rkey,
                tok,
                err,
                fault,
                wait,
                deadline,
                kind.release
            )
            if e ~= nil then
                return nil, e, nil
            end
        elseif res == "OK" then
            return lease.make(
                store,
                kind,
                key,
                tok,
                ttl,
                sent,
                fence
            ), nil, nil
        else
            retryAfter = pttlOf(res)
            if wait == 0 then
                return nil, "busy", retryAfter
            end
        end
        ngx.update_time()
        local left = deadline - ngx.now() * 1000
        if left <= 0 then
            return ended(res, err, retryAfter)
        end
        local here = "none"
        if not kind.shared then
            local holderLeft
            here, holderLeft = waits.awaitLocalHolder(store.dict, turn, deadline)
            if here == "timeout" then
                return nil, "timeout", holderLeft
            end
        end
        if here == "none" then
            sub.on = true
            wakeups.want(store.redis, rkey)
            local nap
            if retryAfter ~= nil and wakeups.live(store.redis, rkey) then
                nap = (waits.first(turn) or waits.waiters(rkey) == 0) and retryAfter + 1 or math.min(retryAfter + 1, QUEUE_CAP)
                if not kind.shared then
                    wakeups.expect(
                        store.redis,
                        rkey,
                        retryAfter,
                        not heldHere(store, rkey)
                    )
                end
            else
                nap = poll(backoff, retryAfter)
                backoff = math.min(backoff * 2, MAX_BACKOFF)
            end
            if left < nap then
                nap = left
            end
            waits.pause(turn, nap)
        end
    end
end
--- Try, and while `wait` allows, try again: lease on success; nil, "busy",
-- retry_after when wait = 0; nil, "timeout", retry_after at the deadline;
-- nil, "dlock: ..." on a Redis failure. `extra` goes to the script after ttl
-- (by turns only).
function ____exports.acquire(store, kind, key, tok, ttl, wait, ...)
    if kind.drop ~= nil then
        return queued(
            store,
            kind,
            key,
            tok,
            ttl,
            wait
        )
    end
    local sub = {on = false}
    local rkey = store.prefix .. key
    local turn = waits.turn(rkey)
    local l, err, retryAfter = byTurns(
        sub,
        turn,
        store,
        kind,
        key,
        tok,
        ttl,
        wait,
        ...
    )
    waits.leave(turn)
    if sub.on then
        wakeups.done(store.redis, rkey)
        if l == nil then
            waits.wake(rkey)
        end
    end
    return l, err, retryAfter
end
return ____exports
