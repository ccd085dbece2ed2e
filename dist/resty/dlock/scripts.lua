--[[ Generated with https://github.com/TypeScriptToLua/TypeScriptToLua ]]
local ____exports = {}
local token = require("resty.dlock.token")
local function script(name, src, keys, written)
    if keys == nil then
        keys = 1
    end
    return {
        name = name,
        src = src,
        sha = token.hex(ngx.sha1_bin(src)),
        keys = keys,
        written = written
    }
end
local function isOk(reply)
    return reply == "OK"
end
local function isOkFenced(reply)
    return type(reply) == "table"
end
local function isOne(reply)
    return reply == 1
end
local BUSY = "\nlocal t = redis.call('TYPE', KEYS[1]).ok\nif t ~= 'string' then\n  return redis.error_reply('WRONGTYPE lock key ' .. KEYS[1] .. ' holds a ' .. t .. ', not a lock')\nend\nreturn redis.call('PTTL', KEYS[1])\n"
--- KEYS[1] lock key, ARGV[1] token, ARGV[2] ttl ms.
-- Returns "OK" when acquired, else the holder's PTTL (-1: the key has no TTL).
-- A key of another type is an error, not "busy": someone else's data sits there.
____exports.ACQUIRE = script("acquire", "\nif redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then\n  return 'OK'\nend" .. BUSY, 1, isOk)
--- Fencing: as ACQUIRE, with KEYS[2] a counter that only grows (it never
-- expires). Returns { "OK", fence } when acquired: the fence is larger than
-- that of every earlier holder of the key, so a resource that remembers the
-- largest fence it has seen can turn away a holder whose lease ran out.
____exports.ACQUIRE_FENCED = script("acquire", "\nif redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then\n  return { 'OK', redis.call('INCR', KEYS[2]) }\nend" .. BUSY, 2, isOkFenced)
--- Releases are announced on CHANNEL .. <lock key>: waiters anywhere in the
-- fleet subscribe per key (wakeups.ts); with nobody subscribed, PUBLISH costs
-- Redis a hash lookup. redis.pcall: an ACL user without channel permissions
-- (Redis 7 users get none by default) still releases; its waiters poll.
____exports.CHANNEL = "dlock:released:"
local PUBLISH = ("redis.pcall('PUBLISH', '" .. ____exports.CHANNEL) .. "' .. KEYS[1], '')\n"
--- KEYS[1] lock key, ARGV[1] token. 1 when deleted (and announced), 0 when the key is not ours.
____exports.RELEASE = script("release", ("\nif redis.call('GET', KEYS[1]) == ARGV[1] then\n  redis.call('DEL', KEYS[1])\n  " .. PUBLISH) .. "  return 1\nend\nreturn 0\n")
--- KEYS[1] lock key, ARGV[1] token, ARGV[2] ttl ms. 1 when extended, 0 when not ours.
____exports.EXTEND = script("extend", "\nif redis.call('GET', KEYS[1]) == ARGV[1] then\n  return redis.call('PEXPIRE', KEYS[1], ARGV[2])\nend\nreturn 0\n", 1, isOne)
local NOW = "local t = redis.call('TIME')\nlocal now = t[1] * 1000 + math.floor(t[2] / 1000)\n"
--- KEYS[1] set, ARGV[1] token, ARGV[2] ttl ms, ARGV[3] permits.
-- "OK" when a permit was taken, else ms until the earliest permit expires.
____exports.SEM_ACQUIRE = script("semaphore acquire", NOW .. "\nredis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)\nif redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[3]) then\n  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])\n  local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')\n  redis.call('PEXPIREAT', KEYS[1], last[2])\n  return 'OK'\nend\nlocal first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')\nreturn tonumber(first[2]) - now\n", 1, isOk)
--- KEYS[1] set, ARGV[1] token. 1 when our live permit was returned (and announced), else 0.
____exports.SEM_RELEASE = script("semaphore release", ((NOW .. "\nlocal exp = redis.call('ZSCORE', KEYS[1], ARGV[1])\nif not exp then return 0 end\nredis.call('ZREM', KEYS[1], ARGV[1])\nif tonumber(exp) <= now then return 0 end\n") .. PUBLISH) .. "return 1\n")
--- KEYS[1] set, ARGV[1] token, ARGV[2] ttl ms. 1 when our live permit was extended, else 0.
____exports.SEM_EXTEND = script("semaphore extend", NOW .. "\nlocal exp = redis.call('ZSCORE', KEYS[1], ARGV[1])\nif not exp or tonumber(exp) <= now then\n  redis.call('ZREM', KEYS[1], ARGV[1])\n  return 0\nend\nlocal until_ms = now + tonumber(ARGV[2])\nredis.call('ZADD', KEYS[1], 'XX', until_ms, ARGV[1])\nif redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then\n  redis.call('PEXPIREAT', KEYS[1], until_ms)\nend\nreturn 1\n", 1, isOne)
--- Run a script (its keys first, then its arguments); replies and errors exactly as lua-resty-redis returns them.
function ____exports.run(red, s, key, ...)
    local res, err = red:evalsha(s.sha, s.keys, key, ...)
    if res == false and err ~= nil and string.sub(err, 1, 8) == "NOSCRIPT" then
        return red:eval(s.src, s.keys, key, ...)
    end
    return res, err
end
--- KEYS[1] record, ARGV[1] token, ARGV[2] lease ms, ARGV[3] fingerprint.
-- "OK" when claimed (a running record with our token, expiring after the
-- lease); else the record there: { state, fp, status, headers, body, pttl }.
-- SET NX and read in one script: two requests can never both miss.
____exports.IDEM_CLAIM = script("idempotency claim", "\nlocal t = redis.call('TYPE', KEYS[1]).ok\nif t == 'none' then\n  redis.call('HSET', KEYS[1], 'state', 'running', 'token', ARGV[1], 'fp', ARGV[3])\n  redis.call('PEXPIRE', KEYS[1], ARGV[2])\n  return 'OK'\nend\nif t ~= 'hash' then\n  return redis.error_reply('WRONGTYPE idempotency key ' .. KEYS[1] .. ' holds a ' .. t .. ', not a record')\nend\nlocal r = redis.call('HMGET', KEYS[1], 'state', 'fp', 'status', 'headers', 'body')\nreturn { r[1] or '', r[2] or '', r[3] or '', r[4] or '', r[5] or '', redis.call('PTTL', KEYS[1]) }\n", 1, isOk)
--- KEYS[1] record, ARGV[1] token, ARGV[2] ttl ms, ARGV[3] state ("done" or
-- "unreplayable"), ARGV[4] status, ARGV[5] headers, ARGV[6] body.
-- 1 when our running claim became the completed record, 0 when the claim is
-- not ours any more (it ran out: a retry may have claimed the key meanwhile).
____exports.IDEM_COMPLETE = script("idempotency complete", "\nlocal r = redis.call('HMGET', KEYS[1], 'state', 'token')\nif r[1] ~= 'running' or r[2] ~= ARGV[1] then return 0 end\nredis.call('HSET', KEYS[1], 'state', ARGV[3], 'status', ARGV[4], 'headers', ARGV[5], 'body', ARGV[6])\nredis.call('PEXPIRE', KEYS[1], ARGV[2])\nreturn 1\n", 1, isOne)
--- KEYS[1] record, ARGV[1] token, ARGV[2] lease ms. Renews our running claim:
-- 1, or 0 when it is not ours. A record already completed by our own request
-- (the store raced the keeper's round) answers 1 and keeps its ttl.
____exports.IDEM_EXTEND = script("idempotency extend", "\nlocal r = redis.call('HMGET', KEYS[1], 'state', 'token')\nif r[2] ~= ARGV[1] then return 0 end\nif r[1] == 'running' then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end\nreturn 1\n")
--- KEYS[1] record, ARGV[1] token. Drops our running claim (a response not stored): 1, or 0 when not ours.
____exports.IDEM_RELEASE = script("idempotency release", "\nlocal r = redis.call('HMGET', KEYS[1], 'state', 'token')\nif r[1] ~= 'running' or r[2] ~= ARGV[1] then return 0 end\nreturn redis.call('DEL', KEYS[1])\n")
return ____exports
