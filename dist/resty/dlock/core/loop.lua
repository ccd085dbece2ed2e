-- Generated from src/resty/dlock/core/loop.ts by TypeScriptToLua: edit that file, not this one.
-- A loop per worker that works in rounds (the watchdog's renewals, the
-- gateway keeper's watch): one timer that sleeps between rounds, so rounds
-- never overlap (ngx.timer.every would let them when Redis is slow), that
-- goes on in a worker that is exiting after nginx -s reload or quit
-- (ngx.timer.every stops then; ngx.sleep inside a running timer does not),
-- that stops when there is nothing left to do, and hands over to a fresh
-- timer now and then, as lua-nginx-module advises for long-lived timers. It
-- sleeps on a semaphore, so that work due sooner than its sleep ends (a lease
-- with a shorter ttl to renew) can wake it (hurry).
--
-- The loop counts as running only once its timer runs, not when it is started:
-- nginx may drop a started timer (late.lua), and start() starts another then.
local _M = {}
local check = require("resty.dlock.core.check")
local clock = require("resty.dlock.core.clock")
local late = require("resty.dlock.core.late")
local semaphore = require("ngx.semaphore")
local sem_new = semaphore.new
local clock_now = clock.now
local clock_sleep = clock.sleep
local clock_timeout = clock.timeout
local on_its_way = late.onItsWay
local ngx_log = ngx.log
local ERR = ngx.ERR
local timer_at = ngx.timer.at
local lua_pcall = pcall
local lua_tostring = tostring
--- Seconds one timer runs before it hands over to a fresh one.
local HANDOVER = 60
--- Seconds between looks at whether the fresh timer of a handover runs.
local LOOK = 0.01
local function nap(l, seconds)
    local wake = l._wake
    if wake == nil then
        wake = sem_new(0)
        l._wake = wake
    end
    if wake == nil then
        clock_sleep(seconds)
        return
    end
    l._asleep = true
    local woken, err = wake:wait(clock_timeout(seconds))
    l._asleep = false
    -- A wait that could not yield must not turn the loop into a spin.
    if not woken and err ~= "timeout" then
        clock_sleep(seconds)
    end
end
--- l's fresh timer of a handover runs, or nginx dropped it (late.lua):
-- until then the loop is not running, and start() starts no other.
local function handedOver(l, at)
    l._scheduled = at
    while not l.running and on_its_way(at, clock_now(), 0) do
        clock_sleep(LOOK)
    end
    -- Whether it ran or not, it is not on its way any more: a late one finds this one running and ends.
    l._scheduled = nil
    return l.running
end
local function run(premature, l)
    -- Started late, after start() took this timer for dropped: the one it started instead runs the loop.
    if l.running then
        return
    end
    l.running = true
    l._scheduled = nil
    -- Premature: the worker is exiting; what is still held still needs the rounds.
    local started = clock_now()
    while l.busy() do
        nap(l, l.tick())
        local ok, err = lua_pcall(l.round)
        if not ok then
            ngx_log(ERR, "dlock: ", l.name, ": ", check.text(err))
        end
        local now = clock_now()
        if now - started >= HANDOVER and l.busy() then
            -- The fresh timer runs the loop once it finds it not running.
            l.running = false
            local handed = timer_at(0, run, l)
            if handed and handedOver(l, now) then
                return
            end
            -- Not handed over: this one goes on (nothing yields between the look and this).
            l.running = true
            started = now
        end
    end
    -- Nothing left: stop, so an exiting worker can exit. start() makes a new one.
    l.running = false
end
--- Cut the loop's sleep short: its next round is due now (work came in that cannot wait a whole tick).
function _M.hurry(l)
    if l._asleep == true then
        l._asleep = false
        l._wake:post(1)
    end
end
--- Run the loop unless it runs already; nil, or why its timer could not start.
function _M.start(l)
    if l.running then
        return nil
    end
    local now = clock_now()
    local at = l._scheduled
    -- A late one that runs after all finds another running and ends.
    if on_its_way(at, now, 0) then
        return nil
    end
    local ok, err = timer_at(0, run, l)
    if not ok then
        return "dlock: cannot start the " .. l.name .. ": " .. lua_tostring(err)
    end
    l._scheduled = now
    return nil
end
return _M
