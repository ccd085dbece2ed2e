-- Generated from src/resty/dlock/semaphore.ts by TypeScriptToLua: edit that file, not this one.
-- resty.dlock.semaphore: at most `permits` holders per key across the fleet.
--
--   local semaphore = require "resty.dlock.semaphore"
--   local sem = assert(semaphore.new({ dict = "dlock", permits = 3, redis = { ... } }))
--   local permit, err, retry_after = sem:acquire("reports:" .. ngx.var.remote_addr, { ttl = 60000, wait = 2000 })
--   ...
--   permit:release()
--
-- Each permit is a lease of its own (random token, ttl, owner-checked release
-- and extend), so capacity held by a crashed nginx comes back when its permits expire.
local _M = {}
local acquire = require("resty.dlock.core.acquire")
local backend = require("resty.dlock.redis.backend")
local check = require("resty.dlock.core.check")
local options = require("resty.dlock.core.options")
local ledger = require("resty.dlock.core.ledger")
local scripts = require("resty.dlock.redis.scripts")
local recovery = require("resty.dlock.core.recovery")
local token = require("resty.dlock.core.token")
local watchdog = require("resty.dlock.core.watchdog")
local scoped = require("resty.dlock.core.with")
local version = require("resty.dlock.version")
local metered = acquire.metered
local opening = acquire.opening
local lua_setmetatable = setmetatable
local notSelf = check.notSelf
_M._VERSION = version.VERSION
--- Most permits per key.
_M.MAX_PERMITS = options.MAX_PERMITS
local PERMIT = {
    acquire = scripts.SEM_ACQUIRE,
    release = scripts.SEM_RELEASE,
    extend = scripts.SEM_EXTEND,
    shared = true,
    fenced = false,
    drop = nil
}
--- The semaphores' metatable (its __index, the methods, is set once they are).
local semaphoreMt = {}
--- sem:acquire(), its busy answer metered when busyCounts.
local function take(sem, key, opts, busyCounts)
    local refused = opening(sem, semaphoreMt, "sem:acquire()", "acquire")
    if refused ~= nil then
        return nil, refused, nil
    end
    local store = sem._store
    local bad, k, rkey, ttl, wait, renew, onLost = options.acquire(store, key, opts, false)
    if bad ~= nil then
        return nil, bad, nil
    end
    local l, err, retryAfter = metered(store, PERMIT, k, rkey, token.random, nil, ttl, wait, busyCounts, sem._permits)
    if l == nil or not renew then
        return l, err, retryAfter
    end
    return watchdog.hold(l, onLost)
end
local semaphoreMethods = {
    acquire = function(self, key, opts)
        return take(self, key, opts, true)
    end,
    _try = function(self, key, opts)
        return take(self, key, opts, false)
    end,
    held = function(self)
        local bad = notSelf(self, semaphoreMt, "sem:held()")
        if bad ~= nil then
            return nil, bad
        end
        return ledger.held(self._store.dict), nil
    end,
    with = scoped.withLease
}
semaphoreMt.__index = semaphoreMethods
--- Create a semaphore factory. Returns it, or nil and an error naming the bad option.
function _M.new(opts)
    if opts == nil then
        return nil, "dlock: semaphore.new needs an options table with at least dict and permits"
    end
    local o, oerr = options.newSemaphore(opts)
    if o == nil then
        return nil, oerr
    end
    local refused = backend.refuses(o.redis, "semaphore")
    if refused ~= nil then
        return nil, refused
    end
    local store = options.store(o)
    recovery.register(store, PERMIT)
    local sem = {
        prefix = store.prefix,
        ttl = store.ttl,
        wait = store.wait,
        permits = o.permits,
        _permits = o.permits,
        _store = store
    }
    return lua_setmetatable(sem, semaphoreMt), nil
end
return _M
