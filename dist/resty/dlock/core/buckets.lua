-- Generated from src/resty/dlock/core/buckets.ts by TypeScriptToLua: edit that file, not this one.
-- The buckets of the lease metrics' histograms (core/meter.lua): their bounds,
-- and the bucket a number of seconds falls in.
local _M = {}
--- Upper bounds (s) of the acquire-wait buckets; the last bucket is +Inf.
_M.WAIT_BOUNDS = {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5}
--- Upper bounds (s) of the hold-time buckets; the last bucket is +Inf.
_M.HOLD_BOUNDS = {0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300}
-- Bucket indexes by comparisons, not a loop over the bounds: a loop would keep
-- the acquire path out of LuaJIT's root trace (see check.nkeys).
function _M.wait(s)
    if s <= 0.05 then
        if s <= 0.005 then
            return s <= 0.001 and 1 or 2
        end
        if s <= 0.01 then
            return 3
        end
        return s <= 0.025 and 4 or 5
    end
    if s <= 0.5 then
        if s <= 0.1 then
            return 6
        end
        return s <= 0.25 and 7 or 8
    end
    if s <= 1 then
        return 9
    end
    return s <= 5 and 10 or 11
end
function _M.hold(s)
    if s <= 1 then
        if s <= 0.05 then
            return s <= 0.01 and 1 or 2
        end
        if s <= 0.1 then
            return 3
        end
        return s <= 0.5 and 4 or 5
    end
    if s <= 30 then
        if s <= 5 then
            return 6
        end
        return s <= 10 and 7 or 8
    end
    return s <= 60 and 9 or (s <= 300 and 10 or 11)
end
return _M
