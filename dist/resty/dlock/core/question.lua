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
-- pcall typed for the asker's two results, so they pass through without a table.
local protect = pcall
--- Is q being asked, or about to be (a timer started, not dropped)?
function _M.underway(q)
    return q ~= nil and not q.done and (q.running or on_its_way(q.started, clock_now(), 0))
end
local function run(premature, q, f, ...)
    q.running = true
    local ok, result, err = protect(f, ...)
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
--- A timer asking f(...): the question, or nil when no timer (or semaphore) can be had (then ask in place).
function _M.start(f, ...)
    local wake = sem_new(0)
    if wake == nil then
        return nil
    end
    local q = {
        started = clock_now(),
        running = false,
        done = false,
        result = nil,
        err = nil,
        wake = wake,
        waiting = 0
    }
    if (timer_at(0, run, q, f, ...)) == nil then
        return nil
    end
    return q
end
--- q's answer, once it is in (at most `longest` s from now): what the asker answered, or nil and why.
function _M.answer(q, longest, what)
    if not q.done then
        q.waiting = q.waiting + 1
        q.wake:wait(longest)
        q.waiting = q.waiting - 1
    end
    if not q.done then
        return nil, "dlock: " .. what .. ": no answer in " .. lua_tostring(longest) .. " s"
    end
    return q.result, q.err
end
return _M
