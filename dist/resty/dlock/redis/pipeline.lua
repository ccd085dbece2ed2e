--[[ Generated with https://github.com/TypeScriptToLua/TypeScriptToLua ]]
local ____exports = {}
local roundtrip = require("resty.dlock.redis.roundtrip")
local scripts = require("resty.dlock.redis.scripts")
local semaphore = require("ngx.semaphore")
local sem_new = semaphore.new
local ngx_now = ngx.now
local ngx_log = ngx.log
local ERR = ngx.ERR
local WARN = ngx.WARN
local NOTICE = ngx.NOTICE
local timer_at = ngx.timer.at
local worker_exiting = ngx.worker.exiting
local lua_pcall = pcall
local lua_tostring = tostring
local lua_next = next
local lua_pairs = pairs
local add = roundtrip.add
local run = roundtrip.run
local fail = roundtrip.fail
local alone = roundtrip.one
local wordOf = roundtrip.wordOf
local batchOf = roundtrip.batchOf
local forTarget = scripts.forTarget
--- Calls in one pipeline, at most: a larger batch waits for the next round trip.
local MAX_BATCH = 256
--- Calls of a worker that go out on connections of their own before the next
-- ones join a batch: at low load every call goes at once, as without
-- auto-pipelining; past it, a batch costs one round trip for all its calls.
____exports.DIRECT = 4
--- Batches of a worker on their way to one Redis at once, each from a timer
-- of its own on a connection of its own. With one, the next batch waited for
-- the previous one's replies while the worker sat idle (a third of the
-- time at 50 connections): two filled it (13 % more requests, at the same
-- CPU per request); a third added nothing.
local SENDERS = 2
--- Seconds a sender waits for work before its timer ends.
local IDLE = 10
--- Seconds after a batch of several calls during which calls join batches even
-- with fewer than DIRECT on their way (as they do while a batch is open or on
-- its way): the callers a batch wakes all call again at once, and a
-- connection of its own for each of the first DIRECT costs more than their
-- place in the next batch.
local LOADED = 0.002
local lanes = setmetatable({}, {__mode = "k"})
local function laneOf(conf)
    local l = lanes[conf]
    if l == nil then
        local work = sem_new(0)
        if work == nil then
            return nil
        end
        l = {
            conf = conf,
            direct = {},
            acquires = {},
            watching = false,
            slots = 0,
            batching = 0,
            open = nil,
            senders = 0,
            idle = 0,
            work = work,
            loaded = 0,
            batched = 0,
            batches = 0
        }
        lanes[conf] = l
    end
    return l
end
--- Take back what an acquire may have taken: its request ended before the reply came, so nobody ever will.
local function takeBackOne(conf, j)
    local rkey = wordOf(j, 1)
    local res, err = forTarget(
        alone,
        conf,
        j.s.undo,
        rkey,
        wordOf(j, j.s.keys + 1)
    )
    if res == nil then
        ngx_log(
            WARN,
            "dlock: ",
            rkey,
            " may be held by a request that ended before the ",
            j.s.name,
            " reply came, and cannot be taken back (",
            err,
            "): it expires on its own"
        )
    elseif res ~= 0 then
        ngx_log(
            NOTICE,
            "dlock: took back ",
            rkey,
            ": its request ended before the ",
            j.s.name,
            " reply came"
        )
    end
end
--- Take back the acquires of batch b whose callers did not come back for their
-- replies: a timer started once the callers were woken, so every caller still
-- there has been back. Only those whose replies were read: nothing of theirs
-- can land later. (A lost reply of a caller that is gone is left to its ttl.)
local function settle(premature, conf, b)
    local jobs = b.jobs
    for i = 1, #jobs do
        local j = jobs[i]
        if j.s.undo ~= nil and j.res ~= nil and not j.back then
            local ok, err = lua_pcall(takeBackOne, conf, j)
            if not ok then
                ngx_log(ERR, "dlock: take-back failed: ", err)
            end
        end
    end
end
--- Wake b's callers. A caller whose request ended (a client abort, a killed
-- thread) or whose wait timed out left the semaphore's queue, so resources
-- left over say that some did not come back; which ones is known once the
-- others have run. Asking costs the common case one FFI call, where a look
-- at each caller's request cost every call an ngx.ctx.
local function wake(conf, b)
    local sem = b.sem
    sem:post(#b.jobs)
    if b.undos > 0 and sem:count() > 0 then
        local ok, err = timer_at(0, settle, conf, b)
        if ok == nil then
            ngx_log(ERR, "dlock: cannot take back the acquires of gone callers: ", err)
        end
    end
end
--- Send the open batch, and the next, until there is none.
local function flush(lane)
    while lane.open ~= nil do
        local b = lane.open
        lane.open = nil
        lane.batching = lane.batching + 1
        lane.batches = lane.batches + 1
        lane.batched = lane.batched + #b.jobs
        local ok, err = lua_pcall(run, lane.conf, b)
        if not ok then
            fail(
                b,
                (("dlock: pipeline to redis " .. lane.conf.endpoint) .. " failed: ") .. lua_tostring(err),
                "lost"
            )
        end
        lane.batching = lane.batching - 1
        if #b.jobs > 1 then
            lane.loaded = ngx_now() + LOADED
        end
        wake(lane.conf, b)
    end
end
--- A sender: a timer of the endpoint's lane in this worker, alive while there
-- is work (a timer per batch would cost more than the batch saves), gone
-- after IDLE seconds without any or when the worker exits.
local function sender(premature, lane)
    while not premature do
        flush(lane)
        if worker_exiting() then
            break
        end
        lane.idle = lane.idle + 1
        local woken = lane.work:wait(IDLE)
        lane.idle = lane.idle - 1
        if not woken and lane.open == nil then
            break
        end
    end
    if lane.open ~= nil then
        fail(lane.open, ("dlock: nginx worker exiting before the call to redis " .. lane.conf.endpoint) .. " was sent", "failed")
        lane.open.sem:post(#lane.open.jobs)
        lane.open = nil
    end
    lane.senders = lane.senders - 1
end
--- Seconds a call may take: connect, two round trips (NOSCRIPT), a WAIT, and some.
local function patience(conf)
    return (conf.connect_timeout + 2 * conf.read_timeout + conf.replicas_timeout) / 1000 + 1
end
--- Calls of this worker on their way to this Redis now (forgetting those whose time is up).
local function inFlight(lane)
    local now = ngx_now()
    local n = lane.batching
    for slot, ____until in lua_pairs(lane.direct) do
        if ____until < now then
            lane.direct[slot] = nil
        else
            n = n + 1
        end
    end
    return n
end
--- The batch calls join now (a new one when none is open), with a sender woken
-- or started for it; nil when neither a semaphore nor a sender can be had.
local function opened(lane)
    local b = lane.open
    if b == nil then
        local sem = sem_new(0)
        if sem == nil then
            return nil
        end
        b = batchOf(sem, false)
        lane.open = b
    end
    if #b.jobs == 0 then
        if lane.idle > 0 then
            lane.work:post(1)
        elseif lane.senders < SENDERS then
            local started = timer_at(0, sender, lane)
            if started ~= nil then
                lane.senders = lane.senders + 1
            elseif lane.senders == 0 then
                lane.open = nil
                return nil
            end
        end
    end
    return b
end
--- Wait for the call's answer in the open batch (or on its own, when no batch can be had).
local function join(lane, s, rkey, ...)
    local conf = lane.conf
    local b = opened(lane)
    if b == nil then
        return alone(conf, s, rkey, ...)
    end
    local job = add(b, s, rkey, ...)
    local wait = 2 * patience(conf)
    local woken = b.sem:wait(wait)
    job.back = true
    if not woken and job.res == nil and job.fault == nil then
        return nil, (((("dlock: redis " .. conf.endpoint) .. ": no answer from the pipeline in ") .. lua_tostring(wait)) .. " s during ") .. s.name, "lost"
    end
    return job.res, job.err, job.fault
end
--- Seconds between looks for acquires sent at once whose callers never came back.
local WATCH = 1
--- Acquires sent at once whose callers never came back for the answer: their
-- request ended in the middle (a client abort) or their thread was killed.
-- A slot still there when its time is up says so without a look at the
-- request: every step of a call is bounded by a timeout, and its time
-- (patience) is their sum and a second more. Waiting for it matters too: the
-- connection was closed with the command perhaps not yet run, and by then it
-- has run (or Redis has been stuck that long).
local function watcher(premature, lane)
    local now = ngx_now()
    local gone = {}
    for slot, b in lua_pairs(lane.acquires) do
        local ____until = lane.direct[slot]
        if ____until == nil or ____until < now then
            lane.acquires[slot] = nil
            lane.direct[slot] = nil
            gone[#gone + 1] = b
        end
    end
    for i = 1, #gone do
        local ok, err = lua_pcall(takeBackOne, lane.conf, gone[i].jobs[1])
        if not ok then
            ngx_log(ERR, "dlock: take-back failed: ", err)
        end
    end
    if premature or (lua_next(lane.acquires)) == nil or (timer_at(WATCH, watcher, lane)) == nil then
        lane.watching = false
    end
end
--- A call sent at once on a pooled connection of its own, counted in lane.direct while on its way.
local function direct(lane, s, rkey, ...)
    local conf = lane.conf
    lane.slots = lane.slots + 1
    local slot = lane.slots
    lane.direct[slot] = ngx_now() + patience(conf)
    local b = batchOf(nil, false)
    local job = add(b, s, rkey, ...)
    if s.undo ~= nil then
        lane.acquires[slot] = b
        if not lane.watching then
            lane.watching = (timer_at(WATCH, watcher, lane)) ~= nil
        end
    end
    run(conf, b)
    lane.direct[slot] = nil
    lane.acquires[slot] = nil
    return job.res, job.err, job.fault
end
--- Run s for rkey: at once while few calls of this worker are on their way to this Redis and none ride a batch, else in the next pipeline.
function ____exports.call(conf, s, rkey, ...)
    local ____conf_auto_pipeline_0
    if conf.auto_pipeline then
        ____conf_auto_pipeline_0 = laneOf(conf)
    else
        ____conf_auto_pipeline_0 = nil
    end
    local lane = ____conf_auto_pipeline_0
    if lane == nil then
        return alone(conf, s, rkey, ...)
    end
    if lane.batching == 0 and lane.open == nil and ngx_now() >= lane.loaded and inFlight(lane) < ____exports.DIRECT then
        return direct(lane, s, rkey, ...)
    end
    local b = lane.open
    if b ~= nil and #b.jobs >= MAX_BATCH then
        return alone(conf, s, rkey, ...)
    end
    return join(lane, s, rkey, ...)
end
--- Calls sent in batches, batches, and batches on their way now, by this worker to conf's Redis.
function ____exports.stats(conf)
    local l = lanes[conf]
    if l == nil then
        return 0, 0, 0
    end
    return l.batched, l.batches, l.batching
end
return ____exports
