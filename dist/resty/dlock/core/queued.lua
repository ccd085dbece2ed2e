-- Generated from src/resty/dlock/core/queued.ts by TypeScriptToLua: edit that file, not this one.
-- Waiting in line (locks, not under Redlock): the first attempt takes a ticket
-- in the key's queue in Redis, and the waiter sleeps until a release hands the
-- key to it by name (scripts.lua): first come, first served across the fleet,
-- one contender per release, three commands per contended acquisition
-- (ticket, claim, release). An uncontended acquire asks once and keeps nothing.
local _M = {}
local backend = require("resty.dlock.redis.backend")
local lease = require("resty.dlock.core.lease")
local ledger = require("resty.dlock.core.ledger")
local orphans = require("resty.dlock.core.orphans")
local retry = require("resty.dlock.core.retry")
local scripts = require("resty.dlock.redis.scripts")
local waits = require("resty.dlock.core.wait")
local wakeups = require("resty.dlock.core.wakeups")
local clock = require("resty.dlock.core.clock")
local call = backend.call
local make = lease.make
local validity = backend.validity
local clock_now = clock.now
local ngx_update_time = ngx.update_time
local math_floor = math.floor
local math_max = math.max
local math_min = math.min
local math_random = math.random
local lua_type = type
local str_format = string.format
--- ms a ticket ends before its waiter gives up: more than a round trip to Redis.
local MARGIN = 10
--- ms a waiter in line sleeps, at most, with no word (see between).
local HORIZON = 2000
--- ms a waiter in line waits for its wake-up subscription to be confirmed before it polls.
local SETUP = 50
--- Take our ticket back: in the background, and at once (a key handed to us meanwhile goes on to the next).
local function dropOf(store, kind, rkey, tok, wait)
    return {
        lost = "ticket",
        conf = store.redis,
        release = kind.drop,
        rkey = rkey,
        token = tok,
        deadline = clock_now() + wait / 1000 + 1,
        settle = nil
    }
end
--- Ask Redis for the key once, with our ticket ("" until we have one) lasting `left` ms.
local function ask(conf, kind, rkey, qkey, fkey, skey, tok, ttl, left, ticket)
    if skey ~= nil then
        -- A reader: its keys are the lock, its readers, (the fence counter,) the queue.
        if fkey ~= nil then
            return call(conf, kind.acquire, rkey, skey, fkey, qkey, tok, ttl, left, ticket)
        end
        return call(conf, kind.acquire, rkey, skey, qkey, tok, ttl, left, ticket)
    end
    if fkey ~= nil then
        return call(conf, kind.acquire, rkey, fkey, qkey, tok, ttl, left, ticket)
    end
    return call(conf, kind.acquire, rkey, qkey, tok, ttl, left, ticket)
end
--- How long our ticket lasts: MARGIN less than we wait, so that Redis skips it before we give up, never hands the key to us as we leave.
local function ticketMs(wait, deadline, sent)
    return wait > 0 and math_max(1, math_floor(deadline - sent) - MARGIN) or 0
