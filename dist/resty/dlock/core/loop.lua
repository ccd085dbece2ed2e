-- Generated from src/resty/dlock/core/loop.ts by TypeScriptToLua: edit that file, not this one.
local _M = {}
local check = require("resty.dlock.core.check")
local clock = require("resty.dlock.core.clock")
local semaphore = require("ngx.semaphore")
local sem_new = semaphore.new
local clock_now = clock.now
local clock_sleep = clock.sleep
local clock_timeout = clock.timeout
local ngx_log = ngx.log
local ERR = ngx.ERR
local timer_at = ngx.timer.at
local lua_pcall = pcall
local lua_tostring = tostring
--- Seconds one timer runs before it hands over to a fresh one.
local HANDOVER = 60
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
    if not woken and err ~= "timeout" then
        clock_sleep(seconds)
    end
end
local function run(premature, l)
    local started = clock_now()
    while l.busy() do
        nap(
            l,
            l.tick()
        )
        local ok, err = lua_pcall(l.round)
        if not ok then
            ngx_log(
                ERR,
                "dlock: ",
                l.name,
                ": ",
                check.text(err)
            )
        end
        if clock_now() - started >= HANDOVER and l.busy() then
            local handed = timer_at(0, run, l)
            if handed then
                return
            end
        end
    end
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
    local ok, err = timer_at(0, run, l)
    if not ok then
        return "dlock: cannot start the " .. l.name .. ": " .. lua_tostring(err)
    end
    l.running = true
    return nil
end
return _M
