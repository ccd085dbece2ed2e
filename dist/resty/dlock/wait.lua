--[[ Generated with https://github.com/TypeScriptToLua/TypeScriptToLua ]]
local ____exports = {}
local ledger = require("resty.dlock.ledger")
local MAX_LOCAL_BACKOFF = 8
local semaphore = require("ngx.semaphore")
--- Waiters of this worker, per Redis key: a semaphore each. A release in this
-- worker wakes one of them at once (hand-off in one round trip instead of a
-- backoff nap). How many wait is the semaphore's own count: ngx.semaphore
-- forgets a waiter whose request was killed (ngx.exit from an abort handler),
-- which a counter of ours would not.
local waiting = {}
--- Sleep up to `ms`, or less if a release of rkey in this worker wakes us.
function ____exports.pause(rkey, ms)
    local sem = waiting[rkey]
    if sem == nil then
        local made = semaphore.new(0)
        if made == nil then
            ngx.sleep(ms / 1000)
            return
        end
        sem = made
        waiting[rkey] = sem
    end
    sem:wait(ms / 1000)
    if sem:count() >= 0 and waiting[rkey] == sem then
        waiting[rkey] = nil
    end
end
--- How many waiters of this worker wait for rkey now.
function ____exports.waiters(rkey)
    local sem = waiting[rkey]
    if sem == nil then
        return 0
    end
    local n = -sem:count()
    if n <= 0 then
        waiting[rkey] = nil
        return 0
    end
    return n
end
--- A release of rkey: the next waiter of this worker tries now.
function ____exports.wake(rkey)
    if ____exports.waiters(rkey) > 0 then
        waiting[rkey]:post(1)
    end
end
--- Every waiter of rkey in this worker tries now (a subscription went down: they poll).
function ____exports.wakeAll(rkey)
    local n = ____exports.waiters(rkey)
    if n > 0 then
        waiting[rkey]:post(n)
    end
end
--- While a worker of this nginx holds the key, wait without polling Redis: a
-- holder in this worker wakes one waiter when it releases (waiters queue on a
-- semaphore, first come first served); a holder in another worker drops its
-- shared-dict record, which costs nothing to watch. "none": no holder here;
-- "free": try Redis now; "timeout": the deadline passed, and then the ms until
-- the holder's lease ends (retry_after).
function ____exports.awaitLocalHolder(dict, rkey, deadline)
    local rec = ledger.recordKey(rkey, "", false)
    local step = 1
    local seen = false
    while true do
        local pid, expires = ledger.holder(dict, rec)
        if pid == nil then
            return seen and "free" or "none", nil
        end
        seen = true
        ngx.update_time()
        local now = ngx.now() * 1000
        if now >= deadline then
            return "timeout", math.max(
                0,
                math.floor(expires - now)
            )
        end
        if pid == ngx.worker.pid() then
            ____exports.pause(
                rkey,
                math.min(
                    deadline - now,
                    math.max(1, expires - now + 1)
                )
            )
            return "free", nil
        end
        ____exports.pause(
            rkey,
            math.min(
                deadline - now,
                step / 2 + math.random() * step / 2
            )
        )
        step = math.min(step * 2, MAX_LOCAL_BACKOFF)
    end
end
return ____exports
