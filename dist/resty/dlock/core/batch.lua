-- Generated from src/resty/dlock/core/batch.ts by TypeScriptToLua: edit that file, not this one.
local _M = {}
local backend = require("resty.dlock.redis.backend")
local settle = require("resty.dlock.core.settle")
local clock = require("resty.dlock.core.clock")
local clock_now = clock.now
local lua_pairs = pairs
--- Leases of the list grouped for pipelining: one group per Redis endpoint and
-- script (locks and permits run different scripts), each with the indexes of
-- its leases in the list.
local function byEndpoint(list, script)
    local groups = {}
    for i = 1, #list do
        local l = list[i]
        if not l._released then
            local g = l._store.redis.pool .. " " .. script(l).sha
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
local function releaseScript(l)
    return l._kind.release
end
local function extendScript(l)
    return l._kind.extend
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
--- Release many leases in one round trip per Redis endpoint (a pipeline of the
-- owner-checked release script): how queued releases of a busy gateway keep
-- up. A release Redis did not confirm leaves its lease to a background sweep
-- that retries it until Redis answers or the key expires; the lease ends when
-- the sweep gets an answer. Returns how many were not confirmed now, and the
-- last error.
function _M.releaseAll(list)
    local failed = 0
    local lastErr
    for _, idx in lua_pairs(byEndpoint(list, releaseScript)) do
        local first = list[idx[1]]
        local out = backend.batch(
            first._store.redis,
            first._kind.release,
            targetsOf(list, idx)
        )
        for j = 1, #idx do
            local l = list[idx[j]]
            local reply = out.replies[j]
            if reply == nil then
                settle.unconfirmed(l, out.faults[j], true)
                failed = failed + 1
                lastErr = out.errors[j]
                settle.orphan(l)
            else
                settle.released(l, reply)
            end
        end
    end
    return failed, lastErr
end
--- Extend many leases, each to its own ttl, in one round trip per Redis
-- endpoint: how a gateway renews the leases of its in-flight requests. Results
-- are aligned with the list: true, "not_owner" (the lease ran out; it is over,
-- as after extend()), or an error message ("dlock: redis ...").
function _M.extendAll(list)
    local results = {}
    for i = 1, #list do
        results[i] = "not_owner"
    end
    local sent = clock_now() * 1000
    for _, idx in lua_pairs(byEndpoint(list, extendScript)) do
        local ms = {}
        for j = 1, #idx do
            ms[j] = list[idx[j]].ttl
        end
        local first = list[idx[1]]
        local out = backend.batch(
            first._store.redis,
            first._kind.extend,
            targetsOf(list, idx),
            ms
        )
        for j = 1, #idx do
            local i = idx[j]
            local l = list[i]
            local reply = out.replies[j]
            if reply == nil then
                settle.unconfirmed(l, out.faults[j], false)
                results[i] = out.errors[j]
            else
                local ok, err = settle.extended(l, reply, l.ttl, sent)
                results[i] = ok or err
            end
        end
    end
    return results
end
return _M
