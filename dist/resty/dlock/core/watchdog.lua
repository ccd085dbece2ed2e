-- Generated from src/resty/dlock/core/watchdog.ts by TypeScriptToLua: edit that file, not this one.
-- The watchdog: leases taken with `renew = true` are extended by one sweep per worker (not a timer
-- per lease: a busy worker would run out of lua_max_pending_timers), a third of their ttl after the
-- last renewal, one pipeline per Redis endpoint. When a renewal finds the key gone or someone
-- else's, or Redis cannot be reached until the lease has run out by the local clock, the lease is
-- lost: lease:valid() says false from then on, the error log says so, and the lease's on_lost runs
-- once.
--
-- A renewed lease lives as long as what took it: a request (until it ends, internal redirects
-- included) or a timer or light thread (until its function returns). A lease its holder forgot to
-- release is released then, with a warning, instead of being kept alive for as long as the worker
-- runs, which is how a watchdog turns a forgotten unlock into a lock held forever.
local _M = {}
local check = require("resty.dlock.core.check")
local meter = require("resty.dlock.core.meter")
local batch = require("resty.dlock.core.batch")
local loop = require("resty.dlock.core.loop")
local request = require("resty.dlock.core.request")
local clock = require("resty.dlock.core.clock")
local quiet = require("resty.dlock.core.quiet")
local ngx_update_time = ngx.update_time
local clock_now = clock.now
local ngx_log = ngx.log
local ERR = ngx.ERR
local WARN = ngx.WARN
local co_running = coroutine.running
local math_max = math.max
local math_min = math.min
local lua_pcall = pcall
local lua_pairs = pairs
local lua_ipairs = ipairs
local timer_at = ngx.timer.at
local thread_spawn = ngx.thread.spawn
local thread_wait = ngx.thread.wait
local quiet_due = quiet.due
local quiet_more = quiet.more
--- The line about renewals Redis did not answer: one per interval, not one per lease and sweep.
local unanswered = quiet.make()
local watched = {}
local count = 0
--- A lease is due for renewal once no more than this share of its ttl is left
-- of its validity: 30 % of the ttl after the send of the call that took or
-- last extended it (its validity counts from there). Counted from the answer,
-- a Redis 40 ms away let the validity of a 100 ms lease run out between
-- renewals, and one 60 ms away lost it.
local DUE = 0.7
--- Seconds between sweeps: a sixth of the shortest ttl watched, within these bounds.
local MIN_TICK = 0.01
local MAX_TICK = 0.5
--- What the sweep sleeps now (or is about to): a lease that needs less wakes it (hurry).
local tick = MAX_TICK
local function tickFor(ttl)
    return math_max(MIN_TICK, math_min(MAX_TICK, ttl / 6000))
end
--- Before each sleep: from the leases watched now, so that it grows again once the short ones are gone.
local function nextTick()
    local t = MAX_TICK
    for l in lua_pairs(watched) do
        local lt = tickFor(l.ttl)
        if lt < t then
            t = lt
        end
    end
    tick = t
    return t
end
local function drop(l)
    if watched[l] ~= nil then
        watched[l] = nil
        count = count - 1
    end
end
--- Run a lease's on_lost; what it raises is logged.
local function tell(_premature, onLost, l, why)
    local ok, err = lua_pcall(onLost, l, why)
    if not ok then
        ngx_log(ERR, "dlock: on_lost of the lease on ", l.key, " raised: ", check.text(err))
    end
end
--- The lease is lost: say so once, and tell its holder. `counted`: the renewal's answer counted it already (settle).
local function lost(l, why, hooks, counted)
    drop(l)
    if l._lost then
        return
    end
    l._lost = true
    if not counted then
        meter.lost(l._store.meter)
    end
    if hooks ~= nil then
        hooks.lost(l, why)
        return
    end
    ngx_log(ERR, "dlock: lease on ", l.key, " lost: ", why)
    local onLost = l._onLost
    if onLost ~= nil then
        -- In a timer of its own: a callback that calls Redis (takes the key again,
        -- waits) must not hold up the renewals of every other lease of the worker.
        local ok = timer_at(0, tell, onLost, l, why)
        if ok == nil then
            tell(false, onLost, l, why)
        end
    end
end
--- Has what took the lease ended (a request that is over, a timer whose function returned)?
local function orphaned(w)
    if w.hooks ~= nil then
        return false
    end
    if w.anchor ~= nil then
        return not request.alive(w.anchor)
    end
    return w.co ~= nil and request.finished(w.co)
