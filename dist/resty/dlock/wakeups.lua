--[[ Generated with https://github.com/TypeScriptToLua/TypeScriptToLua ]]
local ____exports = {}
local check = require("resty.dlock.check")
local redis = require("resty.dlock.redis")
local resp = require("resty.dlock.resp")
local scripts = require("resty.dlock.scripts")
local waits = require("resty.dlock.wait")
local CHANNEL = scripts.CHANNEL
--- Seconds a subscriber read waits before it looks for subscription changes.
local TICK = 0.01
--- Seconds a key stays subscribed after its last waiter of this worker.
local GRACE = 2
--- Seconds a subscriber with nothing to watch stays connected before it stops.
local IDLE = 10
--- Seconds between reconnection attempts after the connection failed.
local RETRY = 0.5
local subscribers = {}
--- Where the subscriber connects: the server itself, or (Cluster, Redlock) the
-- first node (PUBLISH reaches every node of a cluster). A pool of its own: the
-- connection is held for as long as there are waiters.
local function endpointOf(conf)
    return redis.apart(conf.nodes ~= nil and conf.nodes[1] or conf, "wakeups")
end
--- Bring the connection's subscriptions in line with what is wanted.
local function sync(s, sock)
    local add = {"subscribe"}
    local drop = {"unsubscribe"}
    local now = ngx.now()
    local stale = {}
    for rkey, at in pairs(s.wanted) do
        if now - at > GRACE and waits.waiters(rkey) == 0 then
            stale[#stale + 1] = rkey
        end
    end
    for ____, rkey in ipairs(stale) do
        s.wanted[rkey] = nil
        s.due[rkey] = nil
    end
    for rkey in pairs(s.wanted) do
        if not (s.sent[rkey] ~= nil) then
            add[#add + 1] = CHANNEL .. rkey
            s.sent[rkey] = true
        end
    end
    for rkey in pairs(s.sent) do
        if not (s.wanted[rkey] ~= nil) then
            drop[#drop + 1] = CHANNEL .. rkey
            s.sent[rkey] = nil
            s.live[rkey] = nil
        end
    end
    for ____, words in ipairs({add, drop}) do
        if #words > 1 then
            local ok, err = sock:send(resp.encode(words))
            if ok == nil then
                return tostring(err)
            end
        end
    end
    return nil
end
local function count(t)
    local n = 0
    for _k in pairs(t) do
        n = n + 1
    end
    return n
end
--- Seconds of slack on a due time: the claim or release announcing it is on its way.
local SLACK = 0.005
--- A message on rkey's channel: "" a release with nobody in line (the first
-- waiter here tries), "g<ms> <token>" the key handed to the waiter holding
-- token for ms, "c<ms>" the key claimed by a waiter for ms.
local function heard(s, rkey, payload)
    local c = string.sub(payload, 1, 1)
    if c == "g" then
        local ms, tok = string.match(payload, "^g(%d+) (.*)$")
        s.due[rkey] = ngx.now() + (tonumber(ms) or 0) / 1000 + SLACK
        if tok ~= nil then
            waits.wakeToken(rkey, tok)
        end
    elseif c == "c" then
        s.due[rkey] = ngx.now() + (tonumber(string.sub(payload, 2)) or 0) / 1000 + SLACK
    else
        s.due[rkey] = nil
        waits.wake(rkey)
    end
end
--- Keys whose due time passed without a word: the first waiter here asks Redis
-- (which passes the key on). And waiters killed while they waited are noticed
-- here, within a TICK, so that their tickets are dropped before their turn.
local function overdue(s)
    for rkey in pairs(s.wanted) do
        waits.waiters(rkey)
    end
    local now = ngx.now()
    local late
    for rkey, at in pairs(s.due) do
        if now >= at then
            if late == nil then
                late = {}
            end
            late[#late + 1] = rkey
        end
    end
    if late == nil then
        return
    end
    for ____, rkey in ipairs(late) do
        s.due[rkey] = nil
        waits.wake(rkey)
    end
end
--- One connection's life: subscribe, read, wake; returns why it ended (nil: nothing left to watch).
local function session(s)
    local red, err = redis.connect(endpointOf(s.conf))
    if red == nil then
        return err
    end
    s.connects = s.connects + 1
    local sock = rawget(red, "_sock")
    local flags = red
    red:set_timeout(TICK * 1000)
    local idleSince = ngx.now()
    while true do
        flags._subscribed = true
        local serr = sync(s, sock)
        if serr ~= nil then
            red:close()
            return serr
        end
        if count(s.wanted) > 0 then
            idleSince = ngx.now()
        elseif ngx.now() - idleSince >= IDLE or ngx.worker.exiting() then
            red:close()
            return nil
        end
        local msg, rerr = red:read_reply()
        if type(msg) == "table" then
            local m = msg
            local kind = m[1]
            local rkey = string.sub(
                tostring(m[2]),
                #CHANNEL + 1
            )
            if kind == "message" then
                s.messages = s.messages + 1
                heard(
                    s,
                    rkey,
                    tostring(m[3])
                )
            elseif kind == "subscribe" and s.sent[rkey] ~= nil then
                s.live[rkey] = true
                waits.recheck(rkey)
            end
        elseif string.sub(
            tostring(rerr),
            1,
            6
        ) == "NOPERM" then
            red:close()
            s.refused = true
            ngx.log(
                ngx.WARN,
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
        elseif rerr ~= "timeout" then
            red:close()
            return (("dlock: redis " .. s.conf.endpoint) .. ": wake-up subscription: ") .. tostring(rerr)
        end
        overdue(s)
    end
end
local function run(premature, s)
    while not premature do
        local ok, res = pcall(session, s)
        local ____ok_0
        if ok then
            ____ok_0 = res
        else
            ____ok_0 = "dlock: wake-up subscriber failed: " .. tostring(res)
        end
        local err = ____ok_0
        for k in pairs(s.sent) do
            s.sent[k] = nil
        end
        local wasLive = {}
        for k in pairs(s.live) do
            wasLive[#wasLive + 1] = k
        end
        for ____, k in ipairs(wasLive) do
            s.live[k] = nil
        end
        for ____, k in ipairs(wasLive) do
            waits.wakeAll(k)
        end
        for k in pairs(s.wanted) do
            if not (s.live[k] ~= nil) then
                waits.wakeAll(k)
            end
        end
        if err == nil then
            break
        end
        ngx.log(
            ngx.WARN,
            "dlock: ",
            check.reason(err),
            " (waiters poll meanwhile)"
        )
        ngx.sleep(RETRY)
        if count(s.wanted) == 0 or ngx.worker.exiting() then
            break
        end
    end
    s.running = false
end
local function subscriber(conf)
    local s = subscribers[conf.pool]
    if s == nil then
        s = {
            conf = conf,
            wanted = {},
            due = {},
            live = {},
            sent = {},
            running = false,
            refused = false,
            messages = 0,
            connects = 0
        }
        subscribers[conf.pool] = s
    end
    return s
end
--- A waiter of this worker waits for rkey (held elsewhere): have its releases
-- wake us. True when the subscription is live (then sleeping until the
-- holder's PTTL is safe); false while it is being set up or down (poll).
function ____exports.want(conf, rkey)
    local s = subscriber(conf)
    if s.refused then
        return false
    end
    s.wanted[rkey] = ngx.now()
    if not s.running then
        local ok = ngx.timer.at(0, run, s)
        s.running = ok ~= nil
    end
    return s.live[rkey] ~= nil
end
--- A waiter here saw rkey held for ms more (its PTTL; -1: no expiry): unless
-- word comes first, look again then.
function ____exports.expect(conf, rkey, ms)
    local s = subscribers[conf.pool]
    if s == nil or ms < 0 then
        return
    end
    s.due[rkey] = ngx.now() + ms / 1000 + SLACK
end
--- Is a subscription for rkey on its way (asked for, the subscriber connecting)? Its confirmation wakes the waiters.
function ____exports.coming(conf, rkey)
    local s = subscribers[conf.pool]
    return s ~= nil and s.running and not s.refused and s.wanted[rkey] ~= nil and not (s.live[rkey] ~= nil)
end
--- Is the subscription for rkey live now?
function ____exports.live(conf, rkey)
    local s = subscribers[conf.pool]
    return s ~= nil and s.live[rkey] ~= nil
end
--- The waiter is done waiting for rkey (acquired, timed out, or failed). The
-- key stays subscribed for GRACE seconds after the last one (see sync): under
-- contention a worker's line empties and fills again all the time, and each
-- UNSUBSCRIBE/SUBSCRIBE pair would be two more commands for Redis.
function ____exports.done(conf, rkey)
    local s = subscribers[conf.pool]
    if s == nil or s.refused then
        return
    end
    if waits.waiters(rkey) == 0 then
        s.due[rkey] = nil
    end
end
--- Messages and connections of this worker's subscriber for conf (status, specs).
function ____exports.stats(conf)
    local s = subscribers[conf.pool]
    if s == nil then
        return 0, 0
    end
    return s.messages, s.connects
end
return ____exports
