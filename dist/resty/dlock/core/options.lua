-- Generated from src/resty/dlock/core/options.ts by TypeScriptToLua: edit that file, not this one.
-- The option tables of the lock faces, declared once (schema.lua): dlock.new,
-- semaphore.new and the options of an acquire. The gateway takes some of
-- these declarations for its own table (gateway/options.lua); the README's
-- tables are checked against them (spec/options_spec.lua).
local _M = {}
local check = require("resty.dlock.core.check")
local ledger = require("resty.dlock.core.ledger")
local meter = require("resty.dlock.core.meter")
local backend = require("resty.dlock.redis.backend")
local script = require("resty.dlock.redis.script")
local schema = require("resty.dlock.core.schema")
local lua_type = type
local lua_tostring = tostring
local math_floor = math.floor
local check_str = check.str
local lockKey = script.lockKey
--- Longest key accepted, in bytes (before the prefix).
local MAX_KEY = 512
_M.MAX_KEY_LEN = MAX_KEY
--- Longest lease, in ms: one day. Longer jobs renew with lease:extend().
_M.MAX_TTL = 86400000
--- Most permits per key.
_M.MAX_PERMITS = 100000
-- ------------------------------------------------------------------ declarations
_M.TTL = {
    name = "ttl",
    kind = "integer",
    min = 1,
    max = _M.MAX_TTL,
    unit = "a positive integer of ms",
    default = 30000
}
_M.WAIT = {
    name = "wait",
    kind = "integer",
    min = 0,
    max = _M.MAX_TTL,
    unit = "a non-negative integer of ms",
    default = 0
}
_M.PERMITS = {
    name = "permits",
    kind = "integer",
    min = 1,
    max = _M.MAX_PERMITS,
    unit = "a positive integer",
    required = true
}
--- A lua_shared_dict by name: the dict itself is what the factory keeps.
_M.DICT = {name = "dict", kind = "check", check = check.sharedDict, required = true}
--- The `redis` table (redis/client.lua declares its options), with the backend
-- that will serve it (redis/backend.lua); the eviction finding is kept in the
-- dict checked before it.
_M.REDIS = {
    name = "redis",
    kind = "check",
    doc = "local Redis",
    check = function(v, out) return backend.parse(v, out.dict) end
}
--- A name given: it becomes a label in metrics. Absent, the face picks one.
function _M.checkName(v)
    if v == nil then
        return nil, nil
    end
    return meter.checkName(v)
end
local function name(dflt)
    return {name = "name", kind = "check", check = _M.checkName, default = dflt}
end
-- "" is a choice: keys shared with other clients' locks (node-redlock, redis-py) under their own names.
local function prefix(dflt)
    return {name = "prefix", kind = "string", maxLen = 256, empty = true, default = dflt}
end
_M.NEW_LOCKS = {
    _M.DICT,
    name("dlock"),
    _M.REDIS,
    prefix("dlock:"),
    _M.TTL,
    _M.WAIT,
    {name = "owner", kind = "enum", values = {"random", "worker"}, default = "random"},
    {name = "fencing", kind = "boolean", default = false},
    {name = "reentrant", kind = "boolean", default = false}
}
_M.NEW_SEMAPHORE = {_M.PERMITS, _M.DICT, name("semaphore"), _M.REDIS, prefix("dlock:sem:"), _M.TTL, _M.WAIT}
--- An acquire's own ttl and wait; absent, the factory's.
local ACQUIRE_TTL = {
    name = "ttl",
    kind = "integer",
    min = _M.TTL.min,
    max = _M.TTL.max,
    unit = _M.TTL.unit,
    doc = "the factory's `ttl`"
}
local ACQUIRE_WAIT = {
    name = "wait",
    kind = "integer",
    min = _M.WAIT.min,
    max = _M.WAIT.max,
    unit = _M.WAIT.unit,
    doc = "the factory's `wait`"
}
local RENEW = {name = "renew", kind = "boolean", default = false}
-- Without renewals nothing would ever notice the loss.
local ON_LOST = {name = "on_lost", kind = "function", requires = {{option = "renew", must = "true"}}}
--- A lock's; shared takes it as one of the key's readers (redis/rwscripts.lua).
_M.ACQUIRE = {
    ACQUIRE_TTL,
    ACQUIRE_WAIT,
    RENEW,
    ON_LOST,
    {name = "shared", kind = "boolean", default = false}
}
local function notShared(v)
    if v == nil then
        return nil, nil
    end
    return check.fail("shared is an option of locks (resty.dlock), not of semaphores, whose permits are all alike", v)
end
--- A permit's: shared is refused with why (semaphores: their permits are all alike, none shared).
local ACQUIRE_PERMIT = {
    ACQUIRE_TTL,
    ACQUIRE_WAIT,
    RENEW,
    ON_LOST,
    {name = "shared", kind = "check", check = notShared}
}
-- (multikey) Readers of a set would need the readers' set and line of every key in one
-- script, and a writer of one key waiting behind readers of a set: refused until built.
local function notSharedAll(v)
    if v == nil or v == false then
        return nil, nil
    end
    return check.fail("shared = true is refused by acquire_all: a set of keys is taken exclusive (take each key " .. "with acquire(key, { shared = true }) to read it)", v)
