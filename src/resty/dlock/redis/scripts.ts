// The Redis scripts of locks and semaphores (script.ts says what a script
// is; records.ts has those of idempotency records). They are sent as EVALSHA
// with the SHA1 computed locally, and EVAL once on NOSCRIPT (roundtrip.ts). A
// script touches one lock key and the keys built on it (its waiters' queue,
// its fence counter), all in one Cluster slot.

import * as base from "./script";

export type Script = base.Script;
export type Caller<C, R> = base.Caller<C, R>;
export const hashed = base.hashed;
export const tagged = base.tagged;
export const queueKey = base.queueKey;
export const readersKey = base.readersKey;
export const forTarget = base.forTarget;

// What the scripts of shared locks' readers (rwscripts.ts) are made of too.
const script = base.script;
export const isOk = base.isOk;
export const isOkFenced = base.isOkFenced;
export const isOne = base.isOne;
export const FREES = base.FREES;

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
`, 1, undefined, undefined, FREES);

// Waiting in line, fleet-wide (locks, except under Redlock). Waiters of a key
// take a ticket in its queue, a sorted set next to the lock key: score = when
// the ticket was issued (Redis time, us), member = "<deadline ms> <token>",
// the deadline being when its waiter stops waiting. A release does not just
// free the key: it hands it to the first live ticket's holder for GRANT ms
// (SET key <its token> PX GRANT) and says so on the release channel
// ("g<GRANT> <token>"), so exactly one waiter of the fleet comes for it and
// nobody can cut in. The waiter claims it ("c<ttl>" on the channel: the
// others know the key's new expiry without asking). A waiter that dies holding
// a grant costs GRANT ms; one whose wait ends leaves its ticket behind until
// its deadline, when it is skipped; dead workers' tickets are dropped by crash
// recovery, abandoned ones by DROP. The queue key expires with its last
// deadline, so nothing outlives the waiters.

/**
 * ms a key handed to the first waiter in line stays reserved for it. A woken
 * waiter comes within a round trip; one without a live subscription polls at
 * most every 64 ms (core/retry.ts MAX_BACKOFF).
 */
export const GRANT = 100;

// The queue, the last key.
export const QUEUE = "local Q = KEYS[#KEYS]\n";
// The first live ticket of queue Q, dropping those of waiters that stopped waiting (a ticket
// starts with its deadline, ms): the body of LINE's head() and the set's (multiscripts.ts), `now` set.
export const FIRST_LIVE = `  while true do
    local h = redis.call('ZRANGE', Q, 0, 0)[1]
    if not h then return nil end
    if tonumber(string.match(h, '^(%d+) ')) > now then return h end
    redis.call('ZREM', Q, h)
  end
`;
// The first live ticket of queue Q, and handing the key to it (set over it: a Cluster slot that
// migrates refuses a key deleted in the same script, "non local key"). Redis time is read (clock())
// only when there is a queue, and scripts define these after their uncontended path: the
// three closures cost Redis a fifth of an acquire (redis-benchmark, 7.8 against 6.2 us a
// call), which an uncontended lock never needs.
export const LINE = `local t, now
local function clock()
  t = redis.call('TIME')
  now = t[1] * 1000 + math.floor(t[2] / 1000)
end
local function head()
${FIRST_LIVE}end
local function pass_on()
  local h = head()
  if not h then
    redis.call('DEL', KEYS[1])
    redis.pcall('PUBLISH', '${CHANNEL}' .. KEYS[1], '')
    return 1
  end
  local who = string.match(h, '^%d+ (.*)$')
  redis.call('SET', KEYS[1], who, 'PX', ${GRANT})
  redis.call('ZREM', Q, h)
  redis.pcall('PUBLISH', '${CHANNEL}' .. KEYS[1], 'g${GRANT} ' .. who)
  return who
end
`;

// A waiter back with its ticket (ARGV[4], "<issued> <deadline>") takes its old
// place in line again (`mine`), unless its deadline has passed. After LINE and clock().
export const REJOIN = `local mine
if ARGV[4] ~= '' then
  local issued, deadline = string.match(ARGV[4], '^(%d+) (%d+)$')
  mine = deadline .. ' ' .. ARGV[1]
  -- back in line at its old place, had its turn come and gone while it was away
  if tonumber(deadline) > now and redis.call('ZADD', Q, 'NX', issued, mine) == 1 then
    if redis.call('PTTL', Q) < tonumber(deadline) - now then redis.call('PEXPIRE', Q, tonumber(deadline) - now) end
  end