end
--- Renew the leases due, and settle what their answers say.
local function renew(due)
    local results = batch.extendAll(due)
    for i = 1, #due do
        local l = due[i]
        local w = watched[l]
        local r = results[i]
        -- Released (or being released, or no longer watched) while the renewal was on its way: nothing was lost.
        if w ~= nil and not l._releasing then
            local hooks = w.hooks
            if r == true then
                if hooks ~= nil then
                    hooks.renewed(l)
                end
            elseif r == "not_owner" then
                lost(l, "the key is gone from Redis, or someone else's", hooks, true)
            elseif clock_now() * 1000 >= l._validUntil then
                lost(
                    l,
                    "Redis could not renew it before it expired (" .. check.reason(r) .. ")",
                    hooks,
                    false
                )
            elseif hooks ~= nil then
                hooks.failed(l, r)
            else
                local n = quiet_due(unanswered)
                if n > 0 then
                    ngx_log(
                        WARN,
                        "dlock: renewing the lease on ",
                        l.key,
                        ": ",
                        check.reason(r),
                        " (trying again)",
                        quiet_more(n)
                    )
                end
            end
        end
    end
end
--- renew(list) in a light thread of its own; its leases are not sent again until it is back (raise or not).
local function renewApart(list)
    local ok, err = lua_pcall(renew, list)
    if not ok then
        ngx_log(ERR, "dlock: lease watchdog: ", check.text(err))
    end
    for _, l in lua_ipairs(list) do
        local w = watched[l]
        if w ~= nil then
            w.renewing = false
        end
    end
end
--- The leases due, renewed: of one endpoint (the usual case) in this round; of
-- several, each endpoint's in a light thread that the sweep does not wait for,
-- so that a Redis that does not answer (paused, failing over) holds up neither
-- the others' renewals nor the next rounds, which renew its leases once it is back.
local function renewByEndpoint(due)
    local groups = batch.perEndpoint(due)
    if groups == nil then
        renew(due)
        return
    end
    for _, list in lua_pairs(groups) do
        for _, l in lua_ipairs(list) do
            watched[l].renewing = true
        end
        local ok = lua_pcall(thread_spawn, renewApart, list)
        if not ok then
            renewApart(list)
        end
    end
end
local function round()
    ngx_update_time()
    local now = clock_now()
    local due = {}
    local forgotten = {}
    for l, w in lua_pairs(watched) do
        if l._released or l._releasing or l._lost then
            drop(l)
        elseif orphaned(w) then
            forgotten[#forgotten + 1] = l
        elseif not w.renewing and l._validUntil - now * 1000 <= l.ttl * DUE then
            due[#due + 1] = l
        end
    end
    local releasing
    if #forgotten > 0 then
        for _, l in lua_ipairs(forgotten) do
            drop(l)
            ngx_log(WARN, "dlock: lease on ", l.key, " (renew = true) outlived the request or timer that took it: released")
        end
        -- Beside the renewals, not before them: a Redis slow to answer the releases holds up no renewal.
        local ok, co = lua_pcall(thread_spawn, batch.releaseAll, forgotten)
        if ok then
            releasing = co
        else
            batch.releaseAll(forgotten)
        end
    end
    if #due > 0 then
        renewByEndpoint(due)
    end
    if releasing ~= nil then
        thread_wait(releasing)
    end
end
local sweeper = {
    name = "lease watchdog",
    busy = function() return count > 0 end,
    tick = nextTick,
    round = round,
    running = false
}
--- l needs renewing sooner than the sweep now sleeps: wake it.
local function sooner(l)
    local t = tickFor(l.ttl)
    if t < tick then
        tick = t
        loop.hurry(sweeper)
    end
end
--- Keep l alive until it is released, lost, unwatched, or (without hooks) what
-- took it ends. With hooks, the caller hears of every renewal.
local function watch(l, hooks)
    local co
    local anchor
    if hooks == nil then
        anchor = request.anchor()
        if anchor == nil then
            co = co_running()
        end
    end
    if watched[l] == nil then
        count = count + 1
    end
    watched[l] = {lease = l, anchor = anchor, co = co, hooks = hooks, renewing = false}
    local err = loop.start(sweeper)
    if err ~= nil then
        drop(l)
        return err
    end
    sooner(l)
    return nil
end
--- Does the watchdog renew l (renew = true, not yet released or lost)?
function _M.watches(l)
    return watched[l] ~= nil
end
--- Its holder extended l (lease:extend): at its new ttl, which may want the sweep sooner than it sleeps.
function _M.extended(l)
    if watched[l] == nil then
        return
    end
    sooner(l)
end
--- The end of an acquire with renew = true: the lease, watched from now on; or,
-- when the watchdog cannot run, nil and why (the lease is given back).
function _M.hold(l, onLost)
    l._onLost = onLost
    local err = watch(l)
    if err ~= nil then
        l:release()
        return nil, err, nil
    end
    return l, nil, nil
end
--- Stop renewing l (its holder keeps it as it is, or ends it).
function _M.unwatch(l)
    drop(l)
end
--- Leases the watchdog of this worker renews now (for status pages).
function _M.size()
    return count
end
-- Exported by name: this module's own uses of them are locals, not lookups in its exports table.
_M.watch = watch
return _M
