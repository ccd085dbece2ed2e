-- Generated from src/resty/dlock/redis/subscriber.ts by TypeScriptToLua: edit that file, not this one.
-- The wake-up subscriber of one Redis endpoint in one worker: a timer that
-- owns one connection, in two light threads of that timer (a cosocket is
-- full-duplex in lua-nginx-module: one thread may read while another writes).
--
--   reader    blocks on the connection and hands each message to
--             subscriptions.lua. It never wakes up to poll: nginx logs every
--             cosocket read timeout at error level, so Redis answers a PING
--             the control thread sends every HEARTBEAT, and a read that
--             times out (SILENCE) means Redis is gone (one line per outage).
--   control   sends SUBSCRIBE/UNSUBSCRIBE as waiters come and go, wakes the
--             first waiter of a key whose due time passed, and stops the
--             session (idle for IDLE seconds, the worker exiting). It sleeps
--             on a semaphore until the next of those or until rung (a new
--             key, an earlier due time), and at most SWEEP: nothing tells a
--             worker that nginx reloads, nor that a waiter's request was
--             killed while it waited (wait.lua drops its ticket when it looks).
--             These looks cost no I/O.
--
-- The replies are read raw (resp.lua): lua-resty-redis closes a subscribed
-- connection on a read timeout and reads one reply per call.
local _M = {}
local check = require("resty.dlock.core.check")
local connection = require("resty.dlock.redis.connection")
local resp = require("resty.dlock.redis.resp")
local scripts = require("resty.dlock.redis.scripts")
local subs = require("resty.dlock.core.subscriptions")
local wakenode = require("resty.dlock.redis.wakenode")
local waits = require("resty.dlock.core.wait")
local clock = require("resty.dlock.core.clock")
local late = require("resty.dlock.core.late")
local lua_pairs = pairs
local NOTICE = ngx.NOTICE
local WARN = ngx.WARN
local lua_pcall = pcall
local lua_tostring = tostring
local lua_type = type
local math_min = math.min
local ngx_log = ngx.log
local clock_now = clock.now
local on_its_way = late.onItsWay
local clock_sleep = clock.sleep
local clock_timeout = clock.timeout
local str_sub = string.sub
local thread_spawn = ngx.thread.spawn
local thread_wait = ngx.thread.wait
local timer_at = ngx.timer.at
local update_time = ngx.update_time
local worker_exiting = ngx.worker.exiting
local CHANNEL = scripts.CHANNEL
--- Seconds between PINGs: Redis answers, so a read waits at most this long plus a round trip.
local HEARTBEAT = 5
--- Seconds without a byte from Redis (six PINGs unanswered, plus the
-- endpoint's read_timeout) after which the connection is given up: a
-- partition that leaves it half-open. Waiters meanwhile still wake at their
-- holder's expiry, and a worker busy elsewhere for a few seconds is no outage.
local SILENCE = 30
--- Seconds between looks at the worker exiting and at waiters killed while
-- they waited (a key handed to one is passed on when its hand-off is heard).
local SWEEP = 0.1
--- Seconds a subscriber with nothing to watch stays connected before it stops.
local IDLE = 10
--- Seconds before the first reconnection attempt after the connection failed,
-- and the most between attempts: nginx logs each refused connect at error
-- level, and a restarting Redis is back within about a second.
local RETRY = 1
local RETRY_MAX = 8
--- Bring the connection's subscriptions in line with what is wanted.
local function sync(s, sock)
    subs.prune(s)
    local add
    local drop
    for rkey in lua_pairs(s.wanted) do
        if s.sent[rkey] == nil then
            if add == nil then
                add = {"subscribe"}
            end
            add[#add + 1] = CHANNEL .. rkey
            s.sent[rkey] = true
        end
    end
    local gone
    for rkey in lua_pairs(s.sent) do
        if s.wanted[rkey] == nil then
            if drop == nil then
                drop = {"unsubscribe"}
            end
            drop[#drop + 1] = CHANNEL .. rkey
            if gone == nil then
                gone = {}
            end
            gone[#gone + 1] = rkey
        end
    end
    if gone ~= nil then
        for i = 1, #gone do
            local rkey = gone[i]
            s.sent[rkey] = nil
            s.live[rkey] = nil
        end
    end
    if add ~= nil then
        local ok, err = sock:send(resp.encode(add))
        if ok == nil then
            return lua_tostring(err)
        end
    end
    if drop ~= nil then
        local ok, err = sock:send(resp.encode(drop))
        if ok == nil then
            return lua_tostring(err)
        end
    end
    return nil
end
local function tell(s, sess)
    local pinged = clock_now()
    local idleSince = clock_now()
    while not sess.ended do
        s.rung = false
        update_time()
        local now = clock_now()
        if subs.idle(s) then
            if now - idleSince >= IDLE or worker_exiting() then
                break
            end
        elseif worker_exiting() then
            break
        else
            idleSince = now
        end
        local err = sync(s, sess.sock)
        if err ~= nil then
            return err
        end
        subs.overdue(s)
        if now - pinged >= HEARTBEAT then
            local ok, perr = sess.sock:send(resp.encode({"ping"}))
            if ok == nil then
                return lua_tostring(perr)
            end
            pinged = now
        end
        local due = math_min(pinged + HEARTBEAT, now + SWEEP)
        if subs.idle(s) then
            due = math_min(due, idleSince + IDLE)
        end
        s.wakeAt = subs.nextLook(s, due)
        if not s.rung then
            s.bell:wait(clock_timeout(s.wakeAt - now))
        end
    end
    if sess.ended then
        return nil
    end
    -- Stop the reader: it ends at the next reply, this PING's.
    sess.stopping = true
    local ok, err = sess.sock:send(resp.encode({"ping"}))
    return ok == nil and lua_tostring(err) or nil
end
--- The control thread: changes go out, due keys are looked at (sess.failed: why a write failed).
local function control(s, sess)
    sess.failed = tell(s, sess)
end
--- The reader: messages in; nil when asked to stop, else why the connection ended.
local function reader(s, sess)
    local r = resp.reader(sess.sock)
    while true do
        local msg, rerr = resp.read(r)
        if sess.stopping then
            return nil
        end
        if msg == nil then
            return "dlock: redis " .. s.conf.endpoint .. ": wake-up subscription: " .. lua_tostring(rerr)
        end
        if msg == false then
            if str_sub(lua_tostring(rerr), 1, 6) == "NOPERM" then
                -- An ACL user without channel permissions: no wake-ups on this endpoint, ever; its waiters poll.
                s.refused = true
                ngx_log(
                    WARN,
                    "dlock: redis ",
                    s.conf.endpoint,
                    ": the user may not subscribe to ",
                    CHANNEL,
                    "*: waiters poll instead of being woken (grant it with ACL SETUSER <user> &",
                    CHANNEL,
                    "*): ",
                    rerr
                )
                return nil
            end
            return "dlock: redis " .. s.conf.endpoint .. ": wake-up subscription: " .. lua_tostring(rerr)
        end
        if lua_type(msg) == "table" then
            local m = msg
            local kind = m[1]
            if kind == "message" then
                subs.heard(s, str_sub(lua_tostring(m[2]), #CHANNEL + 1), lua_tostring(m[3]))
            elseif kind == "subscribe" then
                local rkey = str_sub(lua_tostring(m[2]), #CHANNEL + 1)
                if s.sent[rkey] ~= nil then
                    s.live[rkey] = true
                    -- A release, or a key handed to one of them, may have come before the subscription: they look once more.
                    waits.recheck(rkey)
                end
            end
        end
    end
end
--- One connection's life: returns why it ended (nil: nothing left to watch, or the worker exits).
local function session(s)
    local red, err = wakenode.connect(s)
    if red == nil then
        return err
    end
    s.connects = s.connects + 1
    if s.down then
        s.down = false
        ngx_log(NOTICE, "dlock: redis ", s.conf.endpoint, ": wake-up subscription connected again")
    end
    local sock = connection.socket(red)
    local conf = s.conf
    sock:settimeouts(conf.connect_timeout, conf.read_timeout, SILENCE * 1000 + conf.read_timeout)
    local sess = {sock = sock, stopping = false, ended = false, failed = nil}
    local ctl = thread_spawn(control, s, sess)
    local ok, res = lua_pcall(reader, s, sess)
    sess.ended = true
    s.rung = false
    subs.ring(s)
    local waited, cerr = thread_wait(ctl)
    red:close()
    if not ok then
        return "dlock: wake-up subscriber failed: " .. check.text(res)
    end
    if not waited then
        return "dlock: wake-up subscriber failed: " .. check.text(cerr)
    end
    if res ~= nil then
        return res
    end
    return sess.failed ~= nil and "dlock: redis " .. conf.endpoint .. ": wake-up subscription: " .. sess.failed or nil
end
--- Sleep up to `seconds`, less when the worker starts exiting.
local function pause(seconds)
    local deadline = clock_now() + seconds
    while not worker_exiting() do
        update_time()
        local left = deadline - clock_now()
        if left < 0.001 then
            return
        end
        clock_sleep(math_min(left, SWEEP))
    end
end
local function run(premature, s)
    -- Started late, after start() took this timer for dropped: the one started instead runs.
    if s.running then
        return
    end
    s.running = true
    s.scheduled = nil
    local retry = RETRY
    while not premature do
        -- A raise must not leave `running` set with nobody running: wake-ups would stop for good.
        local ok, res = lua_pcall(session, s)
        local err = res
        if not ok then
            err = "dlock: wake-up subscriber failed: " .. check.text(res)
        end
        -- Waiters sleeping until word comes (or the subscription does) would not hear it now: they poll again.
        subs.lost(s)
        -- Nobody waits here any more: no need to say so, nor to connect again.
        -- Keys kept only for their grace are let go of at once: a connection
        -- made again for them would serve nobody, and while Redis is gone each
        -- attempt logs a refused connect. The next waiter starts a subscriber.
        subs.prune(s, 0)
        if err == nil or subs.idle(s) then
            break
        end
        if not s.down then
            -- Once per outage: every attempt to reconnect would say the same.
            s.down = true
            retry = RETRY
            ngx_log(WARN, "dlock: ", check.reason(err), " (waiters poll until it is back)")
        else
            retry = math_min(retry * 2, RETRY_MAX)
        end
        pause(retry)
        subs.prune(s, 0)
        if subs.idle(s) or worker_exiting() then
            break
        end
    end
    s.running = false
end
--- Start the subscriber of s (its timer), unless it runs or a timer started for
-- it is on its way: one nginx dropped (late.lua) would stop wake-ups for good.
function _M.start(s)
    if s.running then
        return
    end
    local now = clock_now()
    if on_its_way(s.scheduled, now, 0) then
        return
    end
    local ok = timer_at(0, run, s)
    if ok ~= nil then
        s.scheduled = now
    end
end
return _M
