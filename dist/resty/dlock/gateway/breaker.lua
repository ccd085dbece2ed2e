-- Generated from src/resty/dlock/gateway/breaker.ts by TypeScriptToLua: edit that file, not this one.
-- A guard's circuit breaker, kept in the shared dict (stats.lua names its keys)
-- so that every worker of an nginx trips, waits and probes as one: after
-- `breaker_failures` Redis failures in a row it opens for `breaker_cooldown`
-- ms (requests do without Redis: on_error decides, or the local fallback),
-- then one request or timer of the nginx asks Redis whether it is back (half
-- open) while the others still do without; an answer closes it.
local _M = {}
local check = require("resty.dlock.core.check")
local clock = require("resty.dlock.core.clock")
local dictcount = require("resty.dlock.core.dictcount")
local stats = require("resty.dlock.gateway.stats")
local ngx_log = ngx.log
local ERR = ngx.ERR
local NOTICE = ngx.NOTICE
local timer_at = ngx.timer.at
local lua_type = type
local clock_now = clock.now
local worker_exiting = ngx.worker.exiting
local keys = stats.keys
local incr = stats.incr
local HALF = stats.HALF
--- Seconds the breaker stays open (0: closed or half open).
local function openFor(dict, k)
    local upto = dict:get(k.open)
    local left = lua_type(upto) == "number" and upto - clock_now() or 0
    return left > 0 and left or 0
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
-- Exported by name: this module's own uses of them are locals, not lookups in its exports table.
_M.breakerState = breakerState
_M.failure = failure
_M.noteFailure = noteFailure
_M.probeDone = probeDone
_M.probeWhenCool = probeWhenCool
return _M
