-- Generated from src/resty/dlock/redis/pipeline.ts by TypeScriptToLua: edit that file, not this one.
local _M = {}
local command = require("resty.dlock.redis.command")
local connection = require("resty.dlock.redis.connection")
local lanes = require("resty.dlock.redis.lanes")
local roundtrip = require("resty.dlock.redis.roundtrip")
local takeback = require("resty.dlock.redis.takeback")
local clock = require("resty.dlock.core.clock")
local clock_now = clock.now
local clock_timeout = clock.timeout
local ngx_log = ngx.log
local ERR = ngx.ERR
local timer_at = ngx.timer.at
local worker_exiting = ngx.worker.exiting
local lua_pcall = pcall
local lua_tostring = tostring
local add = command.add
local recycleJob = command.recycle
local fail = command.fail
local batchOf = command.batchOf
local run = roundtrip.run
local runOn = roundtrip.runOn
local done = connection.done
local alone = roundtrip.one
local settle = takeback.settle
local laneOf = lanes.laneOf
local patience = lanes.patience
local claim = lanes.claim
local unclaim = lanes.unclaim
local idle = lanes.idle
local semaphoreOf = lanes.semaphoreOf
local recycle = lanes.recycle
--- Calls of a worker that go out at once before the next ones join a batch (lanes.ts).
_M.DIRECT = lanes.DIRECT
--- Calls sent in batches, batches, and batches on their way now, by this worker to conf's Redis.
_M.stats = lanes.stats
--- Calls in one pipeline, at most: a larger batch waits for the next round trip.
local MAX_BATCH = 256
--- Calls a batch has room for before it grows: about as many as 50 requests' calls make per round trip.
local BATCH = 16
local TURN = 1
--- Seconds a sender waits for work before its timer ends.
local IDLE = 10
--- Seconds between an idle sender's looks at whether its worker exits.
local EXIT_CHECK = 0.5
--- Hand the calls nobody waits for (post) their outcome.
local function answered(b)
    local jobs = b.jobs
    for i = 1, #jobs do
        local j = jobs[i]
        local p = j.post
        if p ~= nil then
            local ok, err = lua_pcall(p.answered, j)
            if not ok then
                ngx_log(
                    ERR,
                    "dlock: settling the posted ",
                    j.s.name,
                    " of ",
                    j.rkey,
                    " raised: ",
                    err
                )
            end
        end
    end
