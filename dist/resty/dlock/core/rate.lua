-- Generated from src/resty/dlock/core/rate.ts by TypeScriptToLua: edit that file, not this one.
-- Rate limits on Redis' clock: GCRA (the generic cell rate algorithm), one
-- script call per decision, however many limits a request is under.
--
-- Per key, one Redis key holds each limit's theoretical arrival time (TAT):
-- a hash of them on Redis' TIME in us, or for a lone limit the key's own
-- expiry (ratescripts.lua). A limit of `rate` per `period` ms with `burst` spaces requests
-- `interval` = period * 1000 / rate us apart and lets a client be up to
-- burst * interval ahead of its schedule: from idle, `burst` at once, then one
-- per interval, so in any span of e ms at most burst + rate * e / period pass.
-- No window, hence no window edge to double up on.
--
-- One key per decision, whatever the number of limits: every topology runs
-- it, Cluster included (no hash tags, no cross-slot keys). Either every limit
-- of a request has room and each is charged, or none is (a refusal writes
-- nothing). Redlock is refused: a majority of independent counters does not
-- bound the total.
local _M = {}
local backend = require("resty.dlock.redis.backend")
local ratescripts = require("resty.dlock.redis.ratescripts")
local check = require("resty.dlock.core.check")
local options = require("resty.dlock.core.options")
local schema = require("resty.dlock.core.schema")
local call = backend.call
local RATE = ratescripts.RATE
local RATE_ONE = ratescripts.RATE_ONE
local RATE_BACK = ratescripts.RATE_BACK
local RATE_ONE_BACK = ratescripts.RATE_ONE_BACK
local str_format = string.format
local lua_type = type
local lua_tostring = tostring
local math_floor = math.floor
local math_ceil = math.ceil
local str_sub = string.sub
local lua_pairs = pairs
local lua_unpack = unpack
--- Longest period: 30 days, in ms.
_M.MAX_PERIOD = 30 * 86400000
local MAX_RATE = 1000000000
--- Longest capacity (burst * period / rate, the ms a whole burst takes to come
-- back): 10 years. Both scripts keep a time of that many us exact (a double's
-- 53 bits, the one-limit script's answer 4 * us ahead + outcome within 2^52,
-- the general script's TAT on Redis' clock written with %d).
local MAX_CAPACITY = 10 * 365 * 86400000
--- The one-limit script reads time from the key's expiry, in Redis' ms: a
-- request may see up to 1 ms less room than there is. A capacity short of a
-- request's cost and 1 ms would then admit less than the rate (3000 a second
-- with a burst of 1: one a ms), unless the interval is whole ms (every TAT then
-- falls on a ms, and the key expires right at it): such a decision goes to the
-- general script, which reads TIME in us.
local ONE_SLACK = 1000
--- A short policy name for a limit: "100-per-1m", "10-per-1s", "5-per-250ms".
local function nameOf(rate, period)
    local p = lua_tostring(period) .. "ms"
    if period % 86400000 == 0 then
        p = lua_tostring(period / 86400000) .. "d"
    elseif period % 3600000 == 0 then
        p = lua_tostring(period / 3600000) .. "h"
    elseif period % 60000 == 0 then
        p = lua_tostring(period / 60000) .. "m"
    elseif period % 1000 == 0 then
        p = lua_tostring(period / 1000) .. "s"
    end
    return lua_tostring(rate) .. "-per-" .. p
