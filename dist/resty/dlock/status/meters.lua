-- Generated from src/resty/dlock/status/meters.ts by TypeScriptToLua: edit that file, not this one.
-- What status pages read of the factories' instruments (core/meter.ts
-- counts into them): a fixed number of dict reads per factory name, never a
-- walk of the dict. Reading also sweeps the held gauge: the records whose
-- expiry second has passed leave it.
local _M = {}
local meter = require("resty.dlock.core.meter")
local clock = require("resty.dlock.core.clock")
local dictcount = require("resty.dlock.core.dictcount")
local clock_now = clock.now
local math_floor = math.floor
local math_max = math.max
local math_min = math.min
local lua_type = type
local lua_tostring = tostring
local WAIT_BOUNDS = meter.WAIT_BOUNDS
local HOLD_BOUNDS = meter.HOLD_BOUNDS
--- Seconds an expiry second is left before it is swept: a record outlives its second by the dict's clock skew.
local GRACE = 2
--- Most seconds one read sweeps (a scrape after a day without one catches up over a few).
local MAX_SWEEP = 3600
--- About how many keys the instruments of every factory take in a dict: the
-- counters and buckets of each name, and a minute of expiry seconds each.
function _M.keys(dict)
    local n = dict:get("m:n")
    return lua_type(n) == "number" and n * (2 * #WAIT_BOUNDS + 16 + 60) or 0
end
--- Factory names counted in a dict (by any worker), in the order they were first made.
function _M.names(dict)
    local out = {}
    local n = dict:get("m:n")
    if lua_type(n) ~= "number" then
        return out
    end
    for i = 1, n do
        local name = dict:get("m:#" .. lua_tostring(i))
        if lua_type(name) == "string" then
            out[#out + 1] = name
        end
    end
    return out
end
local function num(dict, key)
    local v = dict:get(key)
    return lua_type(v) == "number" and v or 0
end
--- Take the records that expired (by their second) off the held gauge of factory
-- `name`. One worker at a time (a dict key as the lock); one that finds it
-- taken reads the gauge as it is.
local function sweep(dict, p)
    local limit = math_floor(clock_now()) - GRACE
    local mark = dict:get(p .. "swept")
    if lua_type(mark) ~= "number" or mark >= limit then
        return
    end
    if not dictcount.mark(dict, p .. "sweeping", true, 1) then
        return
    end
    local s = num(dict, p .. "swept")
    local stop = math_min(limit, s + MAX_SWEEP)
    local gone = 0
    while s < stop do
        s = s + 1
        local v = dict:get(p .. "e" .. lua_tostring(s))
        if v ~= nil then
            if lua_type(v) == "number" then
                gone = gone + v
            end
            dict:delete(p .. "e" .. lua_tostring(s))
        end
    end
    if gone ~= 0 then
        dictcount.count(dict, p .. "held", -gone)
    end
    dict:safe_set(p .. "swept", s)
    dict:delete(p .. "sweeping")
end
--- A fixed number of dict reads: the counters, the buckets, the gauge (after a sweep).
function _M.read(dict, name)
    local p = "m:" .. name .. ":"
    sweep(dict, p)
    local wait = {}
    local acquiredN = 0
    for i = 1, #WAIT_BOUNDS + 1 do
        local n = num(dict, p .. "w" .. lua_tostring(i))
        wait[#wait + 1] = n
        acquiredN = acquiredN + n
    end
    local hold = {}
    for i = 1, #HOLD_BOUNDS + 1 do
        hold[#hold + 1] = num(dict, p .. "h" .. lua_tostring(i))
    end
    return {
        held = math_max(0, num(dict, p .. "held")),
        acquired = acquiredN,
        busy = num(dict, p .. "busy"),
        timeout = num(dict, p .. "timeout"),
        error = num(dict, p .. "error"),
        lost = num(dict, p .. "lost"),
        wait = wait,
        waitSum = num(dict, p .. "ws"),
        hold = hold,
        holdSum = num(dict, p .. "hs")
    }
end
return _M
