-- Generated from src/resty/dlock/core/late.ts by TypeScriptToLua: edit that file, not this one.
-- nginx may drop a timer that ngx.timer.at said it started: one whose time
-- comes while lua_max_running_timers are all running is never called (nginx
-- logs "N lua_max_running_timers are not enough" and frees it). Whatever waits
-- for such a timer (a loop, a sender, a sweep, a flush) would wait for good, so
-- a timer not run LATE seconds after it was due is taken for dropped and
-- another is started; one that runs late after all finds the work taken over
-- (each user says how) and ends.
local _M = {}
--- Seconds past its due time a started timer has to run: one due now runs at
-- the event loop's next turn, and a turn that takes this long is a worker in
-- trouble anyway.
local LATE = 1
--- Is a timer started at `at` with a delay of `delay` s still on its way at
-- `now` (at nil: none was started)? Past due by LATE s, nginx dropped it.
function _M.onItsWay(at, now, delay)
    return at ~= nil and now - at < delay + LATE
end
return _M
