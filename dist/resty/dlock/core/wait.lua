-- Generated from src/resty/dlock/core/wait.ts by TypeScriptToLua: edit that file, not this one.
-- Waiting for a key: how an acquire that found the key taken spends the time
-- until it may try again. Waiters of one worker queue per key on an
-- ngx.semaphore, and a release in that worker wakes the next one at once;
-- while a holder in another worker of this nginx has the key, waiters watch
-- its shared-dict record instead of asking Redis.
local _M = {}
local ledger = require("resty.dlock.core.ledger")
local orphans = require("resty.dlock.core.orphans")
local request = require("resty.dlock.core.request")
local clock = require("resty.dlock.core.clock")
local MAX_LOCAL_BACKOFF = 8
local semaphore = require("ngx.semaphore")
local ngx_update_time = ngx.update_time
local clock_now = clock.now
local clock_sleep = clock.sleep
local clock_timeout = clock.timeout
local worker_pid = ngx.worker.pid
local co_running = coroutine.running
local co_status = coroutine.status
local tab_remove = table.remove
local math_floor = math.floor
local math_max = math.max
local math_min = math.min
local math_random = math.random
local lua_ipairs = ipairs
local lines = {}
local function gone(w)
    -- Outside requests, by Lua's own status (request.finished). In a request,
    -- the request first: ngx_lua's coroutine.status reads the coroutine's context
    -- from the request's pool, freed once it ended. A light thread killed in a
    -- request that goes on is gone too. (A recycled coroutine reads as alive:
    -- the waiter keeps its place, the safe side.)
    if w.anchor == nil then
        return request.finished(w.co)
    end
    if not request.alive(w.anchor) then
        return true
    end
    return co_status(w.co) == "dead"
end
--- The line of rkey without the waiters that are gone; nil when nobody waits.
local function line(rkey)
    local l = lines[rkey]
    if l == nil then
        return nil
    end
    local i = 1
    while i <= #l do
        local w = l[i]
        if gone(w) then
            -- Killed while waiting: nothing of it runs any more, so its ticket is dropped from here.
            if w.ticket ~= nil then
                orphans.adopt(w.ticket)
            end
            tab_remove(l, i)
        else
            i = i + 1
        end
    end
    if #l == 0 then
        lines[rkey] = nil
        return nil
    end
    return l
end
--- A place at the end of rkey's line; nil when no semaphore can be made (then naps are plain sleeps).
local function join(rkey, token)
    local sem = semaphore.new(0)
    if sem == nil then
        return nil
    end
    local w = {
        rkey = rkey,
        sem = sem,
        co = co_running(),
        anchor = request.anchor(),
        token = token,
        ticket = nil,
        unsure = true
    }
    local l = lines[rkey]
    if l == nil then
        l = {}
        lines[rkey] = l
    end
    l[#l + 1] = w
    return w
end
--- A turn for an acquire of rkey; its place in line is taken at its first nap, or by enter().
function _M.turn(rkey, token)
    return {rkey = rkey, token = token, w = nil}
end
--- Take the turn's place in line now: a key handed to its token while its question is on its way is not missed.
local function enter(t)
    if t.w == nil then
        t.w = join(t.rkey, t.token)
    end
end
--- The turn holds a ticket in its key's queue in Redis, with `ahead` waiters
-- before it: should it go without a word, drop the ticket.
function _M.holdTicket(t, ticket, ahead)
    enter(t)
    if t.w ~= nil then
        t.w.ticket = ticket
        t.w.unsure = ahead <= 0
    end
end
--- Sleep up to `ms`, or less when woken as the first of the line in this worker (or by name): woken?
local function pause(t, ms)
    enter(t)
    if t.w == nil then
        clock_sleep(ms / 1000)
        return false
    end
    local ok = t.w.sem:wait(clock_timeout(ms / 1000))
    return ok == true
end
--- The acquire is over (acquired, timed out, failed): its place in line is
-- given up. With `passOn` (waiters by turns: semaphores, Redlock), the
-- wake-ups it did not take go to the next in line: two permits freed at once
-- both woke the first, and each may be a free permit. (A key handed on by
-- name wakes its waiter twice, by name and as the first: no use passing that on.)
function _M.leave(t, passOn)
    local w = t.w
    if w == nil then
        return
    end
    t.w = nil
    local l = lines[w.rkey]
    if l == nil then
        return
    end
    for i = 1, #l do
        if l[i] == w then
            tab_remove(l, i)
            break
        end
    end
    if #l == 0 then
        lines[w.rkey] = nil
        return
    end
    if not passOn then
        return
    end
    local unused = w.sem:count()
    if unused > 0 then
        l[1].sem:post(unused)
    end
end
--- How many waiters of this worker wait for rkey now.
function _M.waiters(rkey)
    local l = line(rkey)
    return l == nil and 0 or #l
end
--- Is the turn first in its key's line (the one waiter of this worker that asks Redis)?
function _M.first(t)
    local l = line(t.rkey)
    return l ~= nil and t.w ~= nil and l[1] == t.w
end
--- A release of rkey: the first waiter of this worker tries now.
function _M.wake(rkey)
    local l = line(rkey)
    if l ~= nil then
        l[1].sem:post(1)
    end
end
--- rkey was handed to the waiter holding `token`: wake it, if it waits here.
function _M.wakeToken(rkey, token)
    local l = line(rkey)
    if l == nil then
        return false
    end
    for _, w in lua_ipairs(l) do
        if w.token == token then
            w.sem:post(1)
            return true
        end
    end
    return false
end
--- rkey's subscription is live: the waiters here that may have missed a
-- release or a key handed to them while it was not look once more.
function _M.recheck(rkey)
    local l = line(rkey)
    if l == nil then
        return
    end
    for _, w in lua_ipairs(l) do
        if w.unsure then
            w.sem:post(1)
        end
    end
end
--- Every waiter of rkey in this worker tries now (a subscription went down: they poll).
function _M.wakeAll(rkey)
    local l = line(rkey)
    if l == nil then
        return
    end
    for _, w in lua_ipairs(l) do
        w.sem:post(1)
    end
end
--- While a worker of this nginx holds the key, wait without polling Redis: a
-- holder in this worker wakes one waiter when it releases (waiters queue on a
-- semaphore, first come first served); a holder in another worker drops its
-- shared-dict record, which costs nothing to watch. "none": no holder here;
-- "free": try Redis now; "timeout": the deadline passed, and then the ms until
-- the holder's lease ends (retry_after).
function _M.awaitLocalHolder(dict, space, t, deadline)
    local rec = ledger.recordKey(space, t.rkey, "", false)
    local step = 1
    local seen = false
    while true do
        local pid, expires = ledger.holder(dict, rec)
        if pid == nil then
            return seen and "free" or "none", nil
        end
        seen = true
        ngx_update_time()
        local now = clock_now() * 1000
        if now >= deadline then
            return "timeout", math_max(0, math_floor(expires - now))
        end
        if pid == worker_pid() then
            -- Woken by its release, or at its expiry if it never releases.
            pause(t, math_min(deadline - now, math_max(1, expires - now + 1)))
            return "free", nil
        end
        pause(t, math_min(deadline - now, step / 2 + math_random() * step / 2))
        step = math_min(step * 2, MAX_LOCAL_BACKOFF)
    end
end
-- Exported by name: this module's own uses of them are locals, not lookups in its exports table.
_M.enter = enter
_M.pause = pause
return _M
