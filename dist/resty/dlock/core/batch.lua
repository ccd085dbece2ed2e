-- Generated from src/resty/dlock/core/batch.ts by TypeScriptToLua: edit that file, not this one.
-- Many leases in one round trip per Redis endpoint: how a busy gateway's
-- queued releases keep up, and how the watchdog and the gateway renew
-- the leases they keep alive.
local _M = {}
local backend = require("resty.dlock.redis.backend")
local settle = require("resty.dlock.core.settle")
local extendScript = settle.extendScript
local lua_pairs = pairs
local lua_ipairs = ipairs
local lua_next = next
local lua_pcall = pcall
local lua_error = error
local lua_tostring = tostring
local ngx_log = ngx.log
local ERR = ngx.ERR
--- A renewal's result while its answer is not read.
local RAISED = "dlock: the renewal raised before its answer was read"
local thread_spawn = ngx.thread.spawn
local thread_wait = ngx.thread.wait
--- Leases of the list grouped for pipelining: one group per Redis endpoint and
-- script (locks and permits run different scripts), each with the indexes of
-- its leases in the list.
local function byEndpoint(list, script, at)
    local groups = {}
    for i = 1, #list do
        local l = list[i]
        if not l._released then
            local g = l._store.redis.pool .. " " .. script(l, at).sha
            local idx = groups[g]
            if idx == nil then
                idx = {}
                groups[g] = idx
            end
            idx[#idx + 1] = i
        end
    end
    return groups
end
--- The leases of list by Redis endpoint, in their order; nil when all are of one (the usual case: no table made).
function _M.perEndpoint(list)
    local pool = list[1]._store.redis.pool
    local one = true
    for _, l in lua_ipairs(list) do
        if l._store.redis.pool ~= pool then
            one = false
        end
    end
    if one then
        return nil
    end
    local groups = {}
    for _, l in lua_ipairs(list) do
        local p = l._store.redis.pool
        local g = groups[p]
        if g == nil then
            g = {}
            groups[p] = g
        end
        g[#g + 1] = l
    end
    return groups
end
local function releaseScript(l)
    return l._kind.release
end
--- The owner-checked targets (Redis key, token) of the leases of `list` at `idx`.
local function targetsOf(list, idx)
    local targets = {}
    for j = 1, #idx do
        local l = list[idx[j]]
        targets[j] = {rkey = l._rkey, token = l.token}
    end
    return targets
end
--- One endpoint's group of releaseAll.
local function releaseGroup(list, idx, untimed, t)
    local first = list[idx[1]]
    local out = backend.batch(first._store.redis, first._kind.release, targetsOf(list, idx))
    for j = 1, #idx do
        local l = list[idx[j]]
        local reply = out.replies[j]
        if reply == nil then
            settle.unconfirmed(l, out.faults[j], true)
            t.failed = t.failed + 1
            t.lastErr = out.errors[j]
            settle.orphan(l)
        else
            settle.released(l, reply, untimed)
        end
    end
end
--- One endpoint's group of extendAll.
local function extendGroup(list, idx, results, sent)
    -- Until its answer is read: a raise below must not leave "not_owner" (lost) where nothing was learnt.
    for j = 1, #idx do
        results[idx[j]] = RAISED
    end
    local ms = {}
    for j = 1, #idx do
        -- At an extend()'s ttl while one is on its way: whichever reaches Redis last, the key gets it.
        local l = list[idx[j]]
        ms[j] = l._extendingMs or l.ttl
    end
    local first = list[idx[1]]
    -- The group's script, as byEndpoint chose it at `sent`.
    local out = backend.batch(first._store.redis, extendScript(first, sent), targetsOf(list, idx), ms)
    for j = 1, #idx do
        local i = idx[j]
        local l = list[i]
        local reply = out.replies[j]
        if reply == nil then
            settle.unconfirmed(l, out.faults[j], false)
            results[i] = out.errors[j]
        else
            -- At the ttl sent.
            local ok, err = settle.extended(l, reply, ms[j], sent)
            results[i] = ok or err
        end
    end
end
--- Run `run` for each endpoint's group; with several, each group after the first
-- in a light thread of its own, all at once: a Redis that does not answer (paused,
-- failing over) holds up none of the others' renewals for its timeout.
local function eachGroup(groups, list, run, a, b)
    local k1, first = lua_next(groups)
    if k1 == nil then
        return
    end
    if (lua_next(groups, k1)) == nil then
        run(list, first, a, b)
        return
    end
    local threads = {}
    for k, idx in lua_pairs(groups) do
        if k ~= k1 then
            local ok, co = lua_pcall(thread_spawn, run, list, idx, a, b)
            -- No light threads here (a phase without them): in turn, then.
            if not ok then
                run(list, idx, a, b)
            else
                threads[#threads + 1] = co
            end
        end
    end
    run(list, first, a, b)
    for i = 1, #threads do
        local ok, err = thread_wait(threads[i])
        if not ok then
            ngx_log(ERR, "dlock: a batch of one Redis endpoint raised: ", lua_tostring(err))
        end
    end
end
function _M.releaseAll(list, untimed)
    if untimed == nil then
        untimed = false
    end
    local t = {failed = 0, lastErr = nil}
    eachGroup(byEndpoint(list, releaseScript, 0), list, releaseGroup, untimed, t)
    return t.failed, t.lastErr
end
--- Extend many leases, each to its own ttl, in one round trip per Redis
-- endpoint: how a gateway renews the leases of its in-flight requests. Results
-- are aligned with the list: true, "not_owner" (the lease ran out; it is over,
-- as after extend()), or an error message ("dlock: redis ...").
function _M.extendAll(list)
    local results = {}
    for i = 1, #list do
        results[i] = "not_owner"
        -- An extend() of one waits for this renewal (lease.lua _renewing).
        list[i]._renewing = true
    end
    -- Fresh: whether a Redlock lease is still valid picks its script (settle.extendScript).
    local sent = settle.nowMs()
    local ok, err = lua_pcall(eachGroup, byEndpoint(list, extendScript, sent), list, extendGroup, results, sent)
    for i = 1, #list do
        list[i]._renewing = nil
    end
    if not ok then
        lua_error(err, 0)
    end
    return results
end
return _M
