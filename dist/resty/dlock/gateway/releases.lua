-- Generated from src/resty/dlock/gateway/releases.ts by TypeScriptToLua: edit that file, not this one.
-- How the gateway ends a request's lease. It ends in the log phase, where
-- there are no cosockets: a release is written into the worker's next
-- auto-pipelined batch (done(), lease.post), whose sender settles it from the
-- reply (answered()). What cannot go that way (Redlock, auto_pipeline off, a
-- Cluster map being read), what Redis did not confirm, and dedup's hold after
-- a 2xx (an extend) go through the release queue below, sent from a timer.
--
-- Light threads of a drain timer send them, one lease at a time each, side by
-- side, so that auto-pipelining carries them in the round trips of the
-- worker's other calls (a batch call of its own, batch.releaseAll, took a
-- pooled connection and about 15 KB of garbage each time, four times what the
-- rest of a request makes). A thread that finds the queue empty waits a while
-- for more (a log phase wakes it through a semaphore) before it ends: under
-- load the same few threads send every release, where a timer or a thread per
-- release cost more than the release itself. A release Redis does not confirm
-- goes through releaseAll once more, and is then left to the sweep that
-- retries it until Redis answers or the key expires.
local _M = {}
local check = require("resty.dlock.core.check")
local batch = require("resty.dlock.core.batch")
local lease = require("resty.dlock.core.lease")
local quiet = require("resty.dlock.core.quiet")
local clock = require("resty.dlock.core.clock")
local late = require("resty.dlock.core.late")
local roundtrip = require("resty.dlock.redis.roundtrip")
local stats = require("resty.dlock.gateway.stats")
local onway = require("resty.dlock.gateway.onway")
local ngx_log = ngx.log
local ERR = ngx.ERR
local WARN = ngx.WARN
local timer_at = ngx.timer.at
local thread_spawn = ngx.thread.spawn
local worker_exiting = ngx.worker.exiting
local math_min = math.min
local thread_wait = ngx.thread.wait
local lua_pcall = pcall
local lua_tostring = tostring
local migrating = roundtrip.migrating
local quiet_due_for = quiet.dueFor
local quiet_due = quiet.due
local clock_now = clock.now
local on_its_way = late.onItsWay
local quiet_more = quiet.more
local semaphore = require("ngx.semaphore")
-- The queue, in three parallel arrays (no table per queued lease).
local qOwner = {}
local qLease = {}
--- ms to keep the key instead of releasing it (0: release).
local qHold = {}
local head = 1
local tail = 0
--- Drain timers started (at most MAX_DRAINERS), and those of them not running yet (since pendingAt).
local draining = 0
local pending = 0
local pendingAt = 0
local MAX_DRAINERS = 8
--- Release threads alive, at most PARALLEL (releases on their way at once); those waiting for work; posts they have not taken.
local alive = 0
local idle = 0
local woken = 0
local PARALLEL = 128
--- Seconds a thread waits for work before it ends.
local IDLE = 0.5
--- Leases one thread sees to before it ends (its timer then hands over to a fresh one).
local SHARE = 4096
--- Made in the worker, at its first release.
local sema
--- The line about a release queue no timer could be had for: one per interval, not one per request.
local unscheduled = quiet.make()
--- Per guard, its line about releases and holds Redis did not confirm (one per interval, not one per lease).
local unconfirmed = {}
local function failed(owner, what, err)
    stats.incr(owner._dict, owner.name, "redis_errors")
    local n = quiet_due_for(unconfirmed, owner.name)
    if n == 0 then
        return
    end
    ngx_log(
        WARN,
        "dlock: guard ",
        owner.name,
        ": ",
        what,
        " failed (retried until Redis answers or the lease expires): ",
        check.reason(err),
        quiet_more(n)
    )
end
local function raised(err)
    ngx_log(ERR, "dlock: gateway release queue: ", check.text(err))
end
--- Redis found l's key gone, or someone else's, at its release (or hold): the
-- key was lost under its request (flushed, evicted, run out), which went on
-- without exclusion. Said as a renewal that finds it says it
-- (renewals.lua), unless an earlier try of this release may have landed.
local function lostUnder(owner, l, what)
    if l._releaseSent == true then
        return
    end
    stats.incr(owner._dict, owner.name, "lost")
    ngx_log(
        ERR,
        "dlock: guard ",
        owner.name,
        ": lease on ",
        l.key,
        " lost while its request was in flight: its ",
        what,
        " found the key gone from Redis, or someone else's"
    )
end
--- Release l, or keep it ms more.
local function finish(owner, l, ms)
    if ms > 0 then
        local ok, err = l:extend(ms)
        if ok == nil then
            if err == "not_owner" then
                lostUnder(owner, l, "hold")
            else
                failed(owner, "holding " .. l.key, err)
            end
        end
        return
    end
    local ok, err = l:release()
    if err == "not_owner" then
        lostUnder(owner, l, "release")
    end
    if ok == nil and err ~= "not_owner" then
        -- Unconfirmed: releaseAll tries again and hands what Redis still does not confirm to the sweep.
        local n, berr = batch.releaseAll({l})
        if n > 0 then
            failed(owner, "releasing " .. lua_tostring(n) .. " lease(s)", berr)
        end
    end
    onway.settled(owner._dict, l._rkey)
