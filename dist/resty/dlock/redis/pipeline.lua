-- Generated from src/resty/dlock/redis/pipeline.ts by TypeScriptToLua: edit that file, not this one.
-- Auto-pipelining: the script calls of concurrent requests of one worker to one
-- Redis share round trips, as ioredis' auto-pipelining does. A cosocket belongs
-- to the request (or timer) that made it, so requests cannot share one. Instead:
--   - while fewer than DIRECT calls of this worker are on their way to this
--     Redis, and none rides a batch, a call goes out at once on a pooled
--     connection of its own (a worker at low load adds no latency and no hop);
--   - past that, a call is encoded into the next batch's buffer and sleeps on
--     the batch's semaphore. Per endpoint, up to conf.senders timers (the senders,
--     senders.lua), each the only user of its connection, send the batches as
--     pipelines: a batch goes as soon as a sender is free, a sender reads its
--     batch's replies (in chunks, resp.lua) and wakes the callers.
-- Every call keeps its own outcome: a reply read is that call's answer; when
-- the connection breaks, the calls whose replies were not read are "outcome
-- unknown" ("lost") and the others are not; NOSCRIPT is answered by sending
-- the script's body for the calls that met it; with redis.replicas one WAIT
-- follows the writes of the batch. An acquire whose caller never came back
-- for its reply (its request ended: a client abort) is taken back (scripts'
-- `undo`): nobody would ever release it.
local _M = {}
local command = require("resty.dlock.redis.command")
local lanes = require("resty.dlock.redis.lanes")
local roundtrip = require("resty.dlock.redis.roundtrip")
local senders = require("resty.dlock.redis.senders")
local clock = require("resty.dlock.core.clock")
local clock_now = clock.now
local clock_timeout = clock.timeout
local lua_tostring = tostring
local add = command.add
local recycleJob = command.recycle
local batchOf = command.batchOf
local run = roundtrip.run
local alone = roundtrip.one
local laneOf = lanes.laneOf
local patience = lanes.patience
local claim = lanes.claim
local unclaim = lanes.unclaim
local idle = lanes.idle
local semaphoreOf = lanes.semaphoreOf
local summon = senders.summon
local overdue = senders.overdue
local abandon = senders.abandon
--- Calls of a worker that go out at once before the next ones join a batch (lanes.lua).
_M.DIRECT = lanes.DIRECT
--- Calls sent in batches, batches, and batches on their way now, by this worker to conf's Redis.
_M.stats = lanes.stats
--- Calls in one pipeline, at most: a larger batch waits for the next round trip.
local MAX_BATCH = 256
--- Calls a batch has room for before it grows: about as many as 50 requests' calls make per round trip.
local BATCH = 16
--- The batch calls join now (a new one when none is open), with a sender woken
-- or started for it; nil when neither a semaphore nor a sender can be had.
local function opened(lane)
    local b = lane.open
    -- Only while no sender runs: its timer may be what nginx dropped, or only
    -- late (a handler held the worker): another is started, and whichever runs
    -- first sends the batch (a late one finds every sender counted, or nothing
    -- open). Failed unsent only when no timer can be had at all.
    if b ~= nil and lane.senders == 0 and overdue(lane) and not summon(lane) then
        abandon(lane)
        b = nil
    end
    if b == nil then
        local sem = semaphoreOf(lane)
        if sem == nil then
            return nil
        end
        b = batchOf(sem, false, BATCH)
        lane.open = b
    end
    -- A new batch: wake a free sender, or start one; with every sender busy,
    -- the first to finish takes it.
    if #b.jobs == 0 then
        if lane.idle > 0 then
            lane.work:post(1)
        elseif lane.senders < lane.conf.senders and not summon(lane) and lane.senders == 0 then
            -- No timer to send it (lua_max_pending_timers).
            lane.open = nil
            return nil
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
        -- Woken before its batch was answered: by a resource a caller of the
        -- semaphore's last batch left (its wait timed out as that batch was
        -- answered). Its own comes with its batch's answer.
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
        return alone(conf, false, s, rkey, ...)
    end
    if idle(lane) then
        return direct(lane, s, rkey, ...)
    end
    local b = joinable(lane)
    -- A full batch goes as it is; this call goes on its own.
    if b == nil then
        return alone(conf, false, s, rkey, ...)
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
-- Exported by name: this module's own uses of them are locals, not lookups in its exports table.
_M.laneFor = laneFor
_M.joinable = joinable
_M.awaited = awaited
return _M
