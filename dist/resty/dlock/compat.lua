-- Generated from src/resty/dlock/compat.ts by TypeScriptToLua: edit that file, not this one.
-- resty.dlock.compat: lua-resty-lock's API, fleet-wide. Code written for the
-- in-nginx lock changes one require and then excludes every nginx sharing the
-- Redis, not only the workers of one:
--
--   local resty_lock = require "resty.dlock.compat"   -- was "resty.lock"
--   local lock, err = resty_lock:new("my_locks", { exptime = 10, timeout = 2 })
--   local elapsed, err = lock:lock(key)      -- 0 when taken at once, "timeout" when waiting ran out
--   ...
--   lock:unlock()
--
-- The shared dict named in new() keeps this nginx's bookkeeping; Redis decides
-- who holds a key. Redis is the local one unless configure() says otherwise,
-- once, in init_by_lua. One lock factory per dict serves every object, since
-- lua-resty-lock's users make an object per request.
local _M = {}
local dlock = require("resty.dlock")
local check = require("resty.dlock.core.check")
local options = require("resty.dlock.core.options")
local schema = require("resty.dlock.core.schema")
local lease = require("resty.dlock.core.lease")
local letgo = require("resty.dlock.core.letgo")
local version = require("resty.dlock.version")
local clock = require("resty.dlock.core.clock")
local token = require("resty.dlock.core.token")
local retry = require("resty.dlock.core.retry")
local meter = require("resty.dlock.core.meter")
_M._VERSION = version.VERSION
local lua_type = type
local lua_tostring = tostring
local lua_setmetatable = setmetatable
local math_floor = math.floor
local math_max = math.max
local math_min = math.min
local str_format = string.format
local ngx_shared = ngx.shared
local clock_now = clock.now
local ngx_update_time = ngx.update_time
local sha1_bin = ngx.sha1_bin
local hex = token.hex
local not_now = retry.notNow
local meter_refused = meter.refused
local phase_error = lease.phaseError
local let_go = letgo.letGo
--- Longest key the core takes as it is; lua-resty-lock's shared dict takes up to SHDICT_MAX_KEY.
local MAX_KEY_LEN = options.MAX_KEY_LEN
local SHDICT_MAX_KEY = 65535
--- lua-resty-lock's seconds (0.001 s precision) as ms; its default when absent.
local function seconds(name, dflt, min)
    return function(v)
        if v == nil then
            return dflt, nil
        end
        if lua_type(v) ~= "number" or v ~= v or v < min or v * 1000 > dlock.MAX_TTL then
            return check.fail(
                str_format("%s must be a number of seconds from %s to %d", name, min, dlock.MAX_TTL / 1000),
                v
            )
        end
        return math_floor(v * 1000 + 0.5), nil
    end
end
--- lua-resty-lock's polling steps: checked, not used (a waiter is woken when the key is released).
local function polling(name)
    return function(v)
        -- NaN is a number, and not positive.
        if v ~= nil and (lua_type(v) ~= "number" or v ~= v or v <= 0) then
            return check.fail(name .. " must be a positive number", v)
        end
        return v, nil
    end
end
--- new(dict, opts): exptime and timeout come back in ms.
_M.NEW = {
    {name = "exptime", kind = "check", check = seconds("exptime", 30000, 0.001), doc = "30"},
    {name = "timeout", kind = "check", check = seconds("timeout", 5000, 0), doc = "5"},
    {name = "step", kind = "check", check = polling("step"), doc = "not used"},
    {name = "ratio", kind = "check", check = polling("ratio"), doc = "not used"},
    {name = "max_step", kind = "check", check = polling("max_step"), doc = "not used"}
}
--- configure(opts): where the locks live.
_M.CONFIGURE = {options.REDIS, {name = "prefix", kind = "string", maxLen = 256, empty = true, default = "dlock:compat:"}, {name = "name", kind = "check", check = options.checkName, default = "compat"}}
local newOptions = schema.compile("compat new options", _M.NEW, {labels = ""})
local configureOptions = schema.compile("compat.configure options", _M.CONFIGURE, {labels = ""})
local settings = {redis = nil, prefix = "dlock:compat:", name = "compat"}
--- A factory per shared dict, made at the first new() that names it.
local factories = {}
--- Where the locks live, for every object made after it: redis (as for dlock.new),
-- prefix (default "dlock:compat:"), name (metrics; default "compat"). true, or nil, err.
function _M.configure(opts)
    -- Checked now, so that a mistake shows in init_by_lua rather than at the first lock.
    local o, err = configureOptions(opts)
    if o == nil then
        return nil, err
    end
    -- The factories get the table as given: dlock.new checks it again, with their dict.
    -- No table at all (configure()) means every default, as the schema took it.
    local redis
    if lua_type(opts) == "table" then
        redis = opts.redis
    end
    settings = {redis = redis, prefix = o.prefix, name = o.name}
    factories = {}
    return true, nil
