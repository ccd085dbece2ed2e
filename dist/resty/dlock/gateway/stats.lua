-- Generated from src/resty/dlock/gateway/stats.ts by TypeScriptToLua: edit that file, not this one.
-- Per-guard event counters and circuit-breaker state, in the shared dict so all
-- workers of an nginx instance share them (and the status endpoint reads them).
--   "c:<guard>:<event>"  counter
--   "g:<guard>:<gauge>"  gauge (in_flight)
--   "b:open:<guard>"     until when the breaker is open (epoch s; 0: never opened)
--   "b:fail:<guard>"     consecutive failures while closed; HALF after an opening,
--                        until Redis answers again (one more failure re-opens)
-- Numbers made with the guard (prepare()): an incr, or a number replacing a number,
-- needs no memory: a dict full of held leases still trips and counts.
local _M = {}
local check = require("resty.dlock.core.check")
local dictcount = require("resty.dlock.core.dictcount")
local clock = require("resty.dlock.core.clock")
local ngx_log = ngx.log
local ERR = ngx.ERR
local NOTICE = ngx.NOTICE
local timer_at = ngx.timer.at
local lua_type = type
local clock_now = clock.now
local worker_exiting = ngx.worker.exiting
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
--- Seconds the breaker stays open (0: closed or half open).
local function openFor(dict, k)
    local upto = dict:get(k.open)
    local left = lua_type(upto) == "number" and upto - clock_now() or 0
    return left > 0 and left or 0
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
--- Per guard, when this worker's own probe ends: the dict's mark stands in for it when the dict is full.
local probingHere = {}
--- Take the one probe of a half-open breaker for `seconds`: true when the
-- caller is the one. A dict too full for the mark (a count of ours never
-- evicts) leaves one probe per worker at a time, rather than none ever.
local function takeProbe(dict, guard, seconds)
    local ok, err = dict:safe_add(keys(guard).probe, true, seconds)
    if ok == true then
        return true
    end
    if err ~= "no memory" then
        return false
    end
    local now = clock_now()
    local ends = probingHere[guard]
    if ends ~= nil and ends > now then
        return false
    end
    probingHere[guard] = now + seconds
    return true
end
--- The probe is over (Redis answered, or the breaker opened again): the next may start.
local function probeDone(dict, guard)
    dict:delete(keys(guard).probe)
    probingHere[guard] = nil
end
--- The probe, in a timer `delay` s from now; said when it cannot start, and its mark let go.
local function startProbe(g, delay, probe)
    local ok, err = timer_at(delay, probe, g)
    if ok ~= nil then
        return
    end
    probeDone(g._dict, g.name)
    ngx_log(ERR, "dlock: guard ", g.name, ": cannot start a timer to probe Redis: ", err)
end
local function breakerState(dict, guard)
    local k = keys(guard)
    if openFor(dict, k) > 0 then
        return "open"
    end
    if (dict:get(k.fail)) == HALF then
        return "half_open"
    end
    return "closed"
end
--- With on_error = "local", after the cool-down (half open): may this request
-- ask Redis? Not until `probe`, run in a timer of this nginx (one at a time,
-- for up to probeFor seconds), has found Redis back: meanwhile requests keep
-- deciding locally, none waits on a Redis that may still be gone.
function _M.probed(g, probeFor, probe)
    if breakerState(g._dict, g.name) ~= "half_open" then
        return true
    end
    if takeProbe(g._dict, g.name, probeFor) then
        startProbe(g, 0, probe)
    end
    return false
end
function _M.breakerOpen(dict, guard)
    return openFor(dict, keys(guard)) > 0
end
--- Must this request do without Redis (on_error = "allow" / "deny")? While the
-- breaker is open; and half open, after the cool-down, unless it is the one
-- request of this nginx that asks Redis whether it is back (for up to probeFor
-- seconds): the others do without, as while open, and none but that one waits
-- on a Redis that may still be gone.
function _M.skips(dict, guard, probeFor)
    local k = keys(guard)
    -- Closed (with failures counted or none): one read. Open or half open, fail is HALF.
    if (dict:get(k.fail)) ~= HALF then
        return false
    end
    if openFor(dict, k) > 0 then
        return true
    end
    return not takeProbe(dict, guard, probeFor)
