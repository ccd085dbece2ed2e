-- Generated from src/resty/dlock/redis/quorum.ts by TypeScriptToLua: edit that file, not this one.
-- Redlock over N independent masters (redis.redlock), as the algorithm on
-- redis.io describes it: the script runs on every master at once (each on its
-- master's auto-pipeline, all sent before any reply is read, so a paused
-- master costs its timeout once, not once per master), and the outcome is the
-- majority's. An acquire counts only when a majority
-- took the key within the validity time (ttl minus the time it took minus the
-- allowance for clock drift); otherwise it is undone, owner-checked, on every
-- master. A release goes to every master; an extend counts on a majority (and,
-- while the lease is valid, puts the key back where a master lost it: majority.lua).
-- Only the plain lock runs here: a fence counter per master is not monotonic
-- across majorities, and counting semaphores per master do not bound holders,
-- so factories refuse those at new() (see kindSupported).
local _M = {}
local votes = require("resty.dlock.redis.majority")
local fanning = require("resty.dlock.redis.fanout")
local roundtrip = require("resty.dlock.redis.roundtrip")
local perTarget = require("resty.dlock.redis.targets")
local scripts = require("resty.dlock.redis.scripts")
local clock = require("resty.dlock.core.clock")
local dictcount = require("resty.dlock.core.dictcount")
local drift = votes.drift
local nowMs = votes.nowMs
local decideAcquire = votes.decideAcquire
local decideRelease = votes.decideRelease
local decideExtend = votes.decideExtend
local EXTEND_RESTORING = votes.EXTEND_RESTORING
local fanout = fanning.fanout
local batchFor = perTarget.batchFor
local outcome = perTarget.outcome
local send = roundtrip.send
local finish = roundtrip.finish
local clock_now = clock.now
local lua_type = type
local lua_select = select
local lua_tostring = tostring
local lua_tonumber = tonumber
local math_floor = math.floor
--- Is this script one a quorum can decide?
local function kindSupported(s)
    return s == scripts.ACQUIRE or s == scripts.RELEASE or s == scripts.EXTEND or s == EXTEND_RESTORING
end
--- Per worker, per master (by endpoint): what its calls did, for status pages.
local health = {}
--- Shared dict key (all workers): calls to a master that failed.
_M.NODE_FAILURES = "c:redis:node_failures:"
local function note(node, fault, err)
    local h = health[node.endpoint]
    if h == nil then
        h = {ok = 0, failed = 0, lastError = nil, lastOk = 0}
        health[node.endpoint] = h
    end
    if fault == nil then
        h.ok = h.ok + 1
        h.lastOk = clock_now()
    else
        h.failed = h.failed + 1
        h.lastError = err
        if node.dict ~= nil then
            dictcount.count(node.dict, _M.NODE_FAILURES .. node.endpoint, 1)
        end
    end
end
local function take(v, i, node, r, e, f)
    note(node, f, e)
    if r ~= nil then
        v.replies[i] = r
    else
        v.errors[i] = e or "dlock: redis " .. node.endpoint .. ": no reply"
        v.faults[i] = f or "failed"
    end
end
--- s for rkey on every master at once, each on its own auto-pipeline.
local function everywhere(conf, s, rkey, ...)
    local nodes = conf.nodes
    local v = {replies = {}, errors = {}, faults = {}}
    local jobs = fanout(nodes, s, rkey, ...)
    for i = 1, #nodes do
        local j = jobs[i]
        take(v, i, nodes[i], j.res, j.err, j.fault)
    end
    return v
end
--- Run s for rkey on the masters and decide by majority (ARGV[1] the token, ARGV[2] the ttl).
local function call(conf, s, rkey, ...)
    if not kindSupported(s) then
        return nil, "dlock: redis " .. conf.endpoint .. ": the " .. s.name .. " script cannot run on a Redlock quorum", "failed"
    end
    local started = nowMs()
    local v = everywhere(conf, s, rkey, ...)
    if s == scripts.RELEASE then
        return decideRelease(conf, v)
    end
    local tok, ms = lua_select(1, ...)
    local ttl = lua_tonumber(ms) or 0
    if s == scripts.EXTEND or s == EXTEND_RESTORING then
        return decideExtend(conf, v, ttl, started)
    end
    return decideAcquire(conf, v, rkey, lua_tostring(tok), ttl, started)
