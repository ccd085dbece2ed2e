-- Generated from src/resty/dlock.ts by TypeScriptToLua: edit that file, not this one.
-- resty.dlock: a distributed lock on Redis for OpenResty.
--
--   local dlock = require "resty.dlock"
--   local locks = assert(dlock.new({ dict = "dlock", redis = { host = "127.0.0.1" } }))
--   local lease, err, retry_after = locks:acquire("orders:42", { ttl = 10000, wait = 0 })
--   ...
--   lease:release()
local _M = {}
local acquire = require("resty.dlock.core.acquire")
local backend = require("resty.dlock.redis.backend")
local check = require("resty.dlock.core.check")
local options = require("resty.dlock.core.options")
local ledger = require("resty.dlock.core.ledger")
local multi = require("resty.dlock.core.multi")
local recovery = require("resty.dlock.core.recovery")
local workers = require("resty.dlock.core.workers")
local reentrant = require("resty.dlock.core.reentrant")
local majority = require("resty.dlock.redis.majority")
local rwscripts = require("resty.dlock.redis.rwscripts")
local scripts = require("resty.dlock.redis.scripts")
local token = require("resty.dlock.core.token")
local watchdog = require("resty.dlock.core.watchdog")
local scoped = require("resty.dlock.core.with")
local version = require("resty.dlock.version")
local metered = acquire.metered
local opening = acquire.opening
local lua_setmetatable = setmetatable
local lua_tostring = tostring
local notSelf = check.notSelf
_M._VERSION = version.VERSION
_M.MAX_KEY_LEN = options.MAX_KEY_LEN
_M.MAX_TTL = options.MAX_TTL
-- Locks wait in line (scripts.lua): first come, first served across the fleet.
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
-- Under Redlock a queue would live on every master with no one order: waiters take turns instead (acquire.lua).
-- A valid lease's extend puts its key back on a master that restarted empty (redis/majority.lua).
local MAJORITY_LOCK = {
    acquire = scripts.ACQUIRE,
    release = scripts.RELEASE,
    extend = scripts.EXTEND,
    shared = false,
    fenced = false,
    drop = nil,
    restore = majority.EXTEND_RESTORING
}
-- Readers of shared locks (redis/rwscripts.lua); their writers are the locks above.
local READ_LOCK = {
    acquire = rwscripts.READ_ACQUIRE,
    release = rwscripts.READ_RELEASE,
    extend = rwscripts.READ_EXTEND,
    shared = true,
    fenced = false,
    drop = rwscripts.READ_DROP,
    reader = true
}
local FENCED_READ_LOCK = {
    acquire = rwscripts.READ_ACQUIRE_FENCED,
    release = rwscripts.READ_RELEASE,
    extend = rwscripts.READ_EXTEND,
    shared = true,
    fenced = true,
    drop = rwscripts.READ_DROP,
    reader = true
}
-- Why readers are refused by reentrant factories: a reader that took its key
-- again as a writer would wait for itself. (Redlock's reason: its backend.)
local READERS_REENTRANT = "dlock: shared = true is refused by reentrant factories (reentrant = true): a reader " .. "that took its key again as a writer would wait for itself"
--- The factories' metatable (its __index, the methods, is set once they are).
local locksMt = {}
--- lease, nil on success; nil, "busy", retry_after when wait = 0 and the key
-- is held; nil, "timeout", retry_after when waiting ran out; nil, "dlock: ..."
-- on bad input or Redis failure. retry_after: ms until the holder's lease ends.
local function take(locks, key, opts, busyCounts)
    local refused = opening(locks, locksMt, "locks:acquire()", "acquire")
    if refused ~= nil then
        return nil, refused, nil
    end
    local store = locks._store
    local bad, k, rkey, ttl, wait, renew, onLost, shared = options.acquire(store, key, opts, true)
    if bad ~= nil then
        return nil, bad, nil
    end
    local kind = locks._kind
    if shared then
        local readers = locks._readers
        if readers == nil then
            return nil, locks._noReaders, nil
        end
        kind = readers
    end
    if locks._reentrant then
        local again = reentrant.nested(locks._id, rkey)
        if again ~= nil then
            return again, nil, nil
        end
    end
    -- A reader's token says so: its ticket in line, and a key handed to it (rwscripts.lua).
    local l, err, retryAfter = metered(
        store,
        kind,
        k,
        rkey,
        locks._mint,
        shared and rwscripts.READER or nil,
        ttl,
        wait,
        busyCounts
    )
    if l == nil then
        return l, err, retryAfter
    end
    if renew then
        l, err, retryAfter = watchdog.hold(l, onLost)
    end
    if l ~= nil and locks._reentrant then
        l = reentrant.enter(locks._id, l)
    end
    return l, err, retryAfter
end
local locksMethods = {
    acquire = function(self, key, opts)
        return take(self, key, opts, true)
    end,
    _try = function(self, key, opts)
        return take(self, key, opts, false)
    end,
    acquire_all = function(self, keys, opts)
        local refused = opening(self, locksMt, "locks:acquire_all()", "acquire_all")
        if refused ~= nil then
            return nil, refused, nil
        end
        return multi.acquireAll(self, keys, opts)
    end,
    held = function(self)
        local bad = notSelf(self, locksMt, "locks:held()")
        if bad ~= nil then
            return nil, bad
        end
        return ledger.held(self._store.dict), nil
    end,
    with = scoped.withLease
}
locksMt.__index = locksMethods
--- Factories made in this process: their ids for reentrant holds.
local factories = 0
--- Create a lock factory. Returns locks, or nil and an error naming the bad option.
function _M.new(opts)
    if opts == nil then
        return nil, "dlock: new needs an options table with at least dict"
    end
    local o, oerr = options.newLocks(opts)
    if o == nil then
        return nil, oerr
    end
    if o.fencing then
        local no = backend.refuses(o.redis, "fencing")
        if no ~= nil then
            return nil, no
        end
    end
    local kind = not backend.queues(o.redis) and MAJORITY_LOCK or (o.fencing and FENCED_LOCK or LOCK)
    local store = options.store(o)
    local noReaders = backend.refuses(o.redis, "shared") or (o.reentrant and READERS_REENTRANT or nil)
    local readers = noReaders == nil and (o.fencing and FENCED_READ_LOCK or READ_LOCK) or nil
    factories = factories + 1
    local locks = {
        prefix = store.prefix,
        ttl = store.ttl,
        wait = store.wait,
        owner = o.owner,
        reentrant = o.reentrant,
        _reentrant = o.reentrant,
        _store = store,
        _mint = o.owner == "worker" and token.worker or token.random,
        _kind = kind,
        _readers = readers,
        _noReaders = noReaders,
        _id = lua_tostring(factories)
    }
    recovery.register(store, kind)
    -- Readers' records (one per token) are given back with the readers' release.
    if readers ~= nil then
        recovery.register(store, readers)
    end
    return lua_setmetatable(locks, locksMt), nil
end
--- For init_worker_by_lua: release, owner-checked, the leases a worker that
-- died (SIGKILL, a crash) left in Redis, as soon as nginx replaces it (without
-- it this happens at the worker's first acquire). Returns true, or nil, err.
function _M.init_worker()
    local err = recovery.start()
    if err ~= nil then
        return nil, err
    end
    workers.started()
    return true, nil
end
return _M
