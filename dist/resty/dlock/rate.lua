-- Generated from src/resty/dlock/rate.ts by TypeScriptToLua: edit that file, not this one.
-- resty.dlock.rate: rate limits shared by every nginx of a fleet, decided on
-- Redis' clock (GCRA, core/rate.lua), shaped like lua-resty-limit-traffic's
-- limiters so that resty.limit.traffic.combine() takes them alongside
-- resty.limit.req / count / conn.
--
--   local rate = require "resty.dlock.rate"
--   local lim = assert(rate.new({ dict = "dlock", redis = { host = "127.0.0.1" }, rate = 100, period = 60000, burst = 20 }))
--   local delay, remaining, retry_after = lim:incoming(ngx.var.http_x_api_key, true)   -- a non-empty key (else nil, err)
--   if not delay then
--     if remaining == "rejected" then return ngx.exit(429) end   -- retry_after ms from now
--     ngx.log(ngx.ERR, remaining) return ngx.exit(500)            -- Redis failed
--   end
local _M = {}
local check = require("resty.dlock.core.check")
local lease = require("resty.dlock.core.lease")
local core = require("resty.dlock.core.rate")
local backend = require("resty.dlock.redis.backend")
local version = require("resty.dlock.version")
_M._VERSION = version.VERSION
local decide = core.decide
local least = core.least
local costOf = core.costOf
local phaseError = lease.phaseError
local lua_type = type
local notSelf = check.notSelf
local lua_setmetatable = setmetatable
--- Longest key, in bytes (before the prefix).
local MAX_KEY = 1024
--- The limiters' metatable (its __index, the methods, is set once they are).
local limiterMt = {}
--- The Redis key of key, or nil and the error.
local function keyOf(lim, key, cost, op, call)
    local bad = notSelf(lim, limiterMt, call)
    if bad ~= nil then
        return nil, bad
    end
    local perr = phaseError(op)
    if perr ~= nil then
        return nil, perr
    end
    if lua_type(key) ~= "string" or #key == 0 or #key > MAX_KEY then
        return check.fail("key must be a non-empty string of at most 1024 bytes", key)
    end
    if cost ~= 1 then
        local c, cerr = costOf(cost, lim._limits)
        if c == nil then
            return nil, cerr
        end
    end
    return lim._prefix .. key, nil
end
local limiterMethods = {
    incoming = function(self, key, commit, cost)
        local c = cost == nil and 1 or cost
        local rkey, err = keyOf(self, key, c, "incoming", "lim:incoming()")
        if rkey == nil then
            return nil, err, nil
        end
        local reply, rerr = decide(self._redis, rkey, self._limits, commit and "1" or "0", c)
        if reply == nil then
            return nil, rerr, nil
        end
        if reply[1] == 0 then
            return nil, "rejected", reply[2]
        end
        return 0, least(reply, #self._limits.list), nil
    end,
    uncommit = function(self, key, cost)
        local c = cost == nil and 1 or cost
        local rkey, err = keyOf(self, key, c, "uncommit", "lim:uncommit()")
        if rkey == nil then
            return nil, err
        end
        local reply, rerr = decide(self._redis, rkey, self._limits, "-1", c)
        if reply == nil then
            return nil, rerr
        end
        return least(reply, #self._limits.list), nil
    end
}
limiterMt.__index = limiterMethods
--- syntax: lim, err = rate.new({ dict =, redis =, rate =, period =, burst =, prefix =, name = })
-- (or limits = { {...}, ... } in place of rate, period and burst).
function _M.new(opts)
    if opts == nil then
        return nil, "dlock: rate.new needs an options table with dict and rate"
    end
    local o, oerr = core.newRate(opts)
    if o == nil then
        return nil, oerr
    end
    -- rate, period, burst and limits, checked together.
    local ls, lerr = core.parse(opts)
    if ls == nil then
        return nil, lerr
    end
    local conf = o.redis
    local refused = backend.refuses(conf, "rate")
    if refused ~= nil then
        return nil, refused
    end
    local name = o.name
    local dict = o.dict
    local prefix = o.prefix or "dlock:rate:" .. name .. ":"
    local lim = {
        name = name,
        _dict = dict,
        _redis = conf,
        prefix = prefix,
        _prefix = prefix,
        _limits = ls
    }
    return lua_setmetatable(lim, limiterMt), nil
end
return _M
