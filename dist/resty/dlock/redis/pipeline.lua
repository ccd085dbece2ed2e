--[[ Generated with https://github.com/TypeScriptToLua/TypeScriptToLua ]]
local ____exports = {}
local redis = require("resty.dlock.redis.client")
local resp = require("resty.dlock.redis.resp")
local scripts = require("resty.dlock.redis.scripts")
local single = require("resty.dlock.redis.single")
local semaphore = require("ngx.semaphore")
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
        local work = semaphore.new(0)
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
local heads = setmetatable({}, {__mode = "k"})
local bodies = setmetatable({}, {__mode = "k"})
local function headOf(cache, s, words, body)
    local byWords = cache[s]
    if byWords == nil then
        byWords = {}
        cache[s] = byWords
    end
    local h = byWords[words]
    if h == nil then
        local parts = {}
        resp.command(parts, 3 + words)
        resp.arg(parts, body and "EVAL" or "EVALSHA")
        resp.arg(parts, body and s.src or s.sha)
        resp.arg(parts, s.keys)
        h = table.concat(parts)
        byWords[words] = h
    end
    return h
end
local WORD = "$%d\r\n%s\r\n"
local FORMATS = {}
for n = 1, 7 do
    FORMATS[n] = "%s" .. string.rep(WORD, n)
end
--- The words of a command (up to seven: the key and six arguments), with its head. Not a tail call (see lease.make).
local function encode(head, n, w1, w2, w3, w4, w5, w6, w7)
    local cmd = string.format(
        FORMATS[n],
        head,
        #w1,
        w1,
        #w2,
        w2,
        #w3,
        w3,
        #w4,
        w4,
        #w5,
        w5,
        #w6,
        w6,
        #w7,
        w7
    )
    return cmd
end
--- Add a call to b: its command goes into the buffer at once (no table of its arguments).
local function add(b, s, rkey, ...)
    local n = select("#", ...)
    local words = 1 + n
    local head = headOf(heads, s, words, false)
    local cmd
    if n <= 6 then
        local a1, a2, a3, a4, a5, a6 = select(1, ...)
        cmd = encode(
            head,
            words,
            rkey,
            n >= 1 and tostring(a1) or "",
            n >= 2 and tostring(a2) or "",
            n >= 3 and tostring(a3) or "",
            n >= 4 and tostring(a4) or "",
            n >= 5 and tostring(a5) or "",
            n >= 6 and tostring(a6) or ""
        )
    else
        local parts = {}
        parts[1] = head
        resp.arg(parts, rkey)
        for i = 1, n do
            local a = select(i, ...)
            resp.arg(parts, a)
        end
        cmd = table.concat(parts)
    end
    local job = {
        s = s,
        cmd = cmd,
        words = words,
        back = false,
        res = nil,
        err = nil,
        fault = nil
    }
    local ____b_jobs_0 = b.jobs
    ____b_jobs_0[#____b_jobs_0 + 1] = job
    local ____b_parts_1 = b.parts
    ____b_parts_1[#____b_parts_1 + 1] = cmd
    if s.undo ~= nil then
        b.undos = b.undos + 1
    end
    return job
end
local function fail(jobs, err, fault)
    for ____, j in ipairs(jobs) do
        if j.fault == nil and j.res == nil then
            j.err = err
            j.fault = fault
        end
    end
end
--- The commands of some of b's jobs (by index), EVAL with the script's body when `body`.
local function commands(b, which, body)
    local out = {}
    for ____, i in ipairs(which) do
        local j = b.jobs[i]
        if body then
            local sha = headOf(heads, j.s, j.words, false)
            out[#out + 1] = headOf(bodies, j.s, j.words, true) .. string.sub(j.cmd, #sha + 1)
        else
            out[#out + 1] = j.cmd
        end
    end
    return table.concat(out)
end
--- Send the commands (EVAL when `body`), and read the replies of the jobs `which` (indexes into b.jobs) in turn.
local function roundTrip(conf, sock, b, which, payload, body)
    local sent, serr = sock:send(payload)
    if sent == nil then
        for ____, i in ipairs(which) do
            local j = b.jobs[i]
            j.err = (((("dlock: redis " .. conf.endpoint) .. ": ") .. tostring(serr)) .. " during ") .. j.s.name
            j.fault = "lost"
        end
        return {}
    end
    local r = resp.reader(sock)
    local again = {}
    for k = 1, #which do
        local j = b.jobs[which[k]]
        local v, rerr = resp.read(r)
        if v == nil then
            for m = k, #which do
                local lost = b.jobs[which[m]]
                lost.err = (((("dlock: redis " .. conf.endpoint) .. ": ") .. tostring(rerr)) .. " during ") .. lost.s.name
                lost.fault = "lost"
            end
            return {}
        end
        if v == false then
            if not body and string.sub(
                tostring(rerr),
                1,
                8
            ) == "NOSCRIPT" then
                again[#again + 1] = which[k]
            else
                local e, f = single.refused(conf, rerr)
                j.err = e
                j.fault = f
            end
        else
            j.res = v
        end
    end
    if not resp.drained(r) then
        for ____, i in ipairs(which) do
            local j = b.jobs[i]
            j.res = nil
            j.err = (("dlock: redis " .. conf.endpoint) .. ": more data than replies during ") .. j.s.name
            j.fault = "lost"
        end
        return {}
    end
    return again
end
--- Send b's calls as one pipeline on a pooled connection (EVAL for those Redis has no script for), then one WAIT.
local function run(conf, b)
    local which = {}
    for i = 1, #b.jobs do
        which[#which + 1] = i
    end
    local red, cerr = redis.connect(conf)
    if red == nil then
        fail(
            b.jobs,
            cerr,
            single.unreachable(conf)
        )
        return
    end
    local sock = rawget(red, "_sock")
    local again = roundTrip(
        conf,
        sock,
        b,
        which,
        table.concat(b.parts),
        false
    )
    if #again > 0 then
        roundTrip(
            conf,
            sock,
            b,
            again,
            commands(b, again, true),
            true
        )
    end
    local broken = false
    local wrote = {}
    for ____, j in ipairs(b.jobs) do
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
--- A call sent at once by its caller (or a timer), on a pooled connection of its own: a batch of one.
local function alone(conf, s, rkey, ...)
    local b = {parts = {}, jobs = {}, sem = nil, undos = 0}
    local job = add(b, s, rkey, ...)
    run(conf, b)
    return job.res, job.err, job.fault
end
--- Word n of job j's command after its key count (1: KEYS[1]).
local function wordOf(j, n)
    return resp.word(
        j.cmd,
        #headOf(heads, j.s, j.words, false) + 1,
        n
    )
end
--- Take back what an acquire may have taken: its request ended before the reply came, so nobody ever will.
local function takeBackOne(conf, j)
    local rkey = wordOf(j, 1)
    local res, err = scripts.forTarget(
        alone,
        conf,
        j.s.undo,
        rkey,
        wordOf(j, j.s.keys + 1)
    )
    if res == nil then
        ngx.log(
            ngx.WARN,
            "dlock: ",
            rkey,
            " may be held by a request that ended before the ",
            j.s.name,
            " reply came, and cannot be taken back (",
            err,
            "): it expires on its own"
        )
    elseif res ~= 0 then
        ngx.log(
            ngx.NOTICE,
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
    for ____, j in ipairs(b.jobs) do
        if j.s.undo ~= nil and j.res ~= nil and not j.back then
            local ok, err = pcall(takeBackOne, conf, j)
            if not ok then
                ngx.log(ngx.ERR, "dlock: take-back failed: ", err)
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
        local ok, err = ngx.timer.at(0, settle, conf, b)
        if ok == nil then
            ngx.log(ngx.ERR, "dlock: cannot take back the acquires of gone callers: ", err)
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
        local ok, err = pcall(run, lane.conf, b)
        if not ok then
            fail(
                b.jobs,
                (("dlock: pipeline to redis " .. lane.conf.endpoint) .. " failed: ") .. tostring(err),
                "lost"
            )
        end
        lane.batching = lane.batching - 1
        if #b.jobs > 1 then
            lane.loaded = ngx.now() + LOADED
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
        if ngx.worker.exiting() then
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
        fail(lane.open.jobs, ("dlock: nginx worker exiting before the call to redis " .. lane.conf.endpoint) .. " was sent", "failed")
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
    local now = ngx.now()
    local n = lane.batching
    for slot, ____until in pairs(lane.direct) do
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
        local sem = semaphore.new(0)
        if sem == nil then
            return nil
        end
        b = {parts = {}, jobs = {}, sem = sem, undos = 0}
        lane.open = b
    end
    if #b.jobs == 0 then
        if lane.idle > 0 then
            lane.work:post(1)
        elseif lane.senders < SENDERS then
            local started = ngx.timer.at(0, sender, lane)
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
        return nil, (((("dlock: redis " .. conf.endpoint) .. ": no answer from the pipeline in ") .. tostring(wait)) .. " s during ") .. s.name, "lost"
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
    local now = ngx.now()
    local gone = {}
    for slot, b in pairs(lane.acquires) do
        local ____until = lane.direct[slot]
        if ____until == nil or ____until < now then
            lane.acquires[slot] = nil
            lane.direct[slot] = nil
            gone[#gone + 1] = b
        end
    end
    for ____, b in ipairs(gone) do
        local ok, err = pcall(takeBackOne, lane.conf, b.jobs[1])
        if not ok then
            ngx.log(ngx.ERR, "dlock: take-back failed: ", err)
        end
    end
    if premature or (next(lane.acquires)) == nil or (ngx.timer.at(WATCH, watcher, lane)) == nil then
        lane.watching = false
    end
end
--- A call sent at once on a pooled connection of its own, counted in lane.direct while on its way.
local function direct(lane, s, rkey, ...)
    local conf = lane.conf
    lane.slots = lane.slots + 1
    local slot = lane.slots
    lane.direct[slot] = ngx.now() + patience(conf)
    local b = {parts = {}, jobs = {}, sem = nil, undos = 0}
    local job = add(b, s, rkey, ...)
    if s.undo ~= nil then
        lane.acquires[slot] = b
        if not lane.watching then
            lane.watching = (ngx.timer.at(WATCH, watcher, lane)) ~= nil
        end
    end
    run(conf, b)
    lane.direct[slot] = nil
    lane.acquires[slot] = nil
    return job.res, job.err, job.fault
end
--- Run s for rkey: at once while few calls of this worker are on their way to this Redis and none ride a batch, else in the next pipeline.
function ____exports.call(conf, s, rkey, ...)
    local ____conf_auto_pipeline_2
    if conf.auto_pipeline then
        ____conf_auto_pipeline_2 = laneOf(conf)
    else
        ____conf_auto_pipeline_2 = nil
    end
    local lane = ____conf_auto_pipeline_2
    if lane == nil then
        return single.call(conf, s, rkey, ...)
    end
    if lane.batching == 0 and lane.open == nil and ngx.now() >= lane.loaded and inFlight(lane) < ____exports.DIRECT then
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
