-- Generated from src/resty/dlock/gateway.ts by TypeScriptToLua: edit that file, not this one.
-- resty.dlock.gateway: request guards for nginx.conf, built on locks and semaphores.
--
--   init_by_lua_block {
--     local gateway = require "resty.dlock.gateway"
--     guards = { orders = assert(gateway.new({ name = "orders", mode = "dedup",
--                  key = "$http_idempotency_key", ttl = 30000, hold = 5000, on_error = "allow" })) }
--   }
--   log_by_lua_block { require("resty.dlock.gateway").log() }   -- http level: every request's end
--   location /orders { access_by_lua_block { guards.orders:access() }  proxy_pass ...; }
--
-- Modes: dedup (409 while the same key is in flight, optionally `hold` ms after a
-- 2xx), concurrency (at most `permits` in flight per key, 429 after `wait`),
-- throttle (one request per key per `ttl`, 429), mutex (one at a time, 503 after `wait`),
-- idempotency (gateway/idempotency.lua), rate (`rate` per `period` ms per key, 429: gateway/rate.lua).
local _M = {}
local check = require("resty.dlock.core.check")
local dlock = require("resty.dlock")
local common = require("resty.dlock.gateway.common")
local idempotency = require("resty.dlock.gateway.idempotency")
local inflight = require("resty.dlock.gateway.inflight")
local lockLocal = require("resty.dlock.gateway.lock_local")
local rateLocal = require("resty.dlock.gateway.rate_local")
local recovery = require("resty.dlock.core.recovery")
local workers = require("resty.dlock.core.workers")
local guard = require("resty.dlock.gateway.guard")
local rate = require("resty.dlock.gateway.rate")
local registry = require("resty.dlock.gateway.registry")
local options = require("resty.dlock.gateway.options")
local semaphore = require("resty.dlock.semaphore")
local seen = require("resty.dlock.gateway.seen")
local stats = require("resty.dlock.gateway.stats")
local breaker = require("resty.dlock.gateway.breaker")
local version = require("resty.dlock.version")
_M._VERSION = version.VERSION
local lua_tostring = tostring
local lua_setmetatable = setmetatable
local str_gsub = string.gsub
local get_phase = ngx.get_phase
--- The options of the lock (or semaphore) underneath: the guard's, as the user gave them.
local function lockOptions(given, o, name)
    local base = {}
    local dict = given.dict
    if dict == nil then
        dict = "dlock"
    end
    base.dict = dict
    base.redis = given.redis
    base.prefix = o.prefix or "dlock:gw:" .. name .. ":"
    base.ttl = o.ttl
    base.wait = o.wait
    -- Its counters and histograms under the guard's name ("mutex#1" as "mutex_1").
    base.name = (str_gsub(name, "[^%w_%-%.]", "_"))
    if o.permits ~= nil then
        base.permits = o.permits
    end
    return base
