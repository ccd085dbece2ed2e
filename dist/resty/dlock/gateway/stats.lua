-- Generated from src/resty/dlock/gateway/stats.ts by TypeScriptToLua: edit that file, not this one.
-- Per-guard event counters, gauges and the keys of the circuit breaker
-- (breaker.lua), in the shared dict so all workers of an nginx instance share
-- them (and the status endpoint reads them).
--   "c:<guard>:<event>"  counter
--   "g:<guard>:<gauge>"  gauge (in_flight)
--   "b:open:<guard>"     until when the breaker is open (epoch s; 0: never opened)
--   "b:fail:<guard>"     consecutive failures while closed; HALF after an opening,
--                        until Redis answers again (one more failure re-opens)
-- Numbers made with the guard (prepare()): an incr, or a number replacing a number,
-- needs no memory: a dict full of held leases still trips and counts.
local _M = {}
local dictcount = require("resty.dlock.core.dictcount")
local lua_type = type
local lua_ipairs = ipairs
--- Every event a guard counts, in the order status pages list them.
_M.EVENTS = {
    "acquired",
    "rejected",
    "waited",
    "timed_out",
    "renewed",
    "lost",
    "aborted",
    "unlogged",
    "redis_errors",
    "failed_open",
    "failed_closed",
    "short_circuited",
    "breaker_opened",
    "missing_key",
    "key_errors",
    "stored",
    "replayed",
    "conflict",
    "mismatch",
    "not_stored",
    "local_admitted",
    "local_rejected"
}
--- The value of "b:fail:<guard>" between an opening and the next answer from Redis.
local HALF = -1
local keysOf = {}
local function make(guard)
    local events = {}
    for i = 1, #_M.EVENTS do
        events[_M.EVENTS[i]] = "c:" .. guard .. ":" .. _M.EVENTS[i]
    end
    local k = {
        events = events,
        gauges = {},
        open = "b:open:" .. guard,
        fail = "b:fail:" .. guard,
        probe = "b:probe:" .. guard
    }
    keysOf[guard] = k
    return k
end
local function keys(guard)
    return keysOf[guard] or make(guard)
end
local function gaugeKey(guard, name)
    local k = keys(guard)
    local key = k.gauges[name]
    if key ~= nil then
        return key
    end
    local made = "g:" .. guard .. ":" .. name
    k.gauges[name] = made
    return made
end
local PREPARED = {
    "acquired",
    "rejected",
    "redis_errors",
    "failed_open",
    "failed_closed",
    "short_circuited",
    "breaker_opened"
}
--- Make guard's in_flight, breaker keys and main counters (PREPARED; others as they first count) while the dict has room.
function _M.prepare(dict, guard)
    local k = keys(guard)
    for _, e in lua_ipairs(PREPARED) do
        dict:safe_add(k.events[e], 0)
    end
    dict:safe_add(gaugeKey(guard, "in_flight"), 0)
    -- An older release's breaker ("half", a key with a ttl) reads as half open: the next failure opens it.
    if not (dict:safe_add(k.fail, 0)) and lua_type((dict:get(k.fail))) ~= "number" then
        dict:safe_set(k.fail, HALF)
    end
    if not (dict:safe_add(k.open, 0)) and lua_type((dict:get(k.open))) ~= "number" then
        dict:safe_set(k.open, 0)
    end
end
local function incr(dict, guard, event)
    dictcount.count(dict, keys(guard).events[event], 1)
end
function _M.count(dict, guard, event)
    local v = dict:get(keys(guard).events[event])
    return lua_type(v) == "number" and v or 0
end
--- Move a per-guard gauge (in_flight...) by delta; shared by the workers of this nginx.
function _M.adjust(dict, guard, gauge, delta)
    dictcount.count(dict, gaugeKey(guard, gauge), delta)
end
--- A per-guard gauge's value now (0 when never moved).
function _M.gauge(dict, guard, name)
    local v = dict:get(gaugeKey(guard, name))
    return lua_type(v) == "number" and v or 0
end
-- Exported by name: this module's own uses of them are locals, not lookups in its exports table.
_M.HALF = HALF
_M.incr = incr
_M.keys = keys
return _M
