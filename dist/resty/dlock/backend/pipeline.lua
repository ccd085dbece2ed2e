--[[ Generated with https://github.com/TypeScriptToLua/TypeScriptToLua ]]
local ____exports = {}
local redis = require("resty.dlock.redis")
local request = require("resty.dlock.request")
local resp = require("resty.dlock.resp")
local single = require("resty.dlock.backend.single")
local semaphore = require("ngx.semaphore")
--- Calls in one pipeline, at most: a larger batch waits for the next round trip.
local MAX_BATCH = 256
--- Calls of a worker that go out on connections of their own before the next
-- ones join a batch: at low load every call goes at once, as without
-- auto-pipelining; past it, a batch costs one round trip for all its calls.
____exports.DIRECT = 4
--- Seconds the per-endpoint sender waits for work before its timer ends.
local IDLE = 10
local lanes = setmetatable({}, {__mode = "k"})
local function laneOf(conf)
    local l = lanes[conf]
    if l == nil then
        local work = semaphore.new(0)
        if work == nil then
            return nil
        end
        l = {
            conf = conf,
            direct = {},
            slots = 0,
            batching = false,
            open = nil,
            sending = false,
            work = work,
            batched = 0,
            batches = 0
        }
        lanes[conf] = l
    end
    return l
end
local function fail(jobs, err, fault)
    for ____, j in ipairs(jobs) do
        if j.fault == nil and j.res == nil then
            j.err = err
            j.fault = fault
        end
    end
end
--- Send the jobs' scripts (by SHA, or with their bodies) in one write, and read their replies in turn.
local function roundTrip(conf, sock, jobs, body)
    local parts = {}
    local verb = body and "EVAL" or "EVALSHA"
    for ____, j in ipairs(jobs) do
        resp.command(parts, 4 + #j.args)
        resp.arg(parts, verb)
        resp.arg(parts, body and j.s.src or j.s.sha)
        resp.arg(parts, j.s.keys)
        resp.arg(parts, j.rkey)
        for ____, a in ipairs(j.args) do
            resp.arg(parts, a)
        end
    end
    local sent, serr = sock:send(table.concat(parts))
    if sent == nil then
        fail(
            jobs,
            ((("dlock: redis " .. conf.endpoint) .. ": ") .. tostring(serr)) .. " during a pipeline",
            "lost"
        )
        return {}
    end
    local again = {}
    for i = 1, #jobs do
        local j = jobs[i]
        local r, rerr = resp.read(sock)
        if r == nil then
            for k = i, #jobs do
                local lost = jobs[k]
                lost.err = (((("dlock: redis " .. conf.endpoint) .. ": ") .. tostring(rerr)) .. " during ") .. lost.s.name
                lost.fault = "lost"
            end
            return {}
        end
        if r == false then
            if not body and string.sub(
                tostring(rerr),
                1,
                8
            ) == "NOSCRIPT" then
                again[#again + 1] = j
            else
                local e, f = single.refused(conf, rerr)
                j.err = e
                j.fault = f
            end
        else
            j.res = r
        end
    end
    return again
end
local function run(conf, b)
    local jobs = {}
    for ____, j in ipairs(b.jobs) do
        if j.anchor ~= nil and not request.alive(j.anchor) then
            j.err = ("dlock: the request ended before its call to redis " .. conf.endpoint) .. " was sent"
            j.fault = "failed"
        else
            jobs[#jobs + 1] = j
        end
    end
    if #jobs == 0 then
        return
    end
    local red, cerr = redis.connect(conf)
    if red == nil then
        fail(
            jobs,
            cerr,
            single.unreachable(conf)
        )
        return
    end
    local sock = rawget(red, "_sock")
    local again = roundTrip(conf, sock, jobs, false)
    if #again > 0 then
        roundTrip(conf, sock, again, true)
    end
    local broken = false
    local wrote = {}
    for ____, j in ipairs(jobs) do
        if j.fault == "lost" then
            broken = true
        elseif j.res ~= nil and conf.replicas > 0 and j.s.written ~= nil and j.s.written(j.res) then
            wrote[#wrote + 1] = j
        end
    end
    if not broken and #wrote > 0 then
        local short = single.replicated(red, conf, wrote[1].s)
        if short ~= nil then
            for ____, j in ipairs(wrote) do
                j.res = nil
                j.err = short
                j.fault = "replicas"
            end
        end
        return
    end
    redis.done(red, conf, not broken)
end
--- Send the open batch, and the next, until there is none.
local function flush(lane)
    while lane.open ~= nil do
        local b = lane.open
        lane.open = nil
        lane.batching = true
        lane.batches = lane.batches + 1
        lane.batched = lane.batched + #b.jobs
        local ok, err = pcall(run, lane.conf, b)
        if not ok then
            fail(
                b.jobs,
                (("dlock: pipeline to redis " .. lane.conf.endpoint) .. " failed: ") .. tostring(err),
                "lost"
            )
        end
        lane.batching = false
        b.sem:post(#b.jobs)
    end
end
--- The sender: one timer per endpoint and worker, alive while there is work
-- (a timer per batch would cost more than the batch saves), gone after IDLE
-- seconds without any or when the worker exits.
local function sender(premature, lane)
    while not premature do
        flush(lane)
        if ngx.worker.exiting() then
            break
        end
        local woken = lane.work:wait(IDLE)
        if not woken and lane.open == nil then
            break
        end
    end
    if lane.open ~= nil then
        fail(lane.open.jobs, ("dlock: nginx worker exiting before the call to redis " .. lane.conf.endpoint) .. " was sent", "failed")
        lane.open.sem:post(#lane.open.jobs)
        lane.open = nil
    end
    lane.sending = false
end
--- Seconds a call may take: connect, two round trips (NOSCRIPT), a WAIT, and some.
local function patience(conf)
    return (conf.connect_timeout + 2 * conf.read_timeout + conf.replicas_timeout) / 1000 + 1
end
--- Calls of this worker on their way to this Redis now (forgetting those whose time is up).
local function inFlight(lane)
    local now = ngx.now()
    local n = lane.batching and 1 or 0
    for slot, ____until in pairs(lane.direct) do
        if ____until < now then
            lane.direct[slot] = nil
        else
            n = n + 1
        end
    end
    return n
end
--- Wait for the call's answer in the open batch (b, or a new one).
local function join(lane, open, s, rkey, args)
    local conf = lane.conf
    local b = open
    if b == nil then
        local sem, serr = semaphore.new(0)
        if sem == nil then
            return nil, "dlock: ngx.semaphore: " .. tostring(serr), "failed"
        end
        b = {jobs = {}, sem = sem}
        lane.open = b
    end
    if #b.jobs == 0 then
        if lane.sending then
            lane.work:post(1)
        else
            local started = ngx.timer.at(0, sender, lane)
            if started == nil then
                lane.open = nil
                return single.call(
                    conf,
                    s,
                    rkey,
                    unpack(args)
                )
            end
            lane.sending = true
        end
    end
    local job = {
        s = s,
        rkey = rkey,
        args = args,
        anchor = request.anchor(),
        res = nil,
        err = nil,
        fault = nil
    }
    local ____b_jobs_0 = b.jobs
    ____b_jobs_0[#____b_jobs_0 + 1] = job
    local wait = 2 * patience(conf)
    local woken = b.sem:wait(wait)
    if not woken and job.res == nil and job.fault == nil then
        return nil, (((("dlock: redis " .. conf.endpoint) .. ": no answer from the pipeline in ") .. tostring(wait)) .. " s during ") .. s.name, "lost"
    end
    return job.res, job.err, job.fault
end
--- Run s for rkey: at once while few calls of this worker are on their way to this Redis, else in the next pipeline.
function ____exports.call(conf, s, rkey, ...)
    local ____conf_auto_pipeline_1
    if conf.auto_pipeline then
        ____conf_auto_pipeline_1 = laneOf(conf)
    else
        ____conf_auto_pipeline_1 = nil
    end
    local lane = ____conf_auto_pipeline_1
    if lane == nil then
        return single.call(conf, s, rkey, ...)
    end
    if inFlight(lane) < ____exports.DIRECT then
        lane.slots = lane.slots + 1
        local slot = lane.slots
        lane.direct[slot] = ngx.now() + patience(conf)
        local res, err, fault = single.call(conf, s, rkey, ...)
        lane.direct[slot] = nil
        return res, err, fault
    end
    local b = lane.open
    if b ~= nil and #b.jobs >= MAX_BATCH then
        return single.call(conf, s, rkey, ...)
    end
    return join(
        lane,
        b,
        s,
        rkey,
        {...}
    )
end
--- Calls sent in batches, and batches, by this worker to conf's Redis.
function ____exports.stats(conf)
    local l = lanes[conf]
    if l == nil then
        return 0, 0
    end
    return l.batched, l.batches
end
return ____exports
