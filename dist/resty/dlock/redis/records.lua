-- Generated from src/resty/dlock/redis/records.ts by TypeScriptToLua: edit that file, not this one.
-- The scripts of idempotency records (gateway mode "idempotency"), run as
-- every script is (roundtrip.lua).
local _M = {}
local script = require("resty.dlock.redis.script")
local def = script.script
local isOk = script.isOk
local isOne = script.isOne
local FREES = script.FREES
-- Idempotency records (gateway mode "idempotency"): one hash per key, fields
--   state    "running" (claimed, the first request is in flight), "done" (its
--            response is stored), "unreplayable" (completed, but its response
--            was too large to store: retries are told so, never run again)
--   token    the claim's owner
--   fp       the request fingerprint (method, path, query, body digest)
--   status, headers, body   the stored response (done only; body empty otherwise)
--- KEYS[1] record, ARGV[1] token, ARGV[2] lease ms, ARGV[3] fingerprint.
-- "OK" when claimed (a running record with our token, expiring after the
-- lease); else the record there: { state, fp, status, headers, body, pttl }.
-- SET NX and read in one script: two requests can never both miss.
_M.IDEM_CLAIM = def("idempotency claim", "\nlocal t = redis.call('TYPE', KEYS[1]).ok\nif t == 'none' then\n  redis.call('HSET', KEYS[1], 'state', 'running', 'token', ARGV[1], 'fp', ARGV[3])\n  redis.call('PEXPIRE', KEYS[1], ARGV[2])\n  return 'OK'\nend\nif t ~= 'hash' then\n  return redis.error_reply('WRONGTYPE idempotency key ' .. KEYS[1] .. ' holds a ' .. t .. ', not a record')\nend\nlocal r = redis.call('HMGET', KEYS[1], 'state', 'fp', 'status', 'headers', 'body')\nreturn { r[1] or '', r[2] or '', r[3] or '', r[4] or '', r[5] or '', redis.call('PTTL', KEYS[1]) }\n", 1, isOk)
--- KEYS[1] record, ARGV[1] token, ARGV[2] ttl ms, ARGV[3] state ("done" or
-- "unreplayable"), ARGV[4] status, ARGV[5] headers, ARGV[6] body.
-- 1 when our running claim became the completed record (or already had: the
-- store sent again because the first one's reply was lost, and it had
-- landed), 0 when the claim is not ours any more (it ran out: a retry may have
-- claimed the key meanwhile).
_M.IDEM_COMPLETE = def("idempotency complete", "\nlocal r = redis.call('HMGET', KEYS[1], 'state', 'token')\nif r[2] ~= ARGV[1] then return 0 end\nif r[1] ~= 'running' then return 1 end\nredis.call('HSET', KEYS[1], 'state', ARGV[3], 'status', ARGV[4], 'headers', ARGV[5], 'body', ARGV[6])\nredis.call('PEXPIRE', KEYS[1], ARGV[2])\nreturn 1\n", 1, isOne)
--- KEYS[1] record, ARGV[1] token, ARGV[2] lease ms. Renews our running claim:
-- 1, or 0 when it is not ours. A record already completed by our own request
-- (the store raced the keeper's round) answers 1 and keeps its ttl.
_M.IDEM_EXTEND = def(
    "idempotency extend",
    "\nlocal r = redis.call('HMGET', KEYS[1], 'state', 'token')\nif r[2] ~= ARGV[1] then return 0 end\nif r[1] == 'running' then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end\nreturn 1\n",
    1,
    nil,
    nil,
    FREES
)
--- KEYS[1] record, ARGV[1] token. Drops our running claim (a response not stored): 1, or 0 when not ours.
_M.IDEM_RELEASE = def(
    "idempotency release",
    "\nlocal r = redis.call('HMGET', KEYS[1], 'state', 'token')\nif r[1] ~= 'running' or r[2] ~= ARGV[1] then return 0 end\nreturn redis.call('DEL', KEYS[1])\n",
    1,
    nil,
    nil,
    FREES
)
-- A claim whose caller is gone before its reply came is dropped (pipeline.lua, takeback.lua).
_M.IDEM_CLAIM.undo = _M.IDEM_RELEASE
return _M