end
--- A light thread's body: never raises (an aborted thread would log its own error line).
local function finishSafely(owner, l, ms)
    local ok, err = lua_pcall(finish, owner, l, ms)
    if not ok then
        raised(err)
    end
end
--- A release thread: sees to queued leases one at a time until the queue stays empty for IDLE s, or its share is done.
local function work()
    local done = 0
    while done < SHARE do
        if head > tail then
            -- An exiting worker keeps no thread waiting for work that will not come.
            if worker_exiting() then
                break
            end
            idle = idle + 1
            local ok = sema:wait(IDLE)
            idle = idle - 1
            if ok then
                woken = woken - 1
            elseif head > tail then
                -- A post that came as the wait ran out stays counted: the next wait takes it at once.
                break
            end
        else
            local owner = qOwner[head]
            local l = qLease[head]
            local ms = qHold[head]
            qOwner[head] = nil
            qLease[head] = nil
            qHold[head] = nil
            head = head + 1
            finishSafely(owner, l, ms)
            done = done + 1
        end
    end
    alive = alive - 1
end
-- drain() ends by calling schedule(), which starts drain() timers: declared here, set after drain().
local schedule
local function drain(premature)
    -- Runs also when premature (the worker is exiting): cosockets still work here.
    -- One taken as dropped that starts after all is counted again.
    if pending > 0 then
        pending = pending - 1
    else
        draining = draining + 1
    end
    local threads = {}
    local want = math_min(tail - head + 1, PARALLEL - alive)
    for _ = 1, want do
        alive = alive + 1
        -- nil when the thread cannot be made (no memory): then this timer works itself.
        local co = thread_spawn(work)
        if co == nil then
            work()
            break
        end
        threads[#threads + 1] = co
    end
    for i = 1, #threads do
        thread_wait(threads[i])
    end
    draining = draining - 1
    -- Threads that ended at their share left work behind: a fresh timer takes over.
    schedule()
end
schedule = function()
    local backlog = tail - head + 1
    if backlog <= 0 then
        return
    end
    if sema == nil then
        local sm, err = semaphore.new(0)
        if sm == nil then
            ngx_log(ERR, "dlock: gateway: cannot make the release semaphore, releases expire on their own: ", err)
            return
        end
        sema = sm
    end
    local free = idle - woken
    if free > 0 then
        local n = math_min(free, backlog)
        woken = woken + n
        sema:post(n)
        if backlog <= n then
            return
        end
    end
    -- Drain timers nginx dropped (late.lua): the queue would wait for them for good.
    if pending > 0 and not on_its_way(pendingAt, clock_now(), 0) then
        draining = draining - pending
        pending = 0
    end
    -- A timer about to start makes threads for all that is queued then.
    if pending > 0 or alive >= PARALLEL or draining >= MAX_DRAINERS then
        return
    end
    -- A delay of 0 is the one nginx still allows in a worker that is exiting.
    local ok, err = timer_at(0, drain)
    if ok then
        draining = draining + 1
        pending = pending + 1
        pendingAt = clock_now()
    elseif draining == 0 then
        local n = quiet_due(unscheduled)
        if n > 0 then
            ngx_log(
                ERR,
                "dlock: gateway: cannot schedule ",
                backlog,
                " release(s) (they wait in the queue for the next ",
                "request's release, or run out by their ttl): ",
                err,
                quiet_more(n)
            )
        end
    end
end
--- Queue the end of a lease for a timer: release it, or keep it `hold` more ms.
local function enqueue(owner, l, holdMs)
    tail = tail + 1
    qOwner[tail] = owner
    qLease[tail] = l
    qHold[tail] = holdMs
    schedule()
end
--- End a request's lease: release it, or keep it holdMs more. A release rides
-- the worker's next pipeline with nobody waiting for it (lease.post): no
-- timer, no thread, no wait for the reply; one that cannot (or that Redis did
-- not confirm) and a hold go through the queue.
local function done(h, holdMs)
    if holdMs == 0 then
        onway.sent(h.owner._dict, h.lease._rkey)
        local j = lease.post(h.lease)
        if j ~= nil then
            j.post = h
            return
        end
    end
    enqueue(h.owner, h.lease, holdMs)
end
--- A posted release was answered: every Held's `answered` (in a sender's timer: nothing here may wait).
local function answered(j)
    local h = j.post
    local ok, err = lease.posted(h.lease, j)
    if ok ~= nil or err == "not_owner" then
        if ok == nil then
            lostUnder(h.owner, h.lease, "release")
        end
        onway.settled(h.owner._dict, h.lease._rkey)
        return
    end
    -- A failure counts now, and is logged should the queue's tries fail too
    -- (failed()); a Cluster slot that moved, or that is moving (TRYAGAIN: the
    -- queue's release runs on the lock key alone), is only followed, from the queue.
    local o = h.owner
    local moving = j.fault == "redirect" or migrating(j.fault, j.err)
    if not moving then
        stats.incr(o._dict, o.name, "redis_errors")
    end
    enqueue(o, h.lease, 0)
end
-- Exported by name: this module's own uses of them are locals, not lookups in its exports table.
_M.done = done
_M.answered = answered
_M.enqueue = enqueue
return _M
