-- Generated from src/resty/dlock/core/wakeups.ts by TypeScriptToLua: edit that file, not this one.
-- Wake-ups across the fleet: a release publishes on the key's channel (inside
-- the release script, so it costs no extra round trip), and each worker keeps
-- ONE subscriber connection per Redis endpoint (not one per waiter or per key:
-- a connection per waiter is how subscription pools run dry) for the keys its
-- waiters wait for. A message wakes one local waiter of that key through
-- wait.lua, within about one round trip of the release anywhere in the fleet.
--
-- Waiters only say which keys they want and what they expect
-- (subscriptions.lua); the subscriber (subscriber.lua) owns the connection.
-- Once Redis confirms a key's subscription, that key's waiters are woken to
-- try once more: a release that happened before the subscription was live
-- cannot be missed. While no subscription is live (not confirmed yet,
-- connection down), waiters poll as before; with one, they sleep until a
-- wake-up, the holder's PTTL, or a probe of a holder nobody vouched for (it
-- may be another client's, which announces nothing).
local _M = {}
local subscriber = require("resty.dlock.redis.subscriber")
local subs = require("resty.dlock.core.subscriptions")
local waits = require("resty.dlock.core.wait")
local clock = require("resty.dlock.core.clock")
local clock_now = clock.now
--- A waiter of this worker waits for rkey (held elsewhere): have its releases
-- wake us. True when the subscription is live (then sleeping until the
-- holder's PTTL is safe); false while it is being set up or down (poll).
function _M.want(conf, rkey)
    local s = subs.subscriber(conf)
    if s == nil or s.refused then
        return false
    end
    s.wanted[rkey] = clock_now()
    if not s.running then
        subscriber.start(s)
    elseif s.sent[rkey] == nil then
        subs.ring(s)
    end
    return s.live[rkey] ~= nil
end
--- A waiter here saw rkey held for ms more (its PTTL; -1: no expiry): unless
-- word comes first, look again then; and sooner when the holder may be
-- another client's (`foreign`; never for semaphores, whose holders are all
-- ours) and nobody vouched for it.
function _M.expect(conf, rkey, ms, foreign)
    local s = subs.existing(conf)
    if s ~= nil then
        subs.expect(s, rkey, ms, foreign)
    end
end
--- Is a subscription for rkey on its way (asked for, the subscriber connecting)? Its confirmation wakes the waiters.
function _M.coming(conf, rkey)
    local s = subs.existing(conf)
    return s ~= nil and s.running and not s.refused and s.wanted[rkey] ~= nil and s.live[rkey] == nil
end
--- Is the subscription for rkey live now?
function _M.live(conf, rkey)
    local s = subs.existing(conf)
    return s ~= nil and s.live[rkey] ~= nil
end
--- The waiter is done waiting for rkey (acquired, timed out, or failed). The
-- key stays subscribed for GRACE seconds after the last one (subscriptions.lua
-- prune): under contention a worker's line empties and fills again all the
-- time, and each UNSUBSCRIBE/SUBSCRIBE pair would be two more commands for Redis.
function _M.done(conf, rkey)
    local s = subs.existing(conf)
    if s == nil or s.refused then
        return
    end
    if waits.waiters(rkey) == 0 then
        s.due[rkey] = nil
    end
end
--- Messages and connections of this worker's subscriber for conf (status, specs).
function _M.stats(conf)
    local s = subs.existing(conf)
    if s == nil then
        return 0, 0
    end
    return s.messages, s.connects
end
return _M
