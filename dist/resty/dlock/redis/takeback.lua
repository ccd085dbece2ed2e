-- Generated from src/resty/dlock/redis/takeback.ts by TypeScriptToLua: edit that file, not this one.
-- Taking back what an acquire may have taken when its caller never came back
-- for the reply (its request ended: a client abort, a killed thread): nobody
-- would ever release it. The release (or drop) is owner-checked, sent on a
-- connection of its own.
local _M = {}
local command = require("resty.dlock.redis.command")
local roundtrip = require("resty.dlock.redis.roundtrip")
local scripts = require("resty.dlock.redis.scripts")
local clock = require("resty.dlock.core.clock")
local quiet = require("resty.dlock.core.quiet")
local clock_now = clock.now
local ngx_log = ngx.log
local ERR = ngx.ERR
local WARN = ngx.WARN
local NOTICE = ngx.NOTICE
local timer_at = ngx.timer.at
local worker_exiting = ngx.worker.exiting
local clock_sleep = clock.sleep
local lua_pcall = pcall
local lua_next = next
local lua_pairs = pairs
local wordOf = command.wordOf
local one = roundtrip.one
local forTarget = scripts.forTarget
local quiet_tally = quiet.tally
local quiet_add = quiet.add
local quiet_named = quiet.named
local function pass()
    return {took = quiet_tally(), failed = quiet_tally(), why = nil}
end
--- A call on a connection of its own: the take-back is no batch's.
local function alone(conf, s, rkey, ...)
    return one(conf, false, s, rkey, ...)
end
--- Take back what an acquire may have taken: its request ended before the reply came, so nobody ever will.
local function takeBackOne(conf, j, p)
    local rkey = wordOf(j, 1)
    -- ARGV[1], the token, follows the keys.
    local res, err = forTarget(alone, conf, j.s.undo, rkey, wordOf(j, j.s.keys + 1))
    if res == nil then
        quiet_add(p.failed, rkey)
        p.why = p.why or err
    elseif res ~= 0 then
        quiet_add(p.took, rkey)
    end
end
local function report(p)
    if p.took.count > 0 then
        ngx_log(
            NOTICE,
            "dlock: took back ",
            p.took.count,
            " key(s) whose requests ended before the acquire's reply came (",
            quiet_named(p.took),
            ")"
        )
    end
    if p.failed.count > 0 then
        ngx_log(
            WARN,
            "dlock: ",
            p.failed.count,
            " key(s) may be held by requests that ended before the acquire's reply came, ",
            "and cannot be taken back (",
            quiet_named(p.failed),
            "): ",
            p.why,
            "; they expire on their own"
        )
    end
end
--- Take back the acquires of batch b whose callers did not come back for their
-- replies: a timer started once the callers were woken, so every caller still
-- there has been back. Only those whose replies were read: nothing of theirs
-- can land later. (A lost reply of a caller that is gone is left to its ttl.)
function _M.settle(premature, conf, b)
    local jobs = b.jobs
    local p = pass()
    for i = 1, #jobs do
        local j = jobs[i]
        if j.s.undo ~= nil and j.res ~= nil and not j.back then
            -- Whatever one runs into, the others are still taken back.
            local ok, err = lua_pcall(takeBackOne, conf, j, p)
            if not ok then
                ngx_log(ERR, "dlock: take-back failed: ", err)
            end
        end
    end
    report(p)
end
--- Seconds between looks for acquires sent at once whose callers never came back.
local WATCH = 1
--- lane.watching: a watcher runs now, or none is on its way.
local RUNNING = math.huge
local NONE = -math.huge
--- Take back the acquires of lane whose time is up.
local function look(lane)
    local now = clock_now()
    -- Taking back yields: collect first (no new keys in a table while pairs() walks it).
    local gone = {}
    for slot, b in lua_pairs(lane.acquires) do
        -- inFlight() forgets the slots whose time is up.
        local due = lane.direct[slot]
        if due == nil or due < now then
            lane.acquires[slot] = nil
            lane.direct[slot] = nil
            gone[#gone + 1] = b
        end
    end
    -- Most looks find nobody gone: no tallies for them.
    if #gone > 0 then
        local p = pass()
        for i = 1, #gone do
            local ok, err = lua_pcall(takeBackOne, lane.conf, gone[i].jobs[1], p)
            if not ok then
                ngx_log(ERR, "dlock: take-back failed: ", err)
            end
        end
        report(p)
    end
end
--- Acquires sent at once whose callers never came back for the answer: their
-- request ended in the middle (a client abort) or their thread was killed.
-- A slot still there when its time is up says so without a look at the
-- request: every step of a call is bounded by a timeout, and its time
-- (patience) is their sum and a second more. Waiting for it matters too: the
-- connection was closed with the command perhaps not yet run, and by then it
-- has run (or Redis has been stuck that long).
local function watcher(premature, lane, at)
    -- Started late, after another was started in its place (or runs now): that one watches.
    if lane.watching ~= at then
        return
    end
    lane.watching = RUNNING
    look(lane)
    if premature or worker_exiting() then
        -- No timer with a delay in an exiting worker (reload, quit): watch on in this
        -- one until the slots' time is up, or their keys would stay locked for their ttl.
        local stop = clock_now() + clock.EXIT_HORIZON
        while (lua_next(lane.acquires)) ~= nil and clock_now() < stop do
            clock_sleep(WATCH)
            look(lane)
        end
        lane.watching = NONE
        return
    end
    lane.watching = NONE
    if (lua_next(lane.acquires)) == nil then
        return
    end
    local now = clock_now()
    if (timer_at(WATCH, watcher, lane, now)) ~= nil then
        lane.watching = now
    end
end
-- Exported by name: the watcher re-arms itself through locals, not the exports table.
_M.WATCH = WATCH
_M.watcher = watcher
return _M
