-- Generated from src/resty/dlock/core/settle.ts by TypeScriptToLua: edit that file, not this one.
-- What Redis's answer to a release or an extend does to a lease, one lease at
-- a time (lease.lua) or many in one round trip (batch.lua): the lease ends, its
-- record leaves the shared dict, the next waiter is woken; or, when no answer
-- came, what the call may still have done in Redis.
local _M = {}
local ledger = require("resty.dlock.core.ledger")
local meter = require("resty.dlock.core.meter")
local orphans = require("resty.dlock.core.orphans")
local backend = require("resty.dlock.redis.backend")
local waits = require("resty.dlock.core.wait")
local wakeups = require("resty.dlock.core.wakeups")
local clock = require("resty.dlock.core.clock")
local clock_now = clock.now
local ngx_update_time = ngx.update_time
local math_max = math.max
local lua_type = type
local confirmsOwner = backend.confirmsOwner
local LOST_HORIZON_MS = orphans.LOST_HORIZON * 1000
--- Epoch ms now, fresh (not the time cached at the start of this event loop cycle).
local function nowMs()
    ngx_update_time()
    return clock_now() * 1000
end
--- The script an extend of l sends at `at` (epoch ms, fresh): its kind's
-- `restore` (Redlock: it also puts the key back on a master that lost it)
-- while the lease is valid, else `extend`, which only re-expires. Past its
-- validity a key put back could be one that another holder took and gave back
-- meanwhile: the extend would say yes across a gap in which the lease was not ours.
function _M.extendScript(l, at)
    local r = l._kind.restore
    return r ~= nil and at < l._validUntil and r or l._kind.extend
end
--- An extend or a release of l failed: what its outcome may have changed in Redis.
function _M.unconfirmed(l, fault, release)
    if fault ~= "lost" then
        return
    end
    if release then
        -- Sent (at the latest now) while the key could not have expired yet.
        if nowMs() < l._validUntil then
            l._releaseSent = true
        end
    else
        -- A PEXPIRE queued in a paused Redis runs when Redis resumes, whenever that is.
        l._expires = math_max(l._expires, nowMs() + LOST_HORIZON_MS)
    end
end
--- Its record out of the shared dict, and out of the held gauge (once: later
-- calls do nothing). `owned`: Redis confirmed the lease held its key when the
-- release deleted it, so the record is not a successor's (ledger.dropOwned).
local function forget(l, owned)
    local v = l._recv
    if v == nil then
        return
    end
    l._recv = nil
    local store = l._store
    if owned == true then
        ledger.dropOwned(store.dict, l._rec)
        meter.forgotten(store.meter, l._recAt)
    elseif ledger.drop(store.dict, l._rec, v) then
        meter.forgotten(store.meter, l._recAt)
    end
end
--- Redis says the key is not ours any more: counted lost, unless the watchdog did already.
local function gone(l)
    if not l._lost then
        meter.lost(l._store.meter)
    end
end
--- Redis answered the owner-checked release of l (1: deleted, else not ours):
-- the lease is over. A key found gone after a release reached Redis in time
-- was deleted by that release (or expired after it was asked to go), so that
-- still counts as released.
local function released(l, reply, untimed)
    if untimed == nil then
        untimed = false
    end
    l._released = true
    -- 1, or the first waiter's token: deleted while still this lease's, where
    -- the topology's answer proves that (backend.confirmsOwner).
    forget(l, (reply == 1 or lua_type(reply) == "string") and confirmsOwner(l._store.redis))
    local store = l._store
    local rkey = l._rkey
    if lua_type(reply) == "string" then
        -- Handed to the first waiter in line (its token): if it waits in this
        -- worker, it goes now, without waiting for the announcement to come back.
        waits.wakeToken(rkey, reply)
        if not untimed then
            meter.released(store.meter, (nowMs() - l._since) / 1000)
        end
        return true, nil
    end
    -- With a live subscription the release's PUBLISH wakes our waiters; waking
    -- one here too would send two of this worker's waiters after the key.
    if not wakeups.live(store.redis, rkey) then
        waits.wake(rkey)
    end
    if reply == 1 or l._releaseSent then
        if not untimed then
            meter.released(store.meter, (nowMs() - l._since) / 1000)
        end
        return true, nil
    end
    gone(l)
    return nil, "not_owner"
end
--- A key of a set being taken ran out before the set was whole: over, and not
-- lost (nobody was ever given a lease on the set).
function _M.ranOut(l)
    l._released = true
    forget(l)
end
--- Redis answered the owner-checked extend of l, sent at `sent` (epoch ms), to `ms`.
function _M.extended(l, reply, ms, sent)
    if reply ~= 1 then
        -- Never ours again: tokens are unique per lease.
        l._released = true
        forget(l)
        gone(l)
        return nil, "not_owner"
    end
    local store = l._store
    l.ttl = ms
    l._validUntil = sent + backend.validity(store.redis, ms)
    l._expires = math_max(l._expires, nowMs() + ms)
    local v = l._recv
    if v ~= nil then
        local nv, to = ledger.move(store.dict, l._rec, v, l.token, l.key, ms)
        if nv ~= nil then
            meter.moved(store.meter, l._recAt, to)
        end
        l._recv = nv
        l._recAt = to
    end
    return true, nil
end
local function swept(o, reply)
    local l = o.lease
    if not l._released then
        if reply == nil then
            -- Given up at its expiry: the key is gone by now.
            l._released = true
            forget(l)
        else
            released(l, reply)
        end
    end
end
--- Hand a lease whose release Redis did not confirm to the sweep, which retries it until the key expires.
function _M.orphan(l)
    local o = {
        lost = "release",
        conf = l._store.redis,
        release = l._kind.release,
        rkey = l._rkey,
        token = l.token,
        deadline = l._expires / 1000,
        settle = swept,
        lease = l
    }
    orphans.adopt(o)
end
-- Exported by name: this module's own uses of them are locals, not lookups in its exports table.
_M.nowMs = nowMs
_M.forget = forget
_M.released = released
return _M
