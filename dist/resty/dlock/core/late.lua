-- Generated from src/resty/dlock/core/late.ts by TypeScriptToLua: edit that file, not this one.
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
