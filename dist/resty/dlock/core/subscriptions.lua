-- Generated from src/resty/dlock/core/subscriptions.ts by TypeScriptToLua: edit that file, not this one.
-- What each worker knows of the keys its waiters wait for, per Redis
-- endpoint (see wakeups.lua): which keys to subscribe to, what the messages on
-- their channels mean, and when the first waiter of this worker asks Redis
-- again without a word (a holder whose lease ran out, a key handed to a waiter
-- that never came, a holder nobody vouched for). subscriber.lua keeps the
-- connection; this module does no I/O.
--
-- Holders that are not ours (node-redlock, redis-py, a plain SET NX PX; with
-- prefix = "") announce nothing when they DEL. A key whose holder nobody
-- vouched for (no hand-off or claim heard since it was free) is looked at
-- again after PROBE seconds, doubling to PROBE_MAX, by the first waiter of
-- this worker: a foreign release is seen within PROBE_MAX, at one script call
-- per worker and key per PROBE_MAX while such a holder holds on.
local _M = {}
local waits = require("resty.dlock.core.wait")
local clock = require("resty.dlock.core.clock")
--- Seconds a key stays subscribed after its last waiter of this worker.
local GRACE = 2
--- Seconds of slack on a due time: the claim or release announcing it is on its way.
local SLACK = 0.005
--- Seconds until the first look at a key whose holder nobody vouched for, and the most between looks.
local PROBE = 0.05
local PROBE_MAX = 0.2
local semaphore = require("ngx.semaphore")
local clock_now = clock.now
local math_min = math.min
local str_sub = string.sub
local str_match = string.match
local lua_tonumber = tonumber
local lua_pairs = pairs
local lua_ipairs = ipairs
local subscribers = {}
--- Wake the control thread (once: it looks at everything when it wakes).
local function ring(s)
    if s.rung then
        return
    end
    s.rung = true
    s.bell:post(1)
end
local function count(t)
    local n = 0
    for _k in lua_pairs(t) do
        n = n + 1
    end
    return n
end
--- Does this worker wait for any key of s?
function _M.idle(s)
    return count(s.wanted) == 0
end
--- Forget what was known of rkey's holder.
local function forget(s, rkey)
    s.due[rkey] = nil
    s.vouched[rkey] = nil
    s.probe[rkey] = nil
end
--- Keys no waiter of this worker wanted for `grace` seconds (GRACE unless
-- said): out of `wanted`, to be unsubscribed; and waiters killed while they
-- waited are noticed here (wait.lua drops their tickets).
function _M.prune(s, grace)
    if grace == nil then
        grace = GRACE
    end
    local now = clock_now()
    local stale
    for rkey, at in lua_pairs(s.wanted) do
        if waits.waiters(rkey) == 0 and now - at >= grace then
            if stale == nil then
                stale = {}
            end
            stale[#stale + 1] = rkey
        end
    end
    if stale == nil then
        return
    end
    for _, rkey in lua_ipairs(stale) do
        s.wanted[rkey] = nil
        forget(s, rkey)
    end
end
--- A message on rkey's channel: "" a release with nobody in line (the first
-- waiter here tries), "g<ms> <token>" the key handed to the waiter holding
-- token for ms, "c<ms>" the key claimed by a waiter for ms.
function _M.heard(s, rkey, payload)
    s.messages = s.messages + 1
    local c = str_sub(payload, 1, 1)
    if c == "g" then
        local ms, tok = str_match(payload, "^g(%d+) (.*)$")
        s.vouched[rkey] = true
        s.due[rkey] = clock_now() + (lua_tonumber(ms) or 0) / 1000 + SLACK
        if tok ~= nil then
            waits.wakeToken(rkey, tok)
        end
    elseif c == "c" then
        s.vouched[rkey] = true
        s.due[rkey] = clock_now() + (lua_tonumber(str_sub(payload, 2)) or 0) / 1000 + SLACK
    else
        forget(s, rkey)
        waits.wake(rkey)
    end
end
--- Keys whose due time passed without a word: the first waiter here asks Redis (which passes the key on).
function _M.overdue(s)
    local now = clock_now()
    local late
    for rkey, at in lua_pairs(s.due) do
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
    for _, rkey in lua_ipairs(late) do
        s.due[rkey] = nil
        -- Its lease ran out, or it was handed on, without a word: who holds it next is not known.
        if s.vouched[rkey] ~= nil then
            s.vouched[rkey] = nil
            s.probe[rkey] = nil
        end
        waits.wake(rkey)
    end
end
--- When the control thread must look again, no later than `latest`: the first due time, or the end of a grace.
function _M.nextLook(s, latest)
    local at = latest
    for rkey, since in lua_pairs(s.wanted) do
        if waits.waiters(rkey) == 0 then
            at = math_min(at, since + GRACE)
        end
    end
    for _rkey, due in lua_pairs(s.due) do
        at = math_min(at, due)
    end
    return at
end
--- A subscription went down (its connection ended): waiters sleeping until word comes poll again.
function _M.lost(s)
    for k in lua_pairs(s.sent) do
        s.sent[k] = nil
    end
    local wasLive = {}
    for k in lua_pairs(s.live) do
        wasLive[#wasLive + 1] = k
    end
    for _, k in lua_ipairs(wasLive) do
        s.live[k] = nil
    end
    for _, k in lua_ipairs(wasLive) do
        waits.wakeAll(k)
    end
    for k in lua_pairs(s.wanted) do
        if s.live[k] == nil then
            waits.wakeAll(k)
        end
    end
end
--- This worker's subscriber for conf, made on first use (nil when no semaphore can be made).
function _M.subscriber(conf)
    local s = subscribers[conf.pool]
    if s == nil then
        local bell = semaphore.new(0)
        if bell == nil then
            return nil
        end
        s = {
            conf = conf,
            wanted = {},
            due = {},
            vouched = {},
            probe = {},
            live = {},
            sent = {},
            bell = bell,
            rung = false,
            wakeAt = 0,
            running = false,
            refused = false,
            down = false,
            node = nil,
            messages = 0,
            connects = 0
        }
        subscribers[conf.pool] = s
    end
    return s
end
--- This worker's subscriber for conf, if it has one.
function _M.existing(conf)
    return subscribers[conf.pool]
end
--- A waiter here saw rkey held for ms more (its PTTL; -1: no expiry): unless
-- word comes first, look again then; and sooner should the holder not be
-- vouched for and `foreign` holders be possible.
function _M.expect(s, rkey, ms, foreign)
    local wait = ms >= 0 and ms / 1000 or nil
    if foreign and s.vouched[rkey] == nil then
        local p = s.probe[rkey] or PROBE
        s.probe[rkey] = math_min(p * 2, PROBE_MAX)
        wait = wait == nil and p or math_min(wait, p)
    end
    if wait == nil then
        return
    end
    local at = clock_now() + wait + SLACK
    s.due[rkey] = at
    if at < s.wakeAt then
        ring(s)
    end
end
-- Exported by name: this module's own uses of them are locals, not lookups in its exports table.
_M.ring = ring
return _M
