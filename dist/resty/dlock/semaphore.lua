--[[ Generated with https://github.com/TypeScriptToLua/TypeScriptToLua ]]
local ____exports = {}
local acquire = require("resty.dlock.core.acquire")
local backend = require("resty.dlock.redis.backend")
local check = require("resty.dlock.core.check")
local lease = require("resty.dlock.core.lease")
local ledger = require("resty.dlock.core.ledger")
local meter = require("resty.dlock.core.meter")
local scripts = require("resty.dlock.redis.scripts")
local recovery = require("resty.dlock.core.recovery")
local token = require("resty.dlock.core.token")
local watchdog = require("resty.dlock.core.watchdog")
local ____with = require("resty.dlock.core.with")
local withLease = ____with.withLease
local ngx_now = ngx.now
local ngx_update_time = ngx.update_time
local lua_setmetatable = setmetatable
do
    local ____version = require("resty.dlock.version")
    ____exports._VERSION = ____version.VERSION
end
--- Most permits per key.
____exports.MAX_PERMITS = 100000
local PERMIT = {
    acquire = scripts.SEM_ACQUIRE,
    release = scripts.SEM_RELEASE,
    extend = scripts.SEM_EXTEND,
    shared = true,
    fenced = false,
    drop = nil
}
local NEW_OPTIONS = check.set(
    "dict",
    "redis",
    "prefix",
    "permits",
    "ttl",
    "wait",
    "name"
)
local semaphoreMethods = {
    acquire = function(self, key, opts)
        recovery.start()
        local store = self._store
        local k, ttlOrErr, wait, renew, onLost = lease.parseAcquire(store, key, opts)
        if k == nil then
            return nil, ttlOrErr, nil
        end
        ngx_update_time()
        local t0 = ngx_now()
        local tok, terr = token.random()
        if tok == nil then
            meter.refused(store.meter, terr)
            return nil, terr, nil
        end
        local l, err, retryAfter = acquire.acquire(
            store,
            PERMIT,
            k,
            tok,
            ttlOrErr,
            wait,
            self.permits
        )
        if l == nil then
            meter.refused(store.meter, err)
            return l, err, retryAfter
        end
        meter.acquired(store.meter, l._since / 1000 - t0)
        if not renew then
            return l, err, retryAfter
        end
        return watchdog.hold(l, onLost)
    end,
    held = function(self)
        return ledger.held(self._store.dict)
    end,
    with = withLease
}
local semaphoreMt = {__index = semaphoreMethods}
--- Create a semaphore factory. Returns it, or nil and an error naming the bad option.
-- 
-- @customName new
function ____exports.new(opts)
    if opts == nil then
        return nil, "dlock: semaphore.new needs an options table with at least dict and permits"
    end
    local o, oerr = check.options("semaphore.new options", opts, NEW_OPTIONS)
    if o == nil then
        return nil, oerr
    end
    local permits, perr = check.integer(
        "permits",
        o.permits,
        1,
        ____exports.MAX_PERMITS,
        "a positive integer"
    )
    if permits == nil then
        return nil, perr
    end
    local store, serr = lease.parseStore(o, "dlock:sem:", "semaphore")
    if store == nil then
        return nil, serr
    end
    local refused = backend.refuses(store.redis, "semaphore")
    if refused ~= nil then
        return nil, refused
    end
    recovery.register(store, PERMIT)
    local sem = {
        prefix = store.prefix,
        ttl = store.ttl,
        wait = store.wait,
        permits = permits,
        _store = store
    }
    return lua_setmetatable(sem, semaphoreMt), nil
end
return ____exports