end
--- One limit from rate, period, burst and name (burst defaults to rate: a
-- client idle for a period may spend it at once). `where` prefixes the
-- option names in messages ("limits[2].").
local function limit(where, rate, period, burst, name)
    local r, e1 = check.integer(where .. "rate", rate, 1, MAX_RATE, "a positive integer")
    if r == nil then
        return nil, e1
    end
    local p, e2 = check.integer(
        where .. "period",
        period == nil and 1000 or period,
        1,
        _M.MAX_PERIOD,
        "a positive integer of ms"
    )
    if p == nil then
        return nil, e2
    end
    local b, e3 = check.integer(where .. "burst", burst == nil and r or burst, 1, MAX_RATE, "a positive integer")
    if b == nil then
        return nil, e3
    end
    local capacity = b * p / r
    if capacity > MAX_CAPACITY then
        return check.fail(
            where .. "burst * period / rate (the ms a whole burst takes to come back) must be at most " .. lua_tostring(MAX_CAPACITY) .. " (10 years)",
            capacity
        )
    end
    local n = nameOf(r, p)
    if name ~= nil then
        -- An sf-String in the RateLimit fields: printable ASCII, quoted; kept to a token's characters.
        local s, e4 = check.str(where .. "name", name, 64)
        if s == nil then
            return nil, e4
        end
        if check.found(s, "[^%w%-_%.:/]") then
            return check.fail(where .. "name must be letters, digits and -_.:/", s)
        end
        n = s
    end
    return {rate = r, period = p, burst = b, name = n}, nil
end
--- The limits a decision is under, with the arguments the script gets for them.
local function limits(list)
    local args = {}
    local most = list[1].burst
    local seen = {}
    for i = 1, #list do
        local l = list[i]
        if seen[l.name] ~= nil then
            return check.fail("two limits share the policy name " .. l.name .. " (give each a name)", l.name)
        end
        seen[l.name] = true
        args[2 * i - 2 + 1] = str_format("%.17g", l.period * 1000 / l.rate)
        args[2 * i] = lua_tostring(l.burst)
        if l.burst < most then
            most = l.burst
        end
    end
    local iv = list[1].period * 1000 / list[1].rate
    local cap = list[1].burst * iv
    local one = #list == 1
    return {
        list = list,
        args = args,
        most = most,
        interval = one and iv or nil,
        capacity = one and cap or 0,
        wholeMs = iv % 1000 == 0
    }, nil
end
-- The one-limit script's answer as the general script's reply. One table,
-- refilled by each decision: every caller reads it before it yields.
local answer = {}
--- The general script's reply from the one-limit script's answer n:
-- 4 * (us the client is ahead after the decision, or before a refusal) +
-- outcome. Worked out here as the general script does in Redis.
local function answered(n, ls, cost)
    local ahead = math_floor(n / 4)
    local outcome = n - ahead * 4
    local iv = ls.interval
    local cap = ls.capacity
    local left = math_floor((cap - ahead + 1) / iv + 1e-9)
    if left < 0 then
        left = 0
    end
    answer[1] = outcome
    answer[2] = outcome == 0 and math_ceil((ahead + cost * iv - cap) / 1000) or 0
    answer[3] = left
    answer[4] = math_ceil(ahead / 1000)
    return answer
