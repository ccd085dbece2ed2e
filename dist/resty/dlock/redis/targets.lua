-- Generated from src/resty/dlock/redis/targets.ts by TypeScriptToLua: edit that file, not this one.
-- Many leases' calls in one batch (releases, extends, acquire_all's keys
-- where they cannot share a script): a per-target script for every target,
-- sent as one pipeline on one server, and what each call came to.
local _M = {}
local command = require("resty.dlock.redis.command")
local roundtrip = require("resty.dlock.redis.roundtrip")
local scripts = require("resty.dlock.redis.scripts")
local add = command.add
local batchOf = command.batchOf
local forTarget = scripts.forTarget
local run = roundtrip.run
local function addInto(into, s, rkey, ...)
    return add(into.b, s, rkey, ...)
end
--- A per-target script (scripts.forTarget's keys and arguments) for every target, as one batch.
local function batchFor(conf, s, targets, ms)
    local b = batchOf(nil, false)
    local into = {b = b, slotted = conf.slotted}
    for i = 1, #targets do
        local t = targets[i]
        local m
        if ms ~= nil then
            m = ms[i]
        end
        forTarget(addInto, into, s, t.rkey, t.token, m)
    end
    return b
end
--- What b's calls came to, per call.
local function outcome(b)
    local out = {replies = {}, errors = {}, faults = {}}
    for i = 1, #b.jobs do
        local j = b.jobs[i]
        if j.res ~= nil then
            out.replies[i] = j.res
        else
            out.errors[i] = j.err
            out.faults[i] = j.fault
        end
    end
    return out
end
--- A per-target script for every target in one round trip (two when Redis met NOSCRIPT), on one server.
function _M.many(conf, s, targets, ms)
    local b = batchFor(conf, s, targets, ms)
    if #targets > 0 then
        run(conf, b)
    end
    return outcome(b)
end
-- Exported by name: this module's own uses of them are locals, not lookups in its exports table.
_M.batchFor = batchFor
_M.outcome = outcome
return _M
