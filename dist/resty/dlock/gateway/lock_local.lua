-- Generated from src/resty/dlock/gateway/lock_local.ts by TypeScriptToLua: edit that file, not this one.
-- The bounded fallback of concurrency and mutex guards (on_error = "local"):
-- while Redis cannot decide (a call failed, or the breaker is open), each nginx
-- lets through at most its share of the key's permits at once, counted in its
-- shared dict: permits / fleet (at least 1) for concurrency, one request at a
-- time for mutex (a reader of `shared` methods too: no shared mode locally).
-- With the fleet stated right, the fleet together holds no more than the
-- permits (plus what the rounding up to 1 adds when permits < fleet; a mutex
-- is one per nginx: `fleet` at once over the fleet).
--
-- A share is `share` slots per key in the dict, "ll:<guard>:<key>:<i>", each
-- taken with add() (atomic across workers) and deleted when the request ends
-- (the guard's log(), or, for a request that ended without it, the next
-- access() of this worker that finds the key's slots held). A client that went
-- away while the upstream works leaves its slot to run out, as a Redis lease is
-- kept. A slot also expires after the guard's ttl, not renewed: a request
-- longer than the ttl loses its slot. Waiting
-- (`wait`) polls the slots, 5 to 50 ms apart, until the wait runs out.
--
-- After the breaker's cool-down no request asks Redis until a probe in a timer
-- of this nginx (an acquire and release of a key of its own) found Redis back:
-- meanwhile requests keep deciding locally, none waits on a Redis that may
-- still be gone. What was taken locally is not carried over to Redis.
local _M = {}
local common = require("resty.dlock.gateway.common")
local request = require("resty.dlock.core.request")
local upstream = require("resty.dlock.gateway.upstream")
local stats = require("resty.dlock.gateway.stats")
local breaker = require("resty.dlock.gateway.breaker")
local clock = require("resty.dlock.core.clock")
local clock_now = clock.now
local clock_sleep = clock.sleep
local ngx_update_time = ngx.update_time
local lua_pairs = pairs
local lua_tostring = tostring
local math_max = math.max
local math_min = math.min
local math_floor = math.floor
local math_ceil = math.ceil
local incr = stats.incr
--- The guards of this nginx with a local share (gateway.log() ends their slots too).
local withLocal = {}
--- Note a guard made with a local share.
function _M.register(g)
    withLocal[#withLocal + 1] = g
end
--- Entries of `held` before the dead ones are swept.
local SWEEP = 256
--- The local share of a guard of mode `mode` with `permits`, for `fleet` nginx; nil and the error for a bad fleet.
function _M.create(mode, permits, fleet, name, ttlMs, probeFor)
    local n, err = common.fleet(fleet, mode == "mutex" and "lock" or "permits")
    if n == nil then
        return nil, err
    end
    local share = mode == "mutex" and 1 or math_max(1, math_floor(permits / n))
    return {
        share = share,
        prefix = "ll:" .. name .. ":",
        ttl = ttlMs / 1000,
        probeFor = probeFor,
        held = {},
        count = 0
    }, nil
end
--- Forget the slot request rid held: given back, or (its client gone while the upstream works) left to run out.
local function forget(g, l, rid, slot, giveBack)
    if giveBack then
        g._dict:delete(slot)
    end
    l.held[rid] = nil
    l.count = l.count - 1
    stats.adjust(g._dict, g.name, "in_flight", -1)
end
--- Free the slots of requests of this worker that ended without log().
local function sweep(g, l)
    for k, h in lua_pairs(l.held) do
        if not request.alive(h.anchor) then
            forget(g, l, k, h.slot, true)
        end
    end
end
--- A free slot of hashed key k, taken; nil when all `share` are held, or when
-- the dict has no room for one (add would evict another request's slot).
local function take(g, l, k)
    for i = 1, l.share do
        local slot = l.prefix .. k .. ":" .. lua_tostring(i)
        local ok = g._dict:safe_add(slot, true, l.ttl)
        if ok == true then
            return slot
        end
    end
    return nil
end
--- A free slot of hashed key k, taken; when all are held, after freeing those of
-- this worker's requests that ended without log() (a slot must not outlive its
-- request until the ttl only because no log phase ran).
local function takeOrSweep(g, l, k)
    local slot = take(g, l, k)
    if slot ~= nil or l.count == 0 then
        return slot
    end
    sweep(g, l)
    return take(g, l, k)
end
--- Ms until the first of k's slots runs out: when a refused request may try again at the latest.
local function retryAfter(g, l, k)
    local least = l.ttl
    for i = 1, l.share do
        local left = g._dict:ttl(l.prefix .. k .. ":" .. lua_tostring(i))
        if left ~= nil and left < least then
            least = left
        end
    end
    return math_ceil(least * 1000)
end
--- In a timer: does Redis answer again? An acquire and release of the guard's probe key closes the breaker, or opens it again.
local function probeRedis(premature, g)
    if premature then
        return
    end
    local lease, err = g._locks:acquire("dlock-probe", g._tryOpts)
    if lease == nil and err ~= "busy" and err ~= "timeout" then
        breaker.probeFailed(g, err, g._fallback.probeFor, probeRedis)
        return
    end
    if lease ~= nil then
        lease:release()
    end
    breaker.success(g._dict, g.name)
end
--- Decide for hashed key k on this nginx alone: let the request through holding
-- a slot (released by finish()), or refuse it with the guard's reject_status
-- once `wait` ran out.
function _M.access(g, l, k, refuse)
    local a = request.anchor()
    local rid = a and a.id
    if rid ~= nil then
        local h = l.held[rid]
        -- Back through an internal redirect: it holds its slot already.
        if h ~= nil and request.alive(h.anchor) then
            return
        end
    end
    if breaker.breakerOpen(g._dict, g.name) then
        breaker.probeWhenCool(g, l.probeFor, probeRedis)
    end
    if l.count >= SWEEP then
        sweep(g, l)
    end
    local slot = takeOrSweep(g, l, k)
    if slot == nil and g._wait > 0 then
        ngx_update_time()
        local deadline = clock_now() + g._wait / 1000
        local nap = 0.005
        while slot == nil do
            local left = deadline - clock_now()
            if left <= 0 then
                break
            end
            clock_sleep(math_min(nap, left))
            nap = math_min(nap * 2, 0.05)
            ngx_update_time()
            slot = takeOrSweep(g, l, k)
        end
    end
    if slot == nil then
        incr(g._dict, g.name, "local_rejected")
        refuse(g, g._rejectStatus, retryAfter(g, l, k))
        return
    end
    incr(g._dict, g.name, "local_admitted")
    if a ~= nil then
        local old = l.held[a.id]
        if old == nil then
            l.count = l.count + 1
            stats.adjust(g._dict, g.name, "in_flight", 1)
        else
            g._dict:delete(old.slot)
        end
        l.held[a.id] = {anchor = a, slot = slot}
    end
end
--- In log(): give back the slot this request took locally, if any; a client
-- that went away while the upstream works leaves it to run out (the backend
-- may still be busy with its request), as a Redis lease is kept.
local function finish(g, l)
    if l.count == 0 then
        return
    end
    local rid = request.id()
    if rid == nil then
        return
    end
    local h = l.held[rid]
    if h == nil then
        return
    end
    local aborted = upstream.aborted()
    if aborted then
        incr(g._dict, g.name, "aborted")
    end
    forget(g, l, rid, h.slot, not aborted)
end
--- gateway.log(): give back what the request took locally from any guard.
function _M.finishAll()
    for i = 1, #withLocal do
        local g = withLocal[i]
        finish(g, g._fallback)
    end
end
--- After the cool-down (half open): may this request ask Redis? Not until a
-- probe in a timer of this nginx found Redis back (one at a time).
function _M.probe(g, l)
    return breaker.probed(g, l.probeFor, probeRedis)
end
-- Exported by name: this module's own uses of them are locals, not lookups in its exports table.
_M.finish = finish
--- A worker starts (dlock.init_worker()) with the breaker open or half open: a
-- reload meanwhile took the probe its workers had scheduled. Its own probe
-- after the cool-down, whether requests come or not; a mark an exited worker
-- left would hold it off, so it is let go first.
function _M.resume(g)
    if breaker.breakerState(g._dict, g.name) == "closed" then
        return
    end
    breaker.probeDone(g._dict, g.name)
    breaker.probeWhenCool(g, g._fallback.probeFor, probeRedis)
end
return _M
