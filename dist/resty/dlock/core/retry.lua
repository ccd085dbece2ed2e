-- Generated from src/resty/dlock/core/retry.ts by TypeScriptToLua: edit that file, not this one.
-- What both ways of waiting for a key (queued.lua in line, acquire.lua by
-- turns) share: how long a poll naps, what a failed attempt leaves behind,
-- and what a busy answer says about the holder.
local _M = {}
local backend = require("resty.dlock.redis.backend")
local ledger = require("resty.dlock.core.ledger")
local orphans = require("resty.dlock.core.orphans")
local clock = require("resty.dlock.core.clock")
local clock_now = clock.now
local math_random = math.random
local lua_type = type
local lua_tostring = tostring
_M.FIRST_BACKOFF = 2
_M.MAX_BACKOFF = 64
--- The next nap of a waiter that polls: jittered, doubling, never past the holder's expiry.
function _M.poll(backoff, retryAfter)
    local nap = backoff / 2 + math_random() * backoff / 2
    if retryAfter ~= nil and retryAfter + 1 < nap then
        nap = retryAfter + 1
    end
    return nap
end
--- The last error failed() ended an acquire with for a "not now" fault (a
-- transient one: no time to wait, or none left); nil after any other. Its
-- caller reads it at once through notNow(), nothing yielding in between.
local lastNotNow
--- Did the acquire that just returned err end on a "not now" answer? A face that
-- first tries without waiting (compat) then waits it out, as a waiting acquire
-- would; not a hard error (auth, a bad key, a script refused).
function _M.notNow(err)
    return err ~= nil and err == lastNotNow
end
--- An attempt failed on the way to or from Redis: the error to return now, or
-- nil to try again (a transient fault while there is time to wait). `release`
-- gives back a key taken on the master only; `cleanup` removes what a lost
-- reply may have left.
function _M.failed(store, kind, rkey, tok, err, fault, wait, deadline, cleanup)
    if fault == "replicas" then
        -- Taken on the master only: a failover now would hand it to someone else. Give it back.
        local gone = backend.own(store.redis, kind.release, rkey, tok)
        if gone == nil then
            orphans.adoptAcquire(store.redis, kind.release, rkey, tok)
        end
        return lua_tostring(err) .. "; released"
    end
    if fault == "lost" then
        -- The write may have landed: delete it if it did, so it cannot block others for a whole ttl.
        orphans.adoptAcquire(store.redis, cleanup, rkey, tok)
        return lua_tostring(err) .. "; acquire outcome unknown, owner-checked cleanup scheduled"
    end
    if fault ~= "transient" or wait == 0 or deadline - clock_now() * 1000 <= 0 then
        local e = err == nil and "dlock: redis failed" or err
        lastNotNow = fault == "transient" and e or nil
        return e
    end
    return nil
end
--- Is rkey held in this nginx (its shared dict says so)? Then its release is announced: it is ours.
function _M.heldHere(store, rkey)
    local pid = ledger.holder(store.dict, ledger.recordKey(store.redis.keyspace, rkey, "", false))
    return pid ~= nil
end
--- A busy reply's PTTL of the holder as retry_after (nil: the key has no expiry).
function _M.pttlOf(res)
    return lua_type(res) == "number" and res >= 0 and res or nil
end
return _M