end
`;

// The reply of an acquire that did not take the key: a waiter without a ticket
// that will wait (ARGV[3] ms) joins the line and gets one; { PTTL of the holder,
// ticket, place in line }. The end of a queued acquire's script.
export const TICKET = `local ticket = ARGV[4]
local wait = tonumber(ARGV[3])
if ticket == '' and wait > 0 then
  local issued = t[1] .. string.format('%06d', t[2])
  ticket = issued .. ' ' .. (now + wait)
  mine = (now + wait) .. ' ' .. ARGV[1]
  redis.call('ZADD', Q, issued, mine)
  if redis.call('PTTL', Q) < wait then redis.call('PEXPIRE', Q, wait) end
end
return { redis.call('PTTL', KEYS[1]), ticket, mine and redis.call('ZRANK', Q, mine) or -1 }
`;

// A waiter that is gone leaves the line: its ticket (the member ending in its
// token, ARGV[1]) is removed; `dropped` says whether it was there. After clock().
export const LEAVE = `local tail = ' ' .. ARGV[1]
local dropped = 0
for _, m in ipairs(redis.call('ZRANGE', Q, 0, -1)) do
  if string.sub(m, -#tail) == tail then
    dropped = redis.call('ZREM', Q, m)
    break
  end
end
`;

// KEYS[1] lock, (KEYS[2] fence counter,) the queue last; ARGV[1] token, ARGV[2]
// ttl ms, ARGV[3] ms the caller will wait (0: take it or leave), ARGV[4] its
// ticket ("<issued> <deadline>", "" before it has one). TAKE is what taking
// the key returns.
function queuedAcquire(take: string): string {
  return QUEUE + `if ARGV[4] == '' and redis.call('EXISTS', Q) == 0 and redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return ${take}  -- nobody in line, and the key free
end
` + LINE + `clock()
` + REJOIN + `local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' then
  return redis.error_reply('WRONGTYPE lock key ' .. KEYS[1] .. ' holds a ' .. redis.call('TYPE', KEYS[1]).ok .. ', not a lock')
end
local take = false
if v == ARGV[1] then
  take = true  -- handed to us by the previous holder
elseif not v then
  local h = head()
  if h == nil or h == mine then take = true else pass_on() end
end
if take then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  if mine then
    redis.call('ZREM', Q, mine)
    redis.pcall('PUBLISH', '${CHANNEL}' .. KEYS[1], 'c' .. ARGV[2])
  end
  return ${take}
end
` + TICKET;
}

/**
 * Locks that queue (see above). Returns "OK" when taken; else { PTTL of the
 * holder (-1: no TTL), ticket, place } where the ticket ("" when not waiting)
 * is what the caller sends back with its next attempt, and place is how many
 * wait ahead of it (-1 without a ticket).
 */
export const ACQUIRE_QUEUED = script("acquire", queuedAcquire("'OK'"), 2, isOk, ACQUIRE);

/** As ACQUIRE_QUEUED, with KEYS[2] the fence counter (the queue KEYS[3]): { "OK", fence } when taken. */
export const ACQUIRE_QUEUED_FENCED = script("acquire", queuedAcquire("{ 'OK', redis.call('INCR', KEYS[2]) }"), 3, isOkFenced,
  ACQUIRE_FENCED);

/**
 * KEYS[1] lock key, KEYS[2] queue, ARGV[1] token. When deleted: the token of
 * the first waiter in line, handed the key, or 1 with nobody in line (then
 * nobody is told: waiters are in line); 0 when the key is not ours.
 */
export const RELEASE_QUEUED = script("release", QUEUE + `if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if redis.call('EXISTS', Q) == 0 then return redis.call('DEL', KEYS[1]) end
` + LINE + `clock()
return pass_on()
`, 2, undefined, RELEASE, FREES);

/**
 * KEYS[1] lock key, Q queue, ARGV[1] token: a waiter that is gone (gave
 * up, killed, its worker dead) or an acquire whose reply was lost. Its ticket
 * leaves the queue, and a key handed (or taken) by it is passed on: 1 or the
 * next waiter's token then (as RELEASE_QUEUED), else 0.
 */
export const DROP = script("drop", QUEUE + LINE + `clock()
` + LEAVE + `if redis.call('GET', KEYS[1]) == ARGV[1] then
  return pass_on()
end
return dropped
`, 2, undefined, RELEASE, FREES);

/** KEYS[1] lock key, ARGV[1] token, ARGV[2] ttl ms. 1 when extended, 0 when not ours. */
export const EXTEND = script("extend", `
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
`, 1, isOne, undefined, FREES);

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
`, 1, undefined, undefined, FREES);

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
`, 1, isOne, undefined, FREES);

// What takes back each acquire whose caller is gone before its reply came:
// the release (the drop for a lock that queues: it also leaves the line and
// passes on a key handed to it).
ACQUIRE.undo = RELEASE;
ACQUIRE_FENCED.undo = RELEASE;
ACQUIRE_QUEUED.undo = DROP;
ACQUIRE_QUEUED_FENCED.undo = DROP;
SEM_ACQUIRE.undo = SEM_RELEASE;
export { script, NOW }; // by name: this module uses them as locals
