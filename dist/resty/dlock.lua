--[[ Generated with https://github.com/TypeScriptToLua/TypeScriptToLua ]]
local ____exports = {}
local acquire = require("resty.dlock.core.acquire")
local backend = require("resty.dlock.redis.backend")
local check = require("resty.dlock.core.check")
local lease = require("resty.dlock.core.lease")
local ledger = require("resty.dlock.core.ledger")
local meter = require("resty.dlock.core.meter")
local recovery = require("resty.dlock.core.recovery")
local reentrant = require("resty.dlock.core.reentrant")
local scripts = require("resty.dlock.redis.scripts")
local token = require("resty.dlock.core.token")
local watchdog = require("resty.dlock.core.watchdog")
do
    local ____version = require("resty.dlock.version")
    ____exports._VERSION = ____version.VERSION
end
____exports.MAX_KEY_LEN = lease.MAX_KEY_LEN
____exports.MAX_TTL = lease.MAX_TTL
local LOCK = {
    acquire = scripts.ACQUIRE_QUEUED,
    release = scripts.RELEASE_QUEUED,
    extend = scripts.EXTEND,
    shared = false,
    fenced = false,
    drop = scripts.DROP
}
local FENCED_LOCK = {
    acquire = scripts.ACQUIRE_QUEUED_FENCED,
    release = scripts.RELEASE_QUEUED,
    extend = scripts.EXTEND,
    shared = false,
    fenced = true,
    drop = scripts.DROP
}
local MAJORITY_LOCK = {
    acquire = scripts.ACQUIRE,
    release = scripts.RELEASE,
    extend = scripts.EXTEND,
    shared = false,
    fenced = false,
    drop = nil
}
local NEW_OPTIONS = check.set(
    "dict",
    "redis",
    "prefix",
    "owner",
    "ttl",
    "wait",
    "fencing",
    "reentrant",
    "name"
)
local locksMethods = {
    acquire = function(self, key, opts)
        recovery.start()
        local k, ttlOrErr, wait, renew, onLost = lease.parseAcquire(self, key, opts)
        if k == nil then
            return nil, ttlOrErr, nil
        end
        if self.reentrant then
            local again = reentrant.nested(self.id, self.prefix .. k)
            if again ~= nil then
                return again, nil, nil
            end
        end
        ngx.update_time()
        local t0 = ngx.now()
        local tok, terr = (self.owner == "worker" and token.worker or token.random)()
        if tok == nil then
            meter.refused(self.meter, terr)
            return nil, terr, nil
        end
        local l, err, retryAfter = acquire.acquire(
            self,
            self.kind,
            k,
            tok,
            ttlOrErr,
            wait
        )
        if l == nil then
            meter.refused(self.meter, err)
            return l, err, retryAfter
        end
        meter.acquired(self.meter, l.since / 1000 - t0)
        if renew then
            l, err, retryAfter = watchdog.hold(l, onLost)
        end
        if l ~= nil and self.reentrant then
            l = reentrant.enter(self.id, l)
        end
        return l, err, retryAfter
    end,
    held = function(self)
        return ledger.held(self.dict)
    end,
    with = lease.withLease
}
local locksMt = {__index = locksMethods}
--- Factories made in this process: their ids for reentrant holds.
local factories = 0
--- Create a lock factory. Returns locks, or nil and an error naming the bad option.
-- 
-- @customName new
function ____exports.new(opts)
    if opts == nil then
        return nil, "dlock: new needs an options table with at least dict"
    end
    local o, oerr = check.options("dlock.new options", opts, NEW_OPTIONS)
    if o == nil then
        return nil, oerr
    end
    local store, serr = lease.parseStore(o, "dlock:", "dlock")
    if store == nil then
        return nil, serr
    end
    local owner = "random"
    local ov = o.owner
    if ov ~= nil then
        if ov ~= "random" and ov ~= "worker" then
            return check.fail("owner must be \"random\" or \"worker\"", ov)
        end
        owner = ov
    end
    local fencing = false
    if o.fencing ~= nil then
        local b, err = check.bool("fencing", o.fencing)
        if b == nil then
            return nil, err
        end
        fencing = b
    end
    if fencing then
        local refused = backend.refuses(store.redis, "fencing")
        if refused ~= nil then
            return nil, refused
        end
    end
    local kind = not backend.queues(store.redis) and MAJORITY_LOCK or (fencing and FENCED_LOCK or LOCK)
    local reent = false
    if o.reentrant ~= nil then
        local b, err = check.bool("reentrant", o.reentrant)
        if b == nil then
            return nil, err
        end
        reent = b
    end
    factories = factories + 1
    local locks = {
        dict = store.dict,
        redis = store.redis,
        prefix = store.prefix,
        ttl = store.ttl,
        wait = store.wait,
        meter = store.meter,
        owner = owner,
        kind = kind,
        reentrant = reent,
        id = tostring(factories)
    }
    recovery.register(store, kind)
    return setmetatable(locks, locksMt), nil
end
--- For init_worker_by_lua: release, owner-checked, the leases a worker that
-- died (SIGKILL, a crash) left in Redis, as soon as nginx replaces it (without
-- it this happens at the worker's first acquire). Returns true, or nil, err.
function ____exports.init_worker()
    local err = recovery.start()
    if err ~= nil then
        return nil, err
    end
    return true, nil
end
return ____exports