end
--- The lease Redis gave for an acquire sent at `sent`. An answer that came
-- once that lease had ended (a cold connection with a script loaded anew, a
-- Redis far away) gives no lease as it is: it is extended at once, the key
-- likely still ours (Redis counts its ttl from when it took it), and valid
-- from that extend's send; else (gone, or again too late) given back: nil
-- and the error, a transient one.
local function taken(store, kind, key, rkey, tok, ttl, sent, fence)
    local l = make(store, kind, key, rkey, tok, ttl, sent, fence)
    ngx_update_time()
    local took = clock_now() * 1000 - sent
    if took < validity(store.redis, ttl) then
        return l, nil
    end
    local ok = l:extend(ttl)
    if ok ~= nil and l:valid() then
        return l, nil
    end
    if not l._released then
        l:release()
    else
        -- Its token gone from the key (not_owner): the owner-checked release still frees what it leaves (a reader's key).
        local gone = backend.own(store.redis, kind.release, rkey, tok)
        if gone == nil then
            orphans.adoptAcquire(store.redis, kind.release, rkey, tok)
        end
    end
    return nil, str_format("dlock: redis %s: took the key, but its answer came after %d ms of a %d ms ttl", store.redis.endpoint, took, ttl)
end
--- What Redis answered an attempt of the waiting acquire at `place`, sent at `sent`.
local function heard(place, sent, res, err, fault)
    local store = place.store
    local kind = place.kind
    local rkey = place.rkey
    local tok = place.tok
    place.answered = res ~= nil
    if res == nil then
        local e = retry.failed(store, kind, rkey, tok, err, fault, place.wait, place.deadline, kind.drop)
        if e ~= nil then
            -- A cleanup of a lost reply drops the ticket too.
            if fault == "lost" then
                place.ticket = ""
            end
            return true, nil, e, nil
        end
        place.failure = err
        return false, nil, nil, nil
    end
    local won = res == "OK"
    local fence
    if lua_type(res) == "table" then
        local reply = res
        won = reply[1] == "OK"
        if won then
            fence = reply[2]
        end
    end
    if won then
        local l, e = taken(store, kind, place.key, rkey, tok, place.ttl, sent, fence)
        -- Its ticket was spent on the key, given back since.
        if l == nil then
            place.ticket = ""
        end
        return true, l, e, nil
    end
    if lua_type(res) == "table" then
        local reply = res
        -- Busy: the holder's PTTL, and our ticket.
        local pttl = reply[1]
        place.retryAfter = pttl >= 0 and pttl or nil
        local t = reply[2]
        if t ~= "" and place.ticket == "" then
            place.ticket = t
            place.ahead = reply[3]
            place.rec = ledger.waiting(store.dict, store.redis.keyspace, rkey, tok, place.key, place.wait)
            waits.holdTicket(place.turn, dropOf(store, kind, rkey, tok, place.wait), place.ahead)
        end
    else
        -- Busy, from the script without the queue (scripts.lua `alone`): the holder's PTTL.
        place.retryAfter = retry.pttlOf(res)
    end
    return false, nil, nil, nil
end
--- Ask Redis for the key again, our ticket along.
local function attempt(place)
    local sent = clock_now() * 1000
    local res, err, fault = ask(
        place.store.redis,
        place.kind,
        place.rkey,
        place.qkey,
        place.fkey,
        place.skey,
        place.tok,
        place.ttl,
        ticketMs(place.wait, place.deadline, sent),
        place.ticket
    )
    return heard(place, sent, res, err, fault)
end
--- Between attempts: sleep until the key may be ours (or our deadline). True and the results when the wait is over.
local function between(place)
    local conf = place.store.redis
    local rkey = place.rkey
    ngx_update_time()
    local rest = place.deadline - clock_now() * 1000
    local retryAfter = place.retryAfter
    if rest <= 0 then
        -- The deadline passed: why the last attempt failed (Redis never able to answer), or "timeout".
        if not place.answered then
            return true, nil, place.failure, nil
        end
        return true, nil, "timeout", retryAfter
    end
    local nap
    local live = wakeups.want(conf, rkey)
    local coming = not live and wakeups.coming(conf, rkey)
    if place.answered and retryAfter ~= nil and (live or coming and place.ahead > 0) then
        -- Asleep until the key is handed to us by name (with others ahead of us,
        -- that comes after the subscription does). Should the holder die, or a
        -- waiter it was handed to never come, the subscriber wakes the first
        -- waiter here once that is overdue, and Redis passes the key on. Should
        -- we have missed our turn all the same, we look again after HORIZON and
        -- are back at our place. A holder that may be another client's (it
        -- announces nothing) is probed sooner (subscriptions.lua).
        wakeups.expect(conf, rkey, retryAfter, not retry.heldHere(place.store, rkey))
        nap = HORIZON + math_random() * HORIZON / 4
    elseif place.answered and retryAfter ~= nil and coming then
        -- First in line: the key may come to us before the subscription does. Its confirmation wakes us to look.
        nap = math_min(SETUP, retryAfter + 1)
    else
        -- No wake-up can come (not subscribed yet, subscription down, a holder
        -- whose key has no expiry): poll, well within a handed key's GRANT.
        nap = retry.poll(place.backoff, retryAfter)
        place.backoff = math_min(place.backoff * 2, retry.MAX_BACKOFF)
    end
    if not waits.pause(place.turn, math_min(nap, rest)) and nap >= rest then
        -- Slept to the deadline with no word: the key was not handed to us.
        local left
        if retryAfter ~= nil then
            left = math_max(0, math_floor(retryAfter - rest))
        end
        return true, nil, "timeout", left
    end
    return false, nil, nil, nil
