-- Generated from src/resty/dlock/status/meters.ts by TypeScriptToLua: edit that file, not this one.
-- What status pages read of the factories' instruments (core/meter.lua
-- counts into them): a fixed number of dict reads per factory name, never a
-- walk of the dict. Reading sweeps the held gauge first (core/expiries.lua), as
-- the workers' flushes do.
local _M = {}
local meter = require("resty.dlock.core.meter")
local expiries = require("resty.dlock.core.expiries")
local math_max = math.max
local lua_type = type
local lua_tostring = tostring
local WAIT_BOUNDS = meter.WAIT_BOUNDS
local HOLD_BOUNDS = meter.HOLD_BOUNDS
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
--- A fixed number of dict reads: the counters, the buckets, the gauge (after a sweep).
function _M.read(dict, name)
    local p = "m:" .. name .. ":"
    expiries.sweep(dict, p)
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