end
--- (multikey) acquire_all's: a lock's, shared refused with why.
_M.ACQUIRE_ALL = {
    ACQUIRE_TTL,
    ACQUIRE_WAIT,
    RENEW,
    ON_LOST,
    {name = "shared", kind = "check", check = notSharedAll, doc = "false"}
}
_M.newLocks = schema.compile("dlock.new options", _M.NEW_LOCKS, {labels = ""})
_M.newSemaphore = schema.compile("semaphore.new options", _M.NEW_SEMAPHORE, {labels = ""})
--- lease:extend(ttl): the ttl of an acquire.
local checkTtl = schema.one(_M.TTL)
--- An extend's ttl (ms): the one given, checked, or the lease's current one when none is.
function _M.extendTtl(ttl, current)
    if ttl == nil then
        return current, nil
    end
    return checkTtl(ttl)
end
-- ------------------------------------------------------------------ factories
--- What a factory's leases need of its options; its shared dict made ready.
function _M.store(o)
    ledger.prepare(o.dict)
    return {
        dict = o.dict,
        redis = o.redis,
        prefix = o.prefix,
        ttl = o.ttl,
        wait = o.wait,
        meter = meter.make(o.dict, o.name)
    }
end
local lockOptions = schema.compile("acquire options", _M.ACQUIRE, {labels = ""})
local permitOptions = schema.compile("acquire options", ACQUIRE_PERMIT, {labels = ""})
local nkeys = check.nkeys
local TTL_MIN = ACQUIRE_TTL.min
local TTL_MAX = ACQUIRE_TTL.max
local WAIT_MIN = ACQUIRE_WAIT.min
local WAIT_MAX = ACQUIRE_WAIT.max
local function within(v, min, max)
    return lua_type(v) == "number" and v >= min and v <= max and math_floor(v) == v
end
--- Shortest ttl a renewed lease may have, ms: the watchdog renews a third of
-- the way through a ttl and sweeps every 10 ms at the most often, a round
-- trip to Redis included; a lease of a few ms would be lost between two sweeps.
local RENEW_MIN_TTL = 100
--- nil, or why renew cannot keep a lease of this ttl alive.
local function renewable(renew, ttl)
    if not renew or ttl >= RENEW_MIN_TTL then
        return nil
    end
    return "dlock: renew = true needs a ttl of at least " .. lua_tostring(RENEW_MIN_TTL) .. " ms (the watchdog renews a third of the way through it), got " .. check.show(ttl)
end
--- An acquire's arguments read: nil, then key, its Redis key (the prefix in
-- front: locks and semaphores add it here only), ttl, wait, renew, on_lost and shared
-- (locks only, `sharable`), with the factory's defaults; or the error naming
-- the bad value, alone.
--
-- This runs on every acquire, so options that are fine are read by name and
-- counted (table.nkeys), with no table built and no walk over the caller's:
-- LuaJIT will not compile a function whose trace runs into a loop (a root
-- trace cannot hold an inner one). Anything else goes to the ACQUIRE schema,
-- which says what is wrong in the words of every other option table.
function _M.acquire(store, key, opts, sharable)
    local k, kerr = check_str("key", key, MAX_KEY)
    if k == nil then
        return kerr
    end
    local rkey = store.prefix .. k
    if sharable then
        -- Locks (not permits: a semaphore's script touches its key alone).
        local lk, lerr = lockKey(store.prefix, k, rkey, store.redis.slotted)
        if lk == nil then
            return lerr
        end
        rkey = lk
    end
    if opts == nil then
        return nil, k, rkey, store.ttl, store.wait, false, nil, false
    end
    if lua_type(opts) == "table" then
        local o = opts
        local t = o.ttl
        local w = o.wait
        local r = o.renew
        local onLost = o.on_lost
        local sh
        if sharable then
            sh = o.shared
        end
        local found = (t ~= nil and 1 or 0) + (w ~= nil and 1 or 0) + (r ~= nil and 1 or 0) + (onLost ~= nil and 1 or 0) + (sh ~= nil and 1 or 0)
        if nkeys ~= nil and nkeys(o) == found and (t == nil or within(t, TTL_MIN, TTL_MAX)) and (w == nil or within(w, WAIT_MIN, WAIT_MAX)) and (r == nil or r == true or r == false) and (onLost == nil or r == true and lua_type(onLost) == "function") and (sh == nil or sh == true or sh == false) and (r ~= true or t == nil and store.ttl >= RENEW_MIN_TTL or t ~= nil and t >= RENEW_MIN_TTL) then
            return nil, k, rkey, t == nil and store.ttl or t, w == nil and store.wait or w, r == true, onLost, sh == true
        end
    end
    local v, err = (sharable and lockOptions or permitOptions)(opts)
    if v == nil then
        return err
    end
    local ttl = v.ttl or store.ttl
    local rerr = renewable(v.renew, ttl)
    if rerr ~= nil then
        return rerr
    end
    return nil, k, rkey, ttl, v.wait or store.wait, v.renew, v.on_lost, v.shared == true
end
-- Exported by name: this module's own uses of them are locals, not lookups in its exports table.
_M.checkTtl = checkTtl
_M.renewable = renewable
return _M