end
--- The first answer did not end the acquire: wait in line, from a place that
-- starts with that answer, until the key is ours, the deadline, or an error.
local function inLine(store, kind, key, rkey, qkey, fkey, skey, tok, ttl, wait, deadline, turn, sent, res, err, fault)
    local place = {
        store = store,
        kind = kind,
        key = key,
        rkey = rkey,
        qkey = qkey,
        fkey = fkey,
        skey = skey,
        tok = tok,
        ttl = ttl,
        wait = wait,
        deadline = deadline,
        ticket = "",
        rec = nil,
        ahead = -1,
        turn = turn,
        answered = false,
        failure = nil,
        retryAfter = nil,
        backoff = retry.FIRST_BACKOFF
    }
    local over, l, e, retryAfter = heard(place, sent, res, err, fault)
    while not over do
        over, l, e, retryAfter = between(place)
        if not over then
            over, l, e, retryAfter = attempt(place)
        end
    end
    waits.leave(turn, false)
    wakeups.done(store.redis, rkey)
    if place.rec ~= nil then
        ledger.forget(store.dict, place.rec, tok)
    end
    if l == nil and place.ticket ~= "" and e ~= "timeout" then
        -- Gave up in line before our deadline (a Redis error): leave now, and pass on a key handed to us meanwhile.
        -- At the deadline, Redis skips our ticket by itself.
        orphans.adopt(dropOf(store, kind, rkey, tok, wait))
    end
    return l, e, retryAfter
end
--- Acquire in line: lease; nil, "busy", retry_after (wait = 0); nil,
-- "timeout", retry_after; nil, "dlock: ...". The first question comes
-- before any bookkeeping: an uncontended acquire allocates nothing but its
-- lease, and LuaJIT compiles a path that runs into no loop (check.nkeys).
function _M.queued(store, kind, key, rkey, tok, ttl, wait)
    local conf = store.redis
    local qkey = scripts.queueKey(rkey, conf.slotted)
    local fkey = kind.fenced and backend.fenceKey(conf, rkey) or nil
    local skey = kind.reader == true and scripts.readersKey(rkey, conf.slotted) or nil
    local sent = clock_now() * 1000
    local deadline = sent + wait
    -- The key may be handed to us by name while our first question is on its
    -- way: be in this worker's line by then, if word can come here at all.
    local turn
    if wait > 0 and wakeups.live(conf, rkey) then
        turn = waits.turn(rkey, tok)
        waits.enter(turn)
    end
    local res, err, fault = ask(conf, kind, rkey, qkey, fkey, skey, tok, ttl, ticketMs(wait, deadline, sent), "")
    -- Taken: "OK", or { "OK", fence } from the fenced script.
    local won = res == "OK"
    local fence
    if not won and lua_type(res) == "table" and res[1] == "OK" then
        won = true
        fence = res[2]
    end
    if won then
        if wait > 0 then
            if turn ~= nil then
                waits.leave(turn, false)
            end
            wakeups.done(conf, rkey)
        end
        local l, e = taken(store, kind, key, rkey, tok, ttl, sent, fence)
        return l, e, nil
    end
    if wait > 0 then
        return inLine(
            store,
            kind,
            key,
            rkey,
            qkey,
            fkey,
            skey,
            tok,
            ttl,
            wait,
            deadline,
            turn or waits.turn(rkey, tok),
            sent,
            res,
            err,
            fault
        )
    end
    -- Not waiting: this answer is the outcome.
    if res == nil then
        return nil, retry.failed(store, kind, rkey, tok, err, fault, 0, deadline, kind.drop), nil
    end
    if lua_type(res) == "table" then
        -- Busy: the holder's PTTL (and a ticket we did not ask for).
        local pttl = res[1]
        return nil, "busy", pttl >= 0 and pttl or nil
    end
    -- Busy, from the script without the queue (scripts.lua `alone`): the holder's PTTL.
    return nil, "busy", retry.pttlOf(res)
end
-- Exported by name: acquire.lua takes by turns the way this module takes in line.
_M.taken = taken
return _M
