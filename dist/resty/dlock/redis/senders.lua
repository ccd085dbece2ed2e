-- Generated from src/resty/dlock/redis/senders.ts by TypeScriptToLua: edit that file, not this one.
-- The senders of auto-pipelining (pipeline.lua): per lane (a server
-- configuration) and worker, up to conf.senders timers, each the only user of
-- its connection, that send the lane's batches as pipelines, back to back, and
-- wake their callers.
--
-- A sender counts in lane.senders once its timer runs, not when it is
-- started: nginx drops a timer whose time comes while lua_max_running_timers
-- are all running, though ngx.timer.at had said ok (late.lua). Counted at the
-- start, a dropped sender stayed
-- counted for good, and the batch it was to send stayed open: every later call
-- of the worker joined it and waited in vain. A batch whose sender nginx
-- dropped was never sent, and never will be: the next call fails it and opens
-- another (sending it late would run calls whose callers gave up on them).
local _M = {}
local command = require("resty.dlock.redis.command")
local connection = require("resty.dlock.redis.connection")
local lanes = require("resty.dlock.redis.lanes")
local roundtrip = require("resty.dlock.redis.roundtrip")
local takeback = require("resty.dlock.redis.takeback")
local clock = require("resty.dlock.core.clock")
local late = require("resty.dlock.core.late")
local clock_now = clock.now
local on_its_way = late.onItsWay
local ngx_log = ngx.log
local ERR = ngx.ERR
local WARN = ngx.WARN
local timer_at = ngx.timer.at
local worker_exiting = ngx.worker.exiting
local lua_pcall = pcall
local lua_tostring = tostring
local fail = command.fail
local runOn = roundtrip.runOn
local done = connection.done
local settle = takeback.settle
local recycle = lanes.recycle
-- Batches of a worker on their way to one Redis at once (conf.senders), each from a timer
-- on a connection of its own. A lone server gets two: with one, the worker sat idle while
-- a batch was out (a third of the time at 50 connections). Each master of a Cluster or
-- Redlock set gets one (together they keep batches in flight), which lets the callers it
-- woke run before it sends again (wake; TURN s at most): their releases ride the next batch.
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
    -- post(0) raises: a batch of posted calls only wakes nobody.
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
    -- Started in the place of one taken for dropped (late.lua) that ran after all, with every sender running.
    if lane.senders >= lane.conf.senders then
        return
    end
    lane.senders = lane.senders + 1
    while not premature do
        flush(lane)
        if worker_exiting() then
            break
        end
        lane.idle = lane.idle + 1
        -- Idle in slices: nothing wakes a semaphore when the worker starts to
        -- exit, and a graceful quit or reload waits for every running timer (one
        -- waiting IDLE seconds kept old workers alive that long).
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
--- Start a sender's timer for lane's open batch: false when none can be had (lua_max_pending_timers).
function _M.summon(lane)
    local now = clock_now()
    if (timer_at(0, sender, lane)) == nil then
        return false
    end
    lane.summoned = now
    return true
end
--- With no sender running: did nginx drop the timer started for lane's open batch?
function _M.overdue(lane)
    return not on_its_way(lane.summoned, clock_now(), 0)
end
--- Fail lane's open batch, which no sender will send (overdue): never sent, so
-- its callers still waiting hear "failed", not "lost". Nothing here waits: a
-- call from post() runs in a log phase.
function _M.abandon(lane)
    local b = lane.open
    lane.open = nil
    ngx_log(
        WARN,
        "dlock: ",
        #b.jobs,
        " call(s) to redis ",
        lane.conf.endpoint,
        " never sent: nginx dropped the timer started to send them (lua_max_running_timers)"
    )
    fail(b, "dlock: redis " .. lane.conf.endpoint .. ": the pipeline's sender never ran (lua_max_running_timers)", "failed")
    -- Callers whose wait timed out left the queue: what they leave over keeps this semaphore from reuse.
    local waiting = #b.jobs - b.posted
    if waiting > 0 then
        b.sem:post(waiting)
    end
    if b.posted > 0 then
        answered(b)
    end
end
return _M