end
--- The script's reply for key rkey under ls: mode "1" (decide, charge when
-- admitted), "0" (decide only) or "-1" (give cost back). nil, err and the
-- fault when Redis failed. The reply of a lone limit is refilled by the next
-- decision: read it before yielding.
function _M.decide(conf, rkey, ls, mode, cost)
    local a = ls.args
    local iv = ls.interval
    local one = iv ~= nil and (ls.wholeMs or cost * iv + ONE_SLACK <= ls.capacity)
    local res
    local err
    local fault
    -- Every argument a string: the encoder's tostring() of a number is not compiled.
    local c = cost == 1 and "1" or lua_tostring(cost)
    -- A lone limit (the usual case): its own script, with a fixed number of arguments (unpack() keeps the call out of LuaJIT's traces).
    local back = mode == "-1"
    if one then
        res, err, fault = call(conf, back and RATE_ONE_BACK or RATE_ONE, rkey, mode, c, a[1], a[2])
    else
        res, err, fault = call(conf, back and RATE_BACK or RATE, rkey, mode, c, lua_unpack(a))
    end
    if res == nil then
        return nil, err, fault
    end
    if lua_type(res) ~= (one and "number" or "table") then
        return nil, "dlock: rate script answered " .. check.show(res), "failed"
    end
    local reply = one and answered(res, ls, cost) or res
    return reply, nil, nil
end
--- A request's cost (its weight): a positive integer, at most the smallest
-- burst of ls (more could never pass: bad input, not a refusal); nil and the
-- error otherwise.
local function costOf(cost, ls)
    if lua_type(cost) == "number" and cost == math_floor(cost) and cost >= 1 and cost <= ls.most then
        return cost, nil
    end
    return check.fail(
        "cost must be a positive integer, at most the smallest burst (" .. lua_tostring(ls.most) .. ")",
        cost
    )
end
--- Remaining requests under limit i (1-based) of a reply.
function _M.remaining(reply, i)
    return reply[1 + 2 * i]
end
--- ms until limit i of a reply is full again.
function _M.full(reply, i)
    return reply[2 + 2 * i]
end
--- The smallest remaining of a reply, over n limits.
function _M.least(reply, n)
    -- One limit without the loop: a loop on the request's path keeps the whole path out of LuaJIT's traces.
    -- Locals, then the returns: not tail calls into a builtin (see core/clock.lua).
    if n == 1 then
        local one = math_floor(reply[3])
        return one
    end
    local r = reply[3]
    for i = 2, n do
        local x = reply[1 + 2 * i]
        if x < r then
            r = x
        end
    end
    local lowest = math_floor(r)
    return lowest
end
--- Most limits on one decision.
local MAX_LIMITS = 8
local SINGLE = {"rate", "period", "burst"}
local LIMIT_OPTIONS = check.set("rate", "period", "burst", "name")
--- The limits of an options table: rate, period and burst for one, or
-- `limits = { { rate =, period =, burst =, name = }, ... }` for several (not both).
function _M.parse(o)
    local many = o.limits
    if many == nil then
        if o.rate == nil then
            return check.fail("rate must be a positive integer (requests per period), or limits a list of { rate =, period = }", nil)
        end
        local l, err = limit("", o.rate, o.period, o.burst, nil)
        if l == nil then
            return nil, err
        end
        return limits({l})
    end
    for i = 1, 3 do
        local k = SINGLE[i]
        if o[k] ~= nil then
            return check.fail(k .. " and limits exclude each other: give each limit its own " .. k, o[k])
        end
    end
    local what = "limits must be a list of 1 to 8 tables { rate =, period =, burst =, name = }"
    if lua_type(many) ~= "table" then
        return check.fail(what, many)
    end
    local t = many
    local n = #t
    if n < 1 or n > MAX_LIMITS then
        return check.fail(what, many)
    end
    for k in lua_pairs(t) do
        if lua_type(k) ~= "number" or k < 1 or k > n or k ~= math_floor(k) then
            return check.fail(what, k)
        end
    end
    local list = {}
    for i = 1, n do
        local where = "limits[" .. lua_tostring(i) .. "]."
        local e, eerr = check.options(str_sub(where, 1, -2), t[i], LIMIT_OPTIONS)
        if e == nil then
            return nil, eerr
        end
        local l, err = limit(where, e.rate, e.period, e.burst, e.name)
        if l == nil then
            return nil, err
        end
        list[i] = l
    end
    return limits(list)
end
-- ------------------------------------------------------------------ rate.new's options
--- A limit's numbers: checked together by parse() (rate with burst, limits against the other three).
local function given(v)
    return v, nil
end
--- The option table of rate.new, declared once; the README's table is checked against it (spec/options_spec.lua).
_M.NEW_RATE = {
    options.DICT,
    {name = "name", kind = "check", check = options.checkName, default = "rate"},
    options.REDIS,
    {name = "rate", kind = "check", check = given, doc = "required (or `limits`)"},
    {name = "period", kind = "check", check = given, doc = "1000"},
    {name = "burst", kind = "check", check = given, doc = "`rate`"},
    {name = "limits", kind = "check", check = given, doc = "none"},
    {name = "prefix", kind = "string", maxLen = 256, doc = "`dlock:rate:<name>:`"}
}
_M.newRate = schema.compile("rate.new options", _M.NEW_RATE, {labels = ""})
-- Exported by name: this module's own use of it is a local, not a lookup in its exports table.
_M.answered = answered
_M.costOf = costOf
_M.limit = limit
_M.limits = limits
return _M
