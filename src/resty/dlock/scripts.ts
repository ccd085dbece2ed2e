// Every Redis script lua-resty-dlock runs, and the one way to run them:
// EVALSHA with the SHA1 computed locally, EVAL once on NOSCRIPT (after
// SCRIPT FLUSH, a Redis restart or a failover), which also caches it again.
// All scripts touch a single key, so they stay valid under Redis Cluster.

import * as token from "./token";

export interface Script {
  readonly name: string;
  readonly src: string;
  readonly sha: string;
  /** How many of the arguments are keys (KEYS[1..n]); the rest is ARGV. */
  readonly keys: number;
  /**
   * For scripts whose write must reach replicas (redis.replicas): does this
   * reply say the script wrote? Then WAIT follows on the same connection.
   */
  readonly written: ((this: void, reply: RedisValue) => boolean) | undefined;
}

function script(name: string, src: string, keys = 1, written?: (this: void, reply: RedisValue) => boolean): Script {
  return { name, src, sha: token.hex(ngx.sha1_bin(src)), keys, written };
}

function isOk(this: void, reply: RedisValue): boolean {
  return reply === "OK";
}

function isOkFenced(this: void, reply: RedisValue): boolean {
  return type(reply) === "table";
}

function isOne(this: void, reply: RedisValue): boolean {
  return reply === 1;
}

// The tail of both acquire scripts, when the key is taken: the holder's PTTL
// (-1: the key has no TTL), or an error when someone else's data sits there.
const BUSY = `
local t = redis.call('TYPE', KEYS[1]).ok
if t ~= 'string' then
  return redis.error_reply('WRONGTYPE lock key ' .. KEYS[1] .. ' holds a ' .. t .. ', not a lock')
end
return redis.call('PTTL', KEYS[1])
`;

/**
 * KEYS[1] lock key, ARGV[1] token, ARGV[2] ttl ms.
 * Returns "OK" when acquired, else the holder's PTTL (-1: the key has no TTL).
 * A key of another type is an error, not "busy": someone else's data sits there.
 */
export const ACQUIRE = script("acquire", `
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 'OK'
end` + BUSY, 1, isOk);

/**
 * Fencing: as ACQUIRE, with KEYS[2] a counter that only grows (it never
 * expires). Returns { "OK", fence } when acquired: the fence is larger than
 * that of every earlier holder of the key, so a resource that remembers the
 * largest fence it has seen can turn away a holder whose lease ran out.
 */
export const ACQUIRE_FENCED = script("acquire", `
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return { 'OK', redis.call('INCR', KEYS[2]) }
end` + BUSY, 2, isOkFenced);

/**
 * Releases are announced on CHANNEL .. <lock key>: waiters anywhere in the
 * fleet subscribe per key (wakeups.ts); with nobody subscribed, PUBLISH costs
 * Redis a hash lookup. redis.pcall: an ACL user without channel permissions
 * (Redis 7 users get none by default) still releases; its waiters poll.
 */
export const CHANNEL = "dlock:released:";
const PUBLISH = "redis.pcall('PUBLISH', '" + CHANNEL + "' .. KEYS[1], '')\n";

/** KEYS[1] lock key, ARGV[1] token. 1 when deleted (and announced), 0 when the key is not ours. */
export const RELEASE = script("release", `
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  ` + PUBLISH + `  return 1
end
return 0
`);

/** KEYS[1] lock key, ARGV[1] token, ARGV[2] ttl ms. 1 when extended, 0 when not ours. */
export const EXTEND = script("extend", `
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
`, 1, isOne);

// Counting semaphore: a sorted set of holders, member = token, score = expiry
// in Redis time (ms). Expired holders are pruned on every acquire, so a crashed
// nginx never leaks capacity: its permits simply run out.
const NOW = "local t = redis.call('TIME')\nlocal now = t[1] * 1000 + math.floor(t[2] / 1000)\n";

/**
 * KEYS[1] set, ARGV[1] token, ARGV[2] ttl ms, ARGV[3] permits.
 * "OK" when a permit was taken, else ms until the earliest permit expires.
 */
export const SEM_ACQUIRE = script("semaphore acquire", NOW + `
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[3]) then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
  local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  redis.call('PEXPIREAT', KEYS[1], last[2])
  return 'OK'
end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return tonumber(first[2]) - now
`, 1, isOk);

