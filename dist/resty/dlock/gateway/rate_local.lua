-- Generated from src/resty/dlock/gateway/rate_local.ts by TypeScriptToLua: edit that file, not this one.
-- The bounded fallback of rate guards (on_error = "local"): while Redis cannot
-- decide (a call failed, or the breaker is open), each nginx enforces its share
-- of every limit on its own, in its shared dict: rate / fleet per period and
-- burst / fleet at once (at least one request's cost), `fleet` being the number of nginx the
-- operator says share the limit. With the fleet stated right, the fleet
-- together admits no more than the limit itself (plus what each nginx's
-- rounding of burst up to a request's cost adds when burst / fleet < cost).
--
-- The same GCRA as core/rate.lua, on ngx.now(): per key and limit the
-- theoretical arrival time in the dict. Read and written without a lock, as
-- lua-resty-limit-traffic's limit.req does: workers of one nginx deciding for
-- the same key in the same microseconds may both pass (no yield between the
-- read and the write, so never within a worker). Redis' state is not carried
-- over either way: the first Redis decision after the fallback starts from
-- what Redis last knew.
local _M = {}
local core = require("resty.dlock.core.rate")
local breaker = require("resty.dlock.gateway.breaker")
local clock = require("resty.dlock.core.clock")
local clock_now = clock.now
local math_floor = math.floor
local math_ceil = math.ceil
local math_max = math.max
local str_format = string.format
--- The shares of guard `name`'s limits on one nginx of `fleet`: a burst share of
-- one request's `cost` at least, else a request could never pass locally.
function _M.shares(ls, fleet, name, cost)
    local out = {}
    for i = 1, #ls.list do
        local l = ls.list[i]
        local interval = l.period * 1000 / l.rate * fleet
        out[i] = {
            interval = interval,
            cap = interval * math_max(cost, math_floor(l.burst / fleet)),
            key = str_format("rl:%s:%d:", name, i)
        }
    end
    return out
end
-- Per worker, reused: the times read (no yield between their use).
local tats = {}
--- Decide for hashed key k as the script would, in dict d:
-- the same reply shape ({ 1 or 0, retry ms, per limit remaining, ms until full }).
function _M.decide(d, k, sh, cost)
    local now = clock_now() * 1000000
    local n = #sh
    local over = 0
    for i = 1, n do
        local s = sh[i]
        local v = d:get(s.key .. k)
        local tat = v == nil and now or v
        if tat < now then
            tat = now
        end
        tats[i] = tat
        local o = tat + cost * s.interval - now - s.cap
        if o > 1 and o > over then
            over = o
        end
    end
    local ok = over == 0
    local out = {}
    out[1] = ok and 1 or 0
    out[2] = math_ceil(over / 1000)
    for i = 1, n do
        local s = sh[i]
        local t = tats[i]
        if ok then
            t = t + cost * s.interval
            -- Expires when it no longer matters: every unit back.
            d:set(s.key .. k, t, (t - now) / 1000000 + 0.001)
        end
        out[1 + 2 * i] = math_max(0, math_floor((s.cap - (t - now) + 1) / s.interval + 1e-9))
        out[2 + 2 * i] = math_ceil((t - now) / 1000)
    end
    return out
end
--- Give back what decide() charged key k (a later guard refused the request).
function _M.giveBack(d, k, sh, cost)
    local now = clock_now() * 1000000
    for i = 1, #sh do
        local s = sh[i]
        local v = d:get(s.key .. k)
        if v ~= nil then
            local t = v - cost * s.interval
            if t > now then
                d:set(s.key .. k, t, (t - now) / 1000000 + 0.001)
            else
                d:delete(s.key .. k)
            end
        end
    end
end
--- In a timer: does Redis answer again? A dry run (it charges nothing) closes the breaker, or opens it again.
local function probeRedis(premature, g)
    if premature then
        return
    end
    local reply, err = core.decide(g._conf, g._prefix .. "probe", g._limits, "0", 1)
    if reply == nil then
        breaker.probeFailed(g, err, g._probeFor, probeRedis)
        return
    end
    breaker.success(g._dict, g.name)
end
--- A decision made locally while the breaker is open: the probe is due at the end of the cool-down.
function _M.degraded(g)
    if breaker.breakerOpen(g._dict, g.name) then
        breaker.probeWhenCool(g, g._probeFor, probeRedis)
    end
end
--- With on_error = "local", after the cool-down (half open): may this request
-- ask Redis? Not until a probe in a timer of this nginx has found Redis back
-- (one at a time, for up to a call's timeouts): meanwhile requests keep
-- deciding locally, none waits on a Redis that may still be gone.
function _M.probe(g)
    return breaker.probed(g, g._probeFor, probeRedis)
end
--- A worker starts (dlock.init_worker()) with the breaker open or half open: a
-- reload meanwhile took the probe its workers had scheduled. Its own probe
-- after the cool-down, whether requests come or not; a mark an exited worker
-- left would hold it off, so it is let go first.
function _M.resume(g)
    if breaker.breakerState(g._dict, g.name) == "closed" then
        return
    end
    breaker.probeDone(g._dict, g.name)
    breaker.probeWhenCool(g, g._probeFor, probeRedis)
end
return _M