end
--- Each target on every master (one pipeline per master, all at once), decided per target.
local function batch(conf, s, targets, ms)
    local out = {replies = {}, errors = {}, faults = {}}
    if s ~= scripts.RELEASE and s ~= scripts.EXTEND and s ~= EXTEND_RESTORING then
        for i = 1, #targets do
            out.errors[i] = "dlock: redis " .. conf.endpoint .. ": the " .. s.name .. " script cannot run on a Redlock quorum"
            out.faults[i] = "failed"
        end
        return out
    end
    if #targets == 0 then
        return out
    end
    local nodes = conf.nodes
    local started = nowMs()
    -- One pipeline per master, all on their way before any reply is read.
    local per = {}
    local reds = {}
    for j = 1, #nodes do
        local b = batchFor(nodes[j], s, targets, ms)
        per[j] = b
        local red = send(nodes[j], b)
        if red ~= nil then
            reds[j] = red
        end
    end
    local outs = {}
    for j = 1, #nodes do
        local red = reds[j]
        if red ~= nil then
            finish(nodes[j], per[j], red)
        end
        outs[j] = outcome(per[j])
    end
    for i = 1, #targets do
        local v = {replies = {}, errors = {}, faults = {}}
        for j = 1, #nodes do
            local o = outs[j]
            local r = o.replies[i]
            if r ~= nil then
                v.replies[j] = r
            else
                v.errors[j] = o.errors[i] or "dlock: redis " .. nodes[j].endpoint .. ": no reply"
                v.faults[j] = o.faults[i] or "failed"
            end
        end
        local res
        local err
        local fault
        if s == scripts.RELEASE then
            res, err, fault = decideRelease(conf, v)
        else
            res, err, fault = decideExtend(conf, v, ms ~= nil and ms[i] or 0, started)
        end
        if res ~= nil then
            out.replies[i] = res
        else
            out.errors[i] = err
            out.faults[i] = fault
        end
    end
    for j = 1, #nodes do
        local o = outs[j]
        note(nodes[j], o.faults[1], o.errors[1])
    end
    return out
end
--- For status pages: per master, calls that worked and failed, the last error, seconds since the last answer.
local function describe(conf)
    local list = {}
    local nodes = conf.nodes
    for i = 1, #nodes do
        local n = nodes[i]
        local h = health[n.endpoint]
        local t = {}
        t.endpoint = n.endpoint
        if h ~= nil then
            t.ok = h.ok
            t.failed = h.failed
            t.last_error = h.lastError
            if h.lastOk > 0 then
                t.last_ok_age = math_floor((clock_now() - h.lastOk) * 1000) / 1000
            end
        end
        list[#list + 1] = t
    end
    local t = {}
    t.masters = list
    t.majority = votes.majority(conf)
    return t
end
local function validity(ttl)
    return ttl - drift(ttl)
end
--- A fence counter per master, not one: the key stays where the other topologies keep it.
local function fenceKey(rkey)
    return rkey .. ":fence"
end
--- Failed calls per master, over every worker.
local function shared(conf, d)
    local t = {}
    local nodes = conf.nodes
    for i = 1, #nodes do
        local ep = nodes[i].endpoint
        local n = d:get(_M.NODE_FAILURES .. ep)
        t[ep] = lua_type(n) == "number" and n or 0
    end
    return "redlock", t
end
local function servers(conf)
    return conf.nodes
end
--- Nothing rides one pipeline here: a release must reach a majority, and its votes be counted (a timer calls it).
local function post()
    return nil
end
local REFUSES = {}
REFUSES.fencing = "dlock: fencing is refused with redis.redlock: fence counters on independent masters do not grow " .. "monotonically across majorities (use redis.sentinel or redis.cluster with replicas for fenced locks)"
REFUSES.semaphore = "dlock: semaphores (and concurrency guards) are refused with redis.redlock: counting permits on each " .. "master does not bound the holders of a majority"
REFUSES.idempotency = "dlock: idempotency guards are refused with redis.redlock: a stored response needs one place to live"
REFUSES.rate = "dlock: rate limits are refused with redis.redlock: counting on each master of a majority does not " .. "bound the total (use redis.sentinel or redis.cluster)"
-- Majorities would keep readers from writers (any two majorities share a
-- master), but a writer that waits must hold back new readers, and that takes
-- one line for all, which no majority of independent masters has.
REFUSES.shared = "dlock: shared = true is refused with redis.redlock: holding back readers while a writer " .. "waits takes one line of waiters, which independent masters do not have (writers would starve)"
_M.backend = {
    call = call,
    post = post,
    batch = batch,
    validity = validity,
    queues = false,
    confirmsOwner = false,
    refuses = REFUSES,
    fenceKey = fenceKey,
    shared = shared,
    describe = describe,
    servers = servers
}
return _M
