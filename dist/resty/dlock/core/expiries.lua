-- Generated from src/resty/dlock/core/expiries.ts by TypeScriptToLua: edit that file, not this one.
-- The held gauge's expiry seconds (core/meter.lua counts leases into them):
-- the records whose second has passed leave the gauge, and their keys the
-- dict. Every worker's flush sweeps (so does a status page's read): a sweep
-- left to status pages only left the seconds of every lease in the dict when
-- nothing read them, a key per factory and second, until the dict was full.
local _M = {}
local clock = require("resty.dlock.core.clock")
local dictcount = require("resty.dlock.core.dictcount")
local clock_now = clock.now
local math_floor = math.floor
local math_min = math.min
local lua_type = type
local lua_tostring = tostring
--- Seconds an expiry second is left before it is swept: a record outlives its second by the dict's clock skew.
local GRACE = 2
--- Most seconds one sweep takes (one after a day without any catches up over a few).
local MAX_SWEEP = 3600
local function num(dict, key)
    local v = dict:get(key)
    return lua_type(v) == "number" and v or 0
end
--- Take the records that expired (by their second) off the held gauge of the
-- factory whose keys start with p ("m:<name>:"), and their keys off the dict.
-- One worker at a time (a dict key as the lock); one that finds it
-- taken reads the gauge as it is.
function _M.sweep(dict, p)
    local limit = math_floor(clock_now()) - GRACE
    local mark = dict:get(p .. "swept")
    if lua_type(mark) ~= "number" then
        -- Gone (flush_all, or a full dict when the factory was made): sweep from now on, not never.
        dict:safe_add(p .. "swept", limit)
        return
    end
    if mark >= limit then
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
return _M
