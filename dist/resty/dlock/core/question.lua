-- Generated from src/resty/dlock/core/question.ts by TypeScriptToLua: edit that file, not this one.
-- A question a worker asks once for all its callers (the sentinels' master, a
-- Cluster's slot map), asked by a timer of its own. A caller that asked itself
-- and went away in the middle (a client abort, ngx.exit, a killed thread: its
-- coroutine is never resumed) left the question open for good: every later
-- caller went on with the old answer, or waited on a question nobody asked.
-- A timer's question always ends; its callers wait for the answer, each as
-- long as the question can take, and one that goes away leaves it to the rest.
local _M = {}
local clock = require("resty.dlock.core.clock")
local late = require("resty.dlock.core.late")
local clock_now = clock.now
local on_its_way = late.onItsWay
local timer_at = ngx.timer.at
local sem_new = require("ngx.semaphore").new
local lua_tostring = tostring
--- Seconds a waiter sleeps before it looks whether nginx dropped the question's timer.
local SLICE = 0.5
-- pcall typed for the asker's two results, so they pass through without a table.
local protect = pcall
--- Is q being asked (for no longer than it can take), or about to be (a timer started, not dropped)?
function _M.underway(q)
    if q == nil or q.done then
        return false
    end
    local now = clock_now()
    local since = q.runningSince
    if since ~= nil then
        return now - since < q.longest
    end
    return on_its_way(q.started, now, 0)
end
local function run(premature, q)
    -- A timer that runs late, after a waiter took the question over (answer()), finds it asked.
    if q.runningSince ~= nil then
        return
    end
    q.runningSince = clock_now()
    local ok, result, err = protect(q.f, q.ctx)
    if ok then
        q.result = result
        q.err = err
    else
        q.err = "dlock: " .. lua_tostring(result)
    end
    q.done = true
    if q.waiting > 0 then
        q.wake:post(q.waiting)
    end
end
--- A timer asking f(ctx), which can take `longest` s: the question, or nil when
-- no timer (or semaphore) can be had (then ask in place).
function _M.start(longest, f, ctx)
    local wake = sem_new(0)
    if wake == nil then
        return nil
    end
    local q = {
        started = clock_now(),
        longest = longest,
        runningSince = nil,
        f = f,
        ctx = ctx,
        done = false,
        result = nil,
        err = nil,
        wake = wake,
        waiting = 0
    }
    if (timer_at(0, run, q)) == nil then
        return nil
    end
    return q
end
--- q's answer, once it is in (at most its `longest` s from now): what the
-- asker answered, or nil and why. A question whose timer nginx dropped (at
-- lua_max_running_timers) is asked here by the first waiter to see it.
function _M.answer(q, what)
    local deadline = clock_now() + q.longest
    while not q.done do
        if q.runningSince == nil and not on_its_way(q.started, clock_now(), 0) then
            run(false, q)
            break
        end
        local left = deadline - clock_now()
        if left <= 0 then
            break
        end
        q.waiting = q.waiting + 1
        q.wake:wait(left < SLICE and left or SLICE)
        q.waiting = q.waiting - 1
    end
    if not q.done then
        return nil, "dlock: " .. what .. ": no answer in " .. lua_tostring(q.longest) .. " s"
    end
    return q.result, q.err
end
return _M