end
local function makeFactory(dictName)
    local o = {}
    o.dict = dictName
    o.redis = settings.redis
    o.prefix = settings.prefix
    o.name = settings.name
    return dlock.new(o)
end
--- expire()'s time, as exptime is checked (its default is the lock's own exptime).
local expireSeconds = seconds("time", 0, 0.001)
local methods = {
    lock = function(self, key)
        if key == nil then
            return nil, "nil key"
        end
        if self._lease ~= nil then
            return nil, "locked"
        end
        -- lua-resty-lock keys its shared dict, which takes a number as its string.
        if lua_type(key) == "number" then
            key = lua_tostring(key)
        end
        if lua_type(key) == "string" and #key > MAX_KEY_LEN then
            local n = #key
            if n > SHDICT_MAX_KEY then
                return nil, "dlock: key must be at most " .. lua_tostring(SHDICT_MAX_KEY) .. " bytes, got " .. lua_tostring(n) .. " bytes"
            end
            -- A cache key built from a URI can be long: it is held under its digest,
            -- a Redis key of fixed length. Keys the core takes keep the Redis key they always had.
            key = "sha1:" .. hex(sha1_bin(key))
        end
        -- Its busy answer is not metered: the wait that follows is the outcome (or the refusal, counted below).
        local l, err = self._locks:_try(key, self._try)
        if l ~= nil then
            self._lease = l
            return 0, nil
        end
        if err == "busy" and self._wait == nil then
            meter_refused(self._locks._store.meter, "busy")
        end
        -- Taken, or a Redis that answered "not now" (BUSY, LOADING, a failover):
        -- either is waited out within the timeout, as a waiting acquire does.
        if (err == "busy" or not_now(err)) and self._wait ~= nil then
            ngx_update_time()
            local t0 = clock_now()
            l, err = self._locks:acquire(key, self._wait)
            if l ~= nil then
                self._lease = l
                ngx_update_time()
                -- Never 0: callers read 0 as "nobody held it" (and skip re-checking their cache).
                return math_max(0.001, clock_now() - t0), nil
            end
        end
        if err == "busy" or err == "timeout" then
            return nil, "timeout"
        end
        return nil, err
    end,
    unlock = function(self)
        local l = self._lease
        if l == nil then
            return nil, "unlocked"
        end
        if phase_error("release") ~= nil then
            -- lua-resty-lock's unlock works in any phase, the log phase too, where a
            -- request ends however it ends: here the release goes without waiting.
            self._lease = nil
            let_go(l)
            return 1, nil
        end
        local ok, err = l:release()
        if ok then
            self._lease = nil
            return 1, nil
        end
        -- Redis did not answer: the key may still be ours, so unlock() can be called again.
        if err == "not_owner" then
            self._lease = nil
        end
        return nil, err
    end,
    expire = function(self, time)
        local l = self._lease
        if l == nil then
            return nil, "unlocked"
        end
        local ms = self._exptime
        if time ~= nil then
            local given, terr = expireSeconds(time)
            if terr ~= nil then
                return nil, terr
            end
            ms = given
        end
        local ok, err = l:extend(ms)
        -- Held on to even when it is no longer ours, as lua-resty-lock keeps its key after a failed expire:
        -- unlock() says what became of it and ends it.
        if not ok then
            return nil, err
        end
        return true, nil
    end
}
local mt = {__index = methods}
--- lock:new(dict_name, opts): a lock object, or nil, err ("dictionary not found",
-- or "dlock: ..." naming a bad option). opts: exptime (s, default 30), timeout
-- (s, default 5, at most exptime), step, ratio, max_step (checked, not used:
-- waiters are woken when the key is released instead of polling).
function _M.new(_module, dictName, opts)
    if lua_type(dictName) ~= "string" or ngx_shared[dictName] == nil then
        return nil, "dictionary not found"
    end
    local o, oerr = newOptions(opts)
    if o == nil then
        return nil, oerr
    end
    local exptime = o.exptime
    local timeout = o.timeout
    local locks = factories[dictName]
    if locks == nil then
        local f, ferr = makeFactory(dictName)
        if f == nil then
            return nil, ferr
        end
        factories[dictName] = f
        locks = f
    end
    local ttl = exptime
    -- lua-resty-lock never waits longer than the lock it waits for lives.
    local wait = math_min(timeout, ttl)
    local tryOpts = {}
    tryOpts.ttl = ttl
    tryOpts.wait = 0
    local waitOpts
    if wait > 0 then
        waitOpts = {}
        waitOpts.ttl = ttl
        waitOpts.wait = wait
    end
    local lock = {_locks = locks, _exptime = exptime, _try = tryOpts, _wait = waitOpts, _lease = nil}
    return lua_setmetatable(lock, mt), nil
end
return _M
