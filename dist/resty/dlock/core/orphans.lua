-- Generated from src/resty/dlock/core/orphans.ts by TypeScriptToLua: edit that file, not this one.
-- Keys that may still be ours in Redis although nobody will release them:
-- acquires whose reply was lost (the SET may have landed) and releases that
-- Redis never confirmed (the gateway's queued releases, with()). Left alone,
-- each blocks its key for a whole ttl. One sweep per worker deletes them,
-- owner-checked, retrying until Redis answers: Redis may be paused or
-- unreachable right now (that is often why the call failed). One timer and one
-- pipeline per endpoint for all of them, not one each: an outage can orphan
-- thousands.
local _M = {}
local backend = require("resty.dlock.redis.backend")
local clock = require("resty.dlock.core.clock")
local quiet = require("resty.dlock.core.quiet")
local late = require("resty.dlock.core.late")
local ngx_update_time = ngx.update_time
local worker_exiting = ngx.worker.exiting
local clock_sleep = clock.sleep
local clock_now = clock.now
local on_its_way = late.onItsWay
local timer_at = ngx.timer.at
local ngx_log = ngx.log
local ERR = ngx.ERR
local WARN = ngx.WARN
local NOTICE = ngx.NOTICE
local math_min = math.min
local lua_pcall = pcall
local lua_pairs = pairs
local lua_ipairs = ipairs
local quiet_due = quiet.due
local quiet_more = quiet.more
local quiet_tally = quiet.tally
local quiet_add = quiet.add
local quiet_named = quiet.named
--- Seconds a lost acquire is retried. A SET queued in a paused Redis only runs
-- (and its ttl only starts) when Redis resumes, whenever that is.
_M.LOST_HORIZON = 600
local FIRST_SWEEP_DELAY = 0.05
local MAX_SWEEP_DELAY = 0.5
--- The line about cleanups given up: one per interval, not one per key (an outage can orphan thousands).
local givenUp = quiet.make()
local orphans = {}
local sweeping = false
--- When the next sweep's timer is due (0 while a sweep runs). One nginx dropped
-- (late.lua) is replaced at the next adopt() (the sweeps' generation tells the
-- dropped one, should it run after all).
local sweepDue = 0
local sweeps = 0
--- "dlock: <done> N key(s) <why> (a, b, c and N more)": Redis answering again
-- after an outage settles hundreds in one sweep, said in one line, not one each.
local function say(t, done, why)
    if t.count == 0 then
        return
    end
    ngx_log(NOTICE, "dlock: ", done, " ", t.count, " key(s) ", why, " (", quiet_named(t), ")")
end
local function sweepOnce()
    -- Adoptions during this sweep (it yields) go to a fresh list.
    local batch = orphans
    orphans = {}
    ngx_update_time()
    local now = clock_now()
    -- One pipeline per endpoint and script.
    local groups = {}
    local removed = quiet_tally()
    local released = quiet_tally()
    for _, o in lua_ipairs(batch) do
        if now > o.deadline then
            local n = quiet_due(givenUp)
            if n > 0 then
                ngx_log(
                    WARN,
                    "dlock: giving up cleanup of ",
                    o.rkey,
                    " (",
                    o.lost,
                    " not confirmed), it expires on its own",
                    quiet_more(n)
                )
            end
            if o.settle ~= nil then
                o.settle(o, nil)
            end
        else
            local g = o.conf.pool .. " " .. o.release.sha
            local list = groups[g]
            if list == nil then
                list = {}
                groups[g] = list
            end
            list[#list + 1] = o
        end
    end
    for _, list in lua_pairs(groups) do
        local first = list[1]
        local out = backend.batch(first.conf, first.release, list)
        for i = 1, #list do
            local o = list[i]
            local reply = out.replies[i]
            if reply == nil then
                orphans[#orphans + 1] = o
            else
                -- 1, or (keys with waiters in line) the token of the waiter it went on to: deleted.
                local deleted = reply ~= 0
                if deleted and o.lost == "acquire" then
                    quiet_add(removed, o.rkey)
                elseif deleted and o.lost == "release" then
                    quiet_add(released, o.rkey)
                end
                if o.settle ~= nil then
                    o.settle(o, reply)
                end
            end
        end
    end
    say(removed, "removed", "acquired by requests whose replies were lost")
    say(released, "released", "once Redis answered again")
end
local function sweepSafely()
    local ok, err = lua_pcall(sweepOnce)
    if not ok then
        ngx_log(ERR, "dlock: cleanup sweep failed: ", err)
    end
end
--- The worker is exiting: no timer with a delay can be made any more. Sweep on
-- in this one, sleeping between sweeps, until nothing is left (each orphan
-- settled or past its deadline) or EXIT_HORIZON (core/clock.lua) has passed.
local function sweepWhileExiting(delay)
    local stop = clock_now() + clock.EXIT_HORIZON
    while #orphans > 0 and clock_now() < stop do
        clock_sleep(delay)
        delay = math_min(delay * 2, MAX_SWEEP_DELAY)
        sweepSafely()
    end
    if #orphans > 0 then
        ngx_log(
            WARN,
            "dlock: worker exiting: giving up cleanup of ",
            #orphans,
            " key(s) Redis did not answer for; ",
            "they expire on their own"
        )
        orphans = {}
    end
end
-- sweep() schedules itself again: declared here, set after it.
local schedule
local function sweep(premature, delay, gen)
    -- Taken for dropped, and another started: that one sweeps.
    if gen ~= sweeps then
        return
    end
    sweepDue = 0
    -- Whatever a sweep runs into, the next one must still be scheduled:
    -- a stuck `sweeping` flag would stop all cleanup in this worker for good.
    sweepSafely()
    if #orphans > 0 and (premature or worker_exiting()) then
        sweepWhileExiting(delay)
    end
    if #orphans == 0 then
        sweeping = false
        return
    end
    local later = math_min(delay * 2, MAX_SWEEP_DELAY)
    sweeping = schedule(later, later)
end
schedule = function(wait, delay)
    sweeps = sweeps + 1
    local ok = timer_at(wait, sweep, delay, sweeps)
    sweepDue = clock_now() + wait
    return ok ~= nil
end
--- Keep trying to delete o's key (owner-checked) until Redis answers or o.deadline passes.
local function adopt(o)
    orphans[#orphans + 1] = o
    if not sweeping or sweepDue > 0 and not on_its_way(sweepDue, clock_now(), 0) then
        sweeping = schedule(0, FIRST_SWEEP_DELAY)
    end
end
--- An acquire whose reply was lost: its SET may have landed, or may still land.
function _M.adoptAcquire(conf, release, rkey, token)
    adopt({
        lost = "acquire",
        conf = conf,
        release = release,
        rkey = rkey,
        token = token,
        deadline = clock_now() + _M.LOST_HORIZON,
        settle = nil
    })
end
-- Exported by name: this module's own uses of them are locals, not lookups in its exports table.
_M.adopt = adopt
return _M