/** KEYS[1] set, ARGV[1] token. 1 when our live permit was returned (and announced), else 0. */
export const SEM_RELEASE = script("semaphore release", NOW + `
local exp = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not exp then return 0 end
redis.call('ZREM', KEYS[1], ARGV[1])
if tonumber(exp) <= now then return 0 end
` + PUBLISH + `return 1
`);

/** KEYS[1] set, ARGV[1] token, ARGV[2] ttl ms. 1 when our live permit was extended, else 0. */
export const SEM_EXTEND = script("semaphore extend", NOW + `
local exp = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not exp or tonumber(exp) <= now then
  redis.call('ZREM', KEYS[1], ARGV[1])
  return 0
end
local until_ms = now + tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], 'XX', until_ms, ARGV[1])
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('PEXPIREAT', KEYS[1], until_ms)
end
return 1
`, 1, isOne);

/** Run a script (its keys first, then its arguments); replies and errors exactly as lua-resty-redis returns them. */
export function run(red: RestyRedis, s: Script, key: string, ...args: (string | number)[]): RedisResult {
  const [res, err] = red.evalsha(s.sha, s.keys, key, ...args);
  if (res === false && err !== undefined && string.sub(err, 1, 8) === "NOSCRIPT") {
    return red.eval(s.src, s.keys, key, ...args);
  }
  return $multi(res, err);
}

// Idempotency records (gateway mode "idempotency"): one hash per key, fields
//   state    "running" (claimed, the first request is in flight), "done" (its
//            response is stored), "unreplayable" (completed, but its response
//            was too large to store: retries are told so, never run again)
//   token    the claim's owner
//   fp       the request fingerprint (method, path, query, body digest)
//   status, headers, body   the stored response (done only; body empty otherwise)

/**
 * KEYS[1] record, ARGV[1] token, ARGV[2] lease ms, ARGV[3] fingerprint.
 * "OK" when claimed (a running record with our token, expiring after the
 * lease); else the record there: { state, fp, status, headers, body, pttl }.
 * SET NX and read in one script: two requests can never both miss.
 */
export const IDEM_CLAIM = script("idempotency claim", `
local t = redis.call('TYPE', KEYS[1]).ok
if t == 'none' then
  redis.call('HSET', KEYS[1], 'state', 'running', 'token', ARGV[1], 'fp', ARGV[3])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 'OK'
end
if t ~= 'hash' then
  return redis.error_reply('WRONGTYPE idempotency key ' .. KEYS[1] .. ' holds a ' .. t .. ', not a record')
end
local r = redis.call('HMGET', KEYS[1], 'state', 'fp', 'status', 'headers', 'body')
return { r[1] or '', r[2] or '', r[3] or '', r[4] or '', r[5] or '', redis.call('PTTL', KEYS[1]) }
`, 1, isOk);

/**
 * KEYS[1] record, ARGV[1] token, ARGV[2] ttl ms, ARGV[3] state ("done" or
 * "unreplayable"), ARGV[4] status, ARGV[5] headers, ARGV[6] body.
 * 1 when our running claim became the completed record, 0 when the claim is
 * not ours any more (it ran out: a retry may have claimed the key meanwhile).
 */
export const IDEM_COMPLETE = script("idempotency complete", `
local r = redis.call('HMGET', KEYS[1], 'state', 'token')
if r[1] ~= 'running' or r[2] ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'state', ARGV[3], 'status', ARGV[4], 'headers', ARGV[5], 'body', ARGV[6])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
`, 1, isOne);

/**
 * KEYS[1] record, ARGV[1] token, ARGV[2] lease ms. Renews our running claim:
 * 1, or 0 when it is not ours. A record already completed by our own request
 * (the store raced the keeper's round) answers 1 and keeps its ttl.
 */
export const IDEM_EXTEND = script("idempotency extend", `
local r = redis.call('HMGET', KEYS[1], 'state', 'token')
if r[2] ~= ARGV[1] then return 0 end
if r[1] == 'running' then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 1
`);

/** KEYS[1] record, ARGV[1] token. Drops our running claim (a response not stored): 1, or 0 when not ours. */
export const IDEM_RELEASE = script("idempotency release", `
local r = redis.call('HMGET', KEYS[1], 'state', 'token')
if r[1] ~= 'running' or r[2] ~= ARGV[1] then return 0 end
return redis.call('DEL', KEYS[1])
`);