end
--- Wake b's callers. A caller whose request ended (a client abort, a killed
-- thread) or whose wait timed out left the semaphore's queue, so resources
-- left over say that some did not come back; which ones is known once the
-- others have run. Asking costs the common case one FFI call, where a look
-- at each caller's request cost every call an ngx.ctx. A lone sender queues
-- behind them (first in, first woken; a stock nginx's ngx.sleep(0) runs it first).
local function wake(lane, b)
    local sem = b.sem
    local waiting = #b.jobs - b.posted
    if waiting > 0 and lane.conf.senders == 1 then
        sem:post(waiting + 1)
        sem:wait(TURN)
    elseif waiting > 0 then
        sem:post(waiting)
    end
    if sem:count() == 0 then
        recycle(lane, sem)
    elseif b.undos > 0 then
        b.kept = true
        local ok, err = timer_at(0, settle, lane.conf, b)
        if ok == nil then
            ngx_log(ERR, "dlock: cannot take back the acquires of gone callers: ", err)
        end
    end
    if b.posted > 0 then
        answered(b)
    end
end
--- Send the open batch, and the next, until there is none: back to back on one
-- connection, which goes back to its pool once no batch is open.
local function flush(lane)
    local red
    while lane.open ~= nil do
        local b = lane.open
        lane.open = nil
        lane.batching = lane.batching + 1
        lane.batches = lane.batches + 1
        lane.batched = lane.batched + #b.jobs
        local ok, res = lua_pcall(runOn, lane.conf, b, red)
        red = nil
        if ok then
            red = res
        else
            fail(
                b,
                "dlock: pipeline to redis " .. lane.conf.endpoint .. " failed: " .. lua_tostring(res),
                "lost"
            )
        end
        lane.batching = lane.batching - 1
        if #b.jobs > 1 then
            lane.loaded = clock_now() + lanes.LOADED
        end
        wake(lane, b)
    end
    if red ~= nil then
        done(red, lane.conf, true)
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
        local woken = false
        local waited = 0
        while not woken and waited < IDLE and not worker_exiting() do
            woken = lane.work:wait(EXIT_CHECK)
            waited = waited + EXIT_CHECK
        end
        lane.idle = lane.idle - 1
        if not woken and lane.open == nil then
            break
        end
    end
    if lane.open ~= nil then
        local b = lane.open
        lane.open = nil
        fail(b, "dlock: nginx worker exiting before the call to redis " .. lane.conf.endpoint .. " was sent", "failed")
        wake(lane, b)
    end
    lane.senders = lane.senders - 1
end
--- The batch calls join now (a new one when none is open), with a sender woken
-- or started for it; nil when neither a semaphore nor a sender can be had.
local function opened(lane)
    local b = lane.open
    if b == nil then
        local sem = semaphoreOf(lane)
        if sem == nil then
            return nil
        end
        b = batchOf(sem, false, BATCH)
        lane.open = b
    end
    if #b.jobs == 0 then
        if lane.idle > 0 then
            lane.work:post(1)
        elseif lane.senders < lane.conf.senders then
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
--- The lane of conf's calls (nil: auto_pipeline off).
local function laneFor(conf)
    if not conf.auto_pipeline then
        return nil
    end
    return laneOf(conf)
end
--- The batch a call joins now: the open one, or a new one; nil when the open
-- one is full (it goes as it is) or neither a semaphore nor a sender can be had.
local function joinable(lane)
    local open = lane.open
    if open ~= nil and #open.jobs >= MAX_BATCH then
        return nil
    end
    return opened(lane)
end
--- Wait for job's answer in batch b (its caller was away meanwhile: back): its
-- batch's time, and the time of the batch ahead of it. A call with no answer
-- by then is "outcome unknown". True when the answer came with its batch:
-- the sender is done with the call.
local function awaited(conf, b, job)
    local wait = 2 * patience(conf)
    local sem = b.sem
    local woken = sem:wait(wait)
    if woken and job.res == nil and job.fault == nil then
        local deadline = clock_now() + wait
        while woken and job.res == nil and job.fault == nil do
            local rest = deadline - clock_now()
            woken = rest > 0 and (sem:wait(clock_timeout(rest)))
        end
    end
    job.back = true
    if not woken and job.res == nil and job.fault == nil then
        job.err = "dlock: redis " .. conf.endpoint .. ": no answer from the pipeline in " .. lua_tostring(wait) .. " s during " .. job.s.name
        job.fault = "lost"
        return false
    end
    return woken == true
end
--- A call sent at once on a pooled connection of its own, counted in lane.direct while on its way.
local function direct(lane, s, rkey, ...)
    local b = batchOf(nil, false, 1)
    local job = add(b, s, rkey, ...)
    local slot = claim(lane, b)
    run(lane.conf, b)
    unclaim(lane, slot)
    local res = job.res
    local err = job.err
    local fault = job.fault
    recycleJob(job)
    return res, err, fault
end
--- Run s for rkey: at once while few calls of this worker are on their way to this Redis and none ride a batch, else in the next pipeline.
function _M.call(conf, s, rkey, ...)
    local lane = laneFor(conf)
    if lane == nil then
        return alone(conf, s, rkey, ...)
    end
    if idle(lane) then
        return direct(lane, s, rkey, ...)
    end
    local b = joinable(lane)
    if b == nil then
        return alone(conf, s, rkey, ...)
    end
    local job = add(b, s, rkey, ...)
    local replied = awaited(conf, b, job)
    local res = job.res
    local err = job.err
    local fault = job.fault
    if replied and not b.kept then
        recycleJob(job)
    end
    return res, err, fault
end
--- Put s for rkey into conf's next pipeline without waiting for its reply, from
-- any phase (log_by_lua has no cosockets; a sender's timer has): the call,
-- whose `post` the sender reports its outcome to (set it before yielding).
-- nil when it cannot go that way (no auto-pipelining, a full batch, neither a
-- semaphore nor a sender to be had): then call() it from a timer.
function _M.post(conf, s, rkey, ...)
    local lane = laneFor(conf)
    if lane == nil then
        return nil
    end
    local b = joinable(lane)
    if b == nil then
        return nil
    end
    local job = add(b, s, rkey, ...)
    job.back = true
    b.posted = b.posted + 1
    return job
end
_M.laneFor = laneFor
_M.joinable = joinable
_M.awaited = awaited
return _M
