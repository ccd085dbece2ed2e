--[[ Generated with https://github.com/TypeScriptToLua/TypeScriptToLua ]]
local ____exports = {}
local check = require("resty.dlock.core.check")
local ngx_now = ngx.now
local math_floor = math.floor
local math_max = math.max
local math_min = math.min
local str_find = string.find
local lua_type = type
local lua_ipairs = ipairs
local lua_tostring = tostring
local str_format = string.format
--- Upper bounds (s) of the acquire-wait buckets; the last bucket is +Inf.
____exports.WAIT_BOUNDS = {
    0.001,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    5
}
--- Upper bounds (s) of the hold-time buckets; the last bucket is +Inf.
____exports.HOLD_BOUNDS = {
    0.01,
    0.05,
    0.1,
    0.5,
    1,
    5,
    10,
    30,
    60,
    300
}
--- Seconds an expiry second is left before it is swept: a record outlives its second by the dict's clock skew.
local GRACE = 2
--- Most seconds one read sweeps (a scrape after a day without one catches up over a few).
local MAX_SWEEP = 3600
--- Dicts of the factories made in this process, for status pages.
local dicts = {}
--- A factory name: letters, digits, '_', '-' and '.', at most 64 bytes (a label in metrics).
function ____exports.checkName(v)
    local n, err = check.str("name", v, 64)
    if n == nil then
        return nil, err
    end
    local bad = str_find(n, "[^%w_%-%.]")
    if bad ~= nil then
        return check.fail("name may hold letters, digits, '_', '-' and '.' only", n)
    end
    return n, nil
end
local function buckets(p, n)
    local out = {}
    for i = 1, n do
        out[#out + 1] = p .. lua_tostring(i)
    end
    return out
end
--- The instruments of factory `name` in `dict`: made at new(), so that counting builds no key.
function ____exports.make(dict, name)
    local p = ("m:" .. name) .. ":"
    if (dict:safe_add("m:?" .. name, true)) then
        local i = dict:incr("m:n", 1, 0)
        if i ~= nil then
            dict:safe_set(
                "m:#" .. lua_tostring(i),
                name
            )
        end
    end
    dict:safe_add(
        p .. "swept",
        math_floor(ngx_now()) - 1
    )
    dict:safe_add(p .. "held", 0)
    local known = false
    for ____, d in lua_ipairs(dicts) do
        if d == dict then
            known = true
        end
    end
    if not known then
        dicts[#dicts + 1] = dict
    end
    return {
        name = name,
        dict = dict,
        busy = p .. "busy",
        timeout = p .. "timeout",
        error = p .. "error",
        lost = p .. "lost",
        wait = buckets(p .. "w", #____exports.WAIT_BOUNDS + 1),
        waitSum = p .. "ws",
        hold = buckets(p .. "h", #____exports.HOLD_BOUNDS + 1),
        holdSum = p .. "hs",
        held = p .. "held",
        exp = p .. "e",
        swept = p .. "swept",
        sweeping = p .. "sweeping"
    }
end
--- The dicts factories of this process count in.
function ____exports.known()
    return dicts
end
--- About how many keys the instruments of every factory take in a dict: the
-- counters and buckets of each name, and a minute of expiry seconds each.
function ____exports.keys(dict)
    local n = dict:get("m:n")
    return lua_type(n) == "number" and n * (2 * #____exports.WAIT_BOUNDS + 16 + 60) or 0
end
--- Factory names counted in a dict (by any worker), in the order they were first made.
function ____exports.names(dict)
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
local function waitBucket(s)
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
local function holdBucket(s)
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
--- An acquire took a lease after `s` seconds.
function ____exports.acquired(m, s)
    m.dict:incr(
        m.wait[waitBucket(s)],
        1,
        0
    )
    m.dict:incr(m.waitSum, s, 0)
end
--- An acquire ended without a lease: "busy", "timeout", or anything else (an error).
function ____exports.refused(m, err)
    m.dict:incr(err == "busy" and m.busy or (err == "timeout" and m.timeout or m.error), 1, 0)
end
--- A lease was released, confirmed, after `s` seconds held.
function ____exports.released(m, s)
    m.dict:incr(
        m.hold[holdBucket(s)],
        1,
        0
    )
    m.dict:incr(m.holdSum, s, 0)
end
function ____exports.lost(m)
    m.dict:incr(m.lost, 1, 0)
end
local SECOND = "%s%d"
--- A lease's record was made, expiring at epoch ms `expires`.
function ____exports.recorded(m, expires)
    m.dict:incr(m.held, 1, 0)
    m.dict:incr(
        str_format(
            SECOND,
            m.exp,
            math_floor(expires / 1000)
        ),
        1,
        0
    )
end
--- A lease's record, expiring at epoch ms `expires`, was deleted before it expired.
function ____exports.forgotten(m, expires)
    m.dict:incr(m.held, -1, 0)
    m.dict:incr(
        str_format(
            SECOND,
            m.exp,
            math_floor(expires / 1000)
        ),
        -1,
        0
    )
end
--- A record's expiry moved (extend) from epoch ms `from` to `to`.
function ____exports.moved(m, from, to)
    local a = math_floor(from / 1000)
    local b = math_floor(to / 1000)
    if a == b then
        return
    end
    m.dict:incr(
        str_format(SECOND, m.exp, a),
        -1,
        0
    )
    m.dict:incr(
        str_format(SECOND, m.exp, b),
        1,
        0
    )
end
local function num(dict, key)
    local v = dict:get(key)
    return lua_type(v) == "number" and v or 0
end
--- Take the records that expired (by their second) off the held gauge of factory
-- `name`. One worker at a time (a dict key as the lock); one that finds it
-- taken reads the gauge as it is.
local function sweep(dict, p)
    local limit = math_floor(ngx_now()) - GRACE
    local mark = dict:get(p .. "swept")
    if lua_type(mark) ~= "number" or mark >= limit then
        return
    end
    if not (dict:add(p .. "sweeping", true, 1)) then
        return
    end
    local s = num(dict, p .. "swept")
    local stop = math_min(limit, s + MAX_SWEEP)
    local gone = 0
    while s < stop do
        s = s + 1
        local v = dict:get((p .. "e") .. lua_tostring(s))
        if v ~= nil then
            if lua_type(v) == "number" then
                gone = gone + v
            end
            dict:delete((p .. "e") .. lua_tostring(s))
        end
    end
    if gone ~= 0 then
        dict:incr(p .. "held", -gone, 0)
    end
    dict:set(p .. "swept", s)
    dict:delete(p .. "sweeping")
end
--- A fixed number of dict reads: the counters, the buckets, the gauge (after a sweep).
function ____exports.read(dict, name)
    local p = ("m:" .. name) .. ":"
    sweep(dict, p)
    local wait = {}
    local acquiredN = 0
    for i = 1, #____exports.WAIT_BOUNDS + 1 do
        local n = num(
            dict,
            (p .. "w") .. lua_tostring(i)
        )
        wait[#wait + 1] = n
        acquiredN = acquiredN + n
    end
    local hold = {}
    for i = 1, #____exports.HOLD_BOUNDS + 1 do
        hold[#hold + 1] = num(
            dict,
            (p .. "h") .. lua_tostring(i)
        )
    end
    return {
        held = math_max(
            0,
            num(dict, p .. "held")
        ),
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
return ____exports
