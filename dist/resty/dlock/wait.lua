--[[ Generated with https://github.com/TypeScriptToLua/TypeScriptToLua ]]
local ____exports = {}
local ledger = require("resty.dlock.ledger")
local MAX_LOCAL_BACKOFF = 8
local semaphore = require("ngx.semaphore")
local waiting = {}
--- Sleep up to `ms`, or less if a release of rkey in this worker wakes us.
function ____exports.pause(rkey, ms)
    local w = waiting[rkey]
    if w == nil then
        local sem = semaphore.new(0)
        if sem == nil then
            ngx.sleep(ms / 1000)
            return
        end
        w = {sem = sem, count = 0}
        waiting[rkey] = w
    end
    w.count = w.count + 1
    w.sem:wait(ms / 1000)
    w.count = w.count - 1
    if w.count == 0 and waiting[rkey] == w then
        waiting[rkey] = nil
    end
end
--- How many waiters of this worker wait for rkey now.
function ____exports.waiters(rkey)
    local w = waiting[rkey]
    return w == nil and 0 or w.count
end
--- A release of rkey: the next waiter of this worker tries now.
function ____exports.wake(rkey)
    local w = waiting[rkey]
    if w ~= nil and w.count > 0 then
        w.sem:post(1)
    end
end
--- Every waiter of rkey in this worker tries now (see wakeups.ts: a subscription just went live).
function ____exports.wakeAll(rkey)
    local w = waiting[rkey]
    if w ~= nil and w.count > 0 then
        w.sem:post(w.count)
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