end
--- Seconds one probe of a half-open breaker has (a call's connect and read) before another may start.
function _M.probeWindow(conf)
    return (conf.connect_timeout + conf.read_timeout) / 1000 + 0.1
end
--- Count a Redis failure; open the breaker after `threshold` in a row, or at once when half open.
local function failure(dict, guard, threshold, cooldownMs)
    local k = keys(guard)
    local trip = (dict:get(k.fail)) == HALF
    if not trip then
        local n = dictcount.count(dict, k.fail, 1)
        -- HALF + 1: another worker opened the breaker meanwhile, and this count moved its mark: put it back.
        if n == HALF + 1 then
            dict:safe_set(k.fail, HALF)
        end
        trip = n ~= nil and n >= threshold
    end
    if trip and openFor(dict, k) == 0 then
        -- A probe that failed fast must not hold the next one off past the cool-down.
        probeDone(dict, guard)
        dict:safe_set(k.open, clock_now() + cooldownMs / 1000)
        dict:safe_set(k.fail, HALF)
        incr(dict, guard, "breaker_opened")
        ngx_log(
            ERR,
            "dlock: guard ",
            guard,
            ": Redis keeps failing, not calling it for ",
            cooldownMs,
            " ms"
        )
    end
end
--- Redis answered: close the breaker and forget past failures (one read when there is nothing to forget).
function _M.success(dict, guard)
    local k = keys(guard)
    local v = dict:get(k.fail)
    if v == nil or v == 0 then
        return
    end
    dict:safe_set(k.fail, 0)
    if v == HALF then
        probeDone(dict, guard)
        ngx_log(NOTICE, "dlock: guard ", guard, ": Redis answers again, breaker closed")
    end
end
--- Redis failed a guard: told to the breaker, logged (a probe of a half-open breaker stops here).
local function noteFailure(g, err)
    failure(g._dict, g.name, g._breakerFailures, g._breakerCooldown)
    ngx_log(ERR, "dlock: guard ", g.name, ": ", check.reason(err))
end
--- With a local fallback whose breaker is open: a timer of this nginx asks Redis
-- (probe) once the cool-down is over, whether requests come or not (an idle
-- guard would say degraded until its next request). One per nginx: a request
-- meanwhile finds its mark (probed()) and decides locally.
local function probeWhenCool(g, probeFor, probe)
    -- An exiting worker makes no timer with a delay: the workers that replace it probe.
    if worker_exiting() then
        return
    end
    local cool = openFor(g._dict, keys(g.name))
    if not takeProbe(g._dict, g.name, cool + probeFor) then
        return
    end
    startProbe(g, cool, probe)
end
--- A probe found Redis failing still: the breaker opens again, and the next probe is due after its cool-down.
function _M.probeFailed(g, err, probeFor, probe)
    noteFailure(g, err)
    probeDone(g._dict, g.name)
    probeWhenCool(g, probeFor, probe)
end
--- Redis failed a request's call: counted as redis_errors, then as noteFailure.
function _M.redisFailed(g, err)
    incr(g._dict, g.name, "redis_errors")
    noteFailure(g, err)
end
--- Redis cannot decide and nothing local does: true when on_error = "allow"
-- lets the request through (counted failed_open), false when the guard must
-- refuse it (counted failed_closed).
function _M.failedOpen(g)
    if g._onError == "allow" then
        incr(g._dict, g.name, "failed_open")
        return true
    end
    incr(g._dict, g.name, "failed_closed")
    return false
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
_M.breakerState = breakerState
_M.failure = failure
_M.incr = incr
_M.noteFailure = noteFailure
_M.probeDone = probeDone
_M.probeWhenCool = probeWhenCool
return _M