end
--- Create a guard (once, in init_by_lua). Returns it, or nil and an error naming the bad option.
function _M.new(opts)
    local phase = get_phase()
    if phase ~= "init" and phase ~= "init_worker" and phase ~= "timer" then
        -- Each request would get a lock of its own (excluding nothing) and a name of its own in the metrics.
        return nil, "dlock: gateway.new in the " .. phase .. " phase: create guards once, in init_by_lua " .. "or init_worker_by_lua, not per request (a guard made per request excludes nothing and adds metrics without bound)"
    end
    if opts == nil then
        return nil, "dlock: gateway.new needs an options table with mode, key and on_error"
    end
    local o, oerr = options.validate(opts)
    if o == nil then
        return nil, oerr
    end
    local mode = o.mode
    local name = o.name or mode .. "#" .. lua_tostring(registry.count() + 1)
    if registry.taken(name) then
        return check.fail("a guard with this name exists already", name)
    end
    if mode == "idempotency" then
        -- Its own module: Redis records and response capture of its own.
        local ig, ierr = idempotency.create(o, name)
        if ig == nil then
            return nil, ierr
        end
        registry.add(ig)
        return ig, nil
    end
    if mode == "rate" then
        -- Its own module: a Redis script of its own, nothing held while the request runs.
        local rg, rerr = rate.create(o, name)
        if rg == nil then
            return nil, rerr
        end
        if rg._shares ~= nil then
            workers.onStart(function() return rateLocal.resume(rg) end)
        end
        registry.add(rg)
        return rg, nil
    end
    -- The lock (or semaphore) underneath: the options checked above, checked again there (at new() only).
    local base = lockOptions(opts, o, name)
    local locks
    local lerr
    if mode == "concurrency" then
        locks, lerr = semaphore.new(base)
    else
        locks, lerr = dlock.new(base)
    end
    if locks == nil then
        return nil, lerr
    end
    local store = locks._store
    recovery.keep(store)
    -- A factory that refuses readers says why (redis.redlock).
    local sharedMethods = o.shared
    local sharedTry
    local sharedWait
    if sharedMethods ~= nil then
        local noReaders = locks._noReaders
        if noReaders ~= nil then
            return nil, noReaders
        end
        sharedTry = {}
        sharedTry.wait = 0
        sharedTry.shared = true
        sharedWait = {}
        sharedWait.wait = store.wait
        sharedWait.shared = true
    end
    local tryOpts = {}
    tryOpts.wait = 0
    local waitOpts = {}
    waitOpts.wait = store.wait
    local fallback
    if o.on_error == "local" then
        local l, llerr = lockLocal.create(mode, o.permits or 1, o.fleet, name, store.ttl, breaker.probeWindow(store.redis))
        if l == nil then
            return nil, llerr
        end
        fallback = l
    elseif o.fleet ~= nil then
        return check.fail("fleet applies with on_error = \"local\" only", o.fleet)
    end
    local key = o.key
    local rejectStatus = o.reject_status or options.mode(mode).status
    local g = {
        name = name,
        mode = mode,
        _key = key,
        _missingWhat = common.missingWhat(o.on_missing, o.missing_status),
        _errorWhat = common.errorWhat(o.on_error, o.error_status),
        _locks = locks,
        _dict = store.dict,
        _ttl = store.ttl,
        _hold = o.hold or 0,
        _wait = store.wait,
        _renew = o.renew == true,
        _release = mode ~= "throttle",
        _givesBack = mode == "throttle",
        _readBody = o.read_body == true,
        _onMissing = o.on_missing,
        _onError = o.on_error,
        _fallback = fallback,
        _rejectStatus = rejectStatus,
        _missingStatus = o.missing_status,
        _errorStatus = o.error_status,
        _headers = o.headers,
        _refused = seen.create(),
        _breakerFailures = o.breaker_failures,
        _breakerCooldown = o.breaker_cooldown,
        _probeFor = breaker.probeWindow(store.redis),
        _tryOpts = tryOpts,
        _waitOpts = waitOpts,
        _sharedMethods = sharedMethods,
        _sharedTry = sharedTry,
        _sharedWait = sharedWait
    }
    stats.prepare(store.dict, name)
    local made = lua_setmetatable(g, guard.mt)
    if fallback ~= nil then
        lockLocal.register(made)
        workers.onStart(function() return lockLocal.resume(made) end)
    end
    registry.add(made)
    return made, nil
end
--- log_by_lua at http (or server) level: ends the leases of every guard the
-- request passed, in whatever location it finished, also after internal redirects.
function _M.log()
    inflight.finish(nil)
    lockLocal.finishAll()
    idempotency.finish()
end
--- header_filter_by_lua at http (or server) level: idempotency guards note the
-- status and headers of the response to store. Does nothing for other requests.
function _M.header_filter()
    idempotency.headerFilter()
end
--- body_filter_by_lua at http (or server) level: idempotency guards keep the body to store (up to max_body).
function _M.body_filter()
    idempotency.bodyFilter()
end
return _M
