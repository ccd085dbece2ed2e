--[[ Generated with https://github.com/TypeScriptToLua/TypeScriptToLua ]]
local ____exports = {}
local ledger = require("resty.dlock.ledger")
local request = require("resty.dlock.request")
local MAX_LOCAL_BACKOFF = 8
local semaphore = require("ngx.semaphore")
local lines = {}
local function gone(w)
    if w.anchor ~= nil then
        return not request.alive(w.anchor)
    end
    return coroutine.status(w.co) == "dead"
end
--- The line of rkey without the waiters that are gone; nil when nobody waits.
local function line(rkey)
    local l = lines[rkey]
    if l == nil then
        return nil
    end
    local i = 1
    while i <= #l do
        if gone(l[i]) then
            table.remove(l, i)
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
local function mine(l)
    local co = coroutine.running()
    for ____, w in ipairs(l) do
        if w.co == co then
            return w
        end
    end
    return nil
end
--- Sleep up to `ms`, or less when woken as the first of rkey's line in this worker.
function ____exports.pause(rkey, ms)
    local l = lines[rkey]
    if l == nil then
        l = {}
        lines[rkey] = l
    end
    local w = mine(l)
    if w == nil then
        local sem = semaphore.new(0)
        if sem == nil then
            ngx.sleep(ms / 1000)
            return
        end
        w = {
            sem = sem,
            co = coroutine.running(),
            anchor = request.anchor()
        }
        l[#l + 1] = w
    end
    w.sem:wait(ms / 1000)
end
--- The caller's acquire is over (acquired, timed out, failed): it leaves the line of rkey.
function ____exports.leave(rkey)
    local l = lines[rkey]
    if l == nil then
        return
    end
    local co = coroutine.running()
    for i = 1, #l do
        if l[i].co == co then
            table.remove(l, i)
            break
        end
    end
    if #l == 0 then
        lines[rkey] = nil
    end
end
--- How many waiters of this worker wait for rkey now.
function ____exports.waiters(rkey)
    local l = line(rkey)
    return l == nil and 0 or #l
end
--- Is the caller first in rkey's line (the one waiter of this worker that asks Redis)?
function ____exports.first(rkey)
    local l = line(rkey)
    return l ~= nil and l[1].co == coroutine.running()
end
--- A release of rkey: the first waiter of this worker tries now.
function ____exports.wake(rkey)
    local l = line(rkey)
    if l ~= nil then
        l[1].sem:post(1)
    end
end
--- Every waiter of rkey in this worker tries now (a subscription went down: they poll).
function ____exports.wakeAll(rkey)
    local l = line(rkey)
    if l == nil then
        return
    end
    for ____, w in ipairs(l) do
        w.sem:post(1)
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
