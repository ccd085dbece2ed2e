// Shared locks: the scripts of readers (acquire(key, { shared = true })). A
// writer is a plain lock and runs the plain lock's scripts (scripts.ts): this
// module only teaches readers to live beside it. The layout:
//
//   <key>           the lock key, a plain string as ever. A writer holds it with
//                   its token; while readers hold it, it holds MARK, a value no
//                   token equals, with PX = the latest reader's expiry. Either
//                   way SET NX fails on it: node-redlock's (or any client's) lock
//                   on the same key and ours exclude each other both ways, and a
//                   writer's script sees "busy" without knowing readers exist.
//   <key>:readers   a sorted set: member = a reader's token, score = when its
//                   lease ends (Redis time, ms); expires with its last member.
//                   Only meaningful while <key> holds MARK: a reader that finds
//                   the key free clears it first, so a key deleted from under
//                   its readers (by hand, FLUSHDB) brings none of them back.
//   <key>:queue     the line of waiters, readers and writers together
//                   (scripts.ts). A reader's token starts with "r~" (no token
//                   of ours does otherwise: random tokens are hex, worker tokens
//                   start with a host name), so a ticket says which it is, and a
//                   writer's release can hand the key to a reader by token like
//                   to anyone (the reader turns the key into MARK when it comes).
//
// Under Cluster all three share one slot (hash tags, as queueKey places them).
//
// Rules (why no writer starves): a reader takes when no writer holds the key
// and no live writer ticket was issued before its own (before everyone, for a
// reader without a ticket): readers arriving while a writer waits queue
// behind it. A writer takes (scripts.ts, unchanged) when the key is free and
// it is first in line; readers keep the key from it. The last reader to leave
// (release, drop) hands the key on as RELEASE_QUEUED does; readers at the head
// of the line, whoever lets them in, go in together: each is reserved a place
// among the readers for GRANT ms and told by name ("g" on the release
// channel, as a handed key), so one wake-up per reader, no herd.

import * as scripts from "./scripts";

const script = scripts.script;
const GRANT = scripts.GRANT;
const CHANNEL = scripts.CHANNEL;

/** What the lock key holds while readers hold it: no token equals it (tokens have no "!"). */
export const MARK = "dlock!shared";
/** What starts every reader's token. */
export const READER = "r~";

// The readers' helpers, after scripts.LINE (clock(), head(), pass_on()), with R the readers' set.
const READERS = `local R = KEYS[2]
local MARK = '${MARK}'
local function is_reader(m) return string.match(m, '^%d+ r~') ~= nil end
-- Expired readers out; the lock key and the set expire with the latest reader
-- left. False (and the set gone) when none is left: then the caller frees the key.
-- The set's expiry is set first: PEXPIREAT of a time Redis's clock has reached
-- deletes at once, and should the clock cross that ms between the two, the key
-- must go with the set, never stay MARK without its readers.
local function sync()
  redis.call('ZREMRANGEBYSCORE', R, '-inf', now)
  local last = redis.call('ZRANGE', R, -1, -1, 'WITHSCORES')
  if not last[1] then
    redis.call('DEL', R)
    return false
  end
  redis.call('PEXPIREAT', R, last[2])
  redis.call('PEXPIREAT', KEYS[1], last[2])
  return true
end
-- A reader (token; live: its place has not run out) leaves: true when live
-- readers remain (synced), false when none does (the set gone). The others are
-- counted before it leaves: a set the script emptied cannot be touched again
-- in a Cluster slot that migrates ("non local key").
local function step_out(token, live)
  local others = #redis.call('ZRANGE', R, '(' .. now, '+inf', 'BYSCORE', 'LIMIT', 0, 2)
  if live then others = others - 1 end
  if others <= 0 then
    redis.call('DEL', R)
    return false
  end
  redis.call('ZREM', R, token)
  return sync()
end
-- The readers at the head of the line go in together: a place reserved for
-- GRANT ms each, and word by name. The caller makes the key MARK and syncs.
local function admit()
  local n = 0
  while true do
    local h = head()
    if not h or not is_reader(h) then return n end
    local who = string.match(h, '^%d+ (.*)$')
    redis.call('ZREM', Q, h)
    redis.call('ZADD', R, now + ${GRANT}, who)
    redis.pcall('PUBLISH', '${CHANNEL}' .. KEYS[1], 'g${GRANT} ' .. who)
    n = n + 1
  end
end
-- The last reader left (the set gone): the key to the readers at the head of
-- the line, or as RELEASE_QUEUED hands it on (1, or the token it went to). The
-- key is not deleted first: a Cluster slot migrating refuses a key the script
-- deleted ("non local key"); readers let in then still are (rare: they queue
-- behind a writer).
local function hand_on()
  if admit() > 0 then
    redis.call('SET', KEYS[1], MARK)
    sync()
    return 1
  end
  return pass_on()
end
`;

// KEYS[1] lock, KEYS[2] readers, (KEYS[3] fence counter,) the queue last;
// ARGV as the lock's acquire (scripts.ts queuedAcquire): token, ttl ms, ms the
// caller will wait, its ticket. TAKE is what taking the key returns.
function readAcquire(take: string): string {
  return scripts.QUEUE + scripts.LINE + READERS + `clock()
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' then
  return redis.error_reply('WRONGTYPE lock key ' .. KEYS[1] .. ' holds a ' .. redis.call('TYPE', KEYS[1]).ok .. ', not a lock')
end
` + scripts.REJOIN + `-- MARK with no live reader left (a reservation ran out): the key is free.
-- A free key has no readers: whatever the set still holds is stale.
if v == MARK and not sync() then
  redis.call('DEL', KEYS[1])
  v = false
elseif not v then
  redis.call('DEL', R)
end
local take = false
if v == ARGV[1] then
  take = true  -- handed to us by the previous holder
elseif v == MARK and redis.call('ZSCORE', R, ARGV[1]) then
  take = true  -- let in with the readers at the head of the line
elseif not v or v == MARK then
  -- no writer holds it: ours unless a live writer's ticket came before ours
  take = true
  for _, m in ipairs(redis.call('ZRANGE', Q, 0, -1)) do
    if m == mine then break end
    if not is_reader(m) and tonumber(string.match(m, '^(%d+) ')) > now then
      take = false
      break
    end
  end
end
if take then
  if v ~= MARK then
    if v then redis.call('DEL', R) end
    redis.call('SET', KEYS[1], MARK)
  end
  redis.call('ZADD', R, now + tonumber(ARGV[2]), ARGV[1])
  if mine then redis.call('ZREM', Q, mine) end
  admit()  -- readers right behind us come along
  sync()
  if mine then redis.pcall('PUBLISH', '${CHANNEL}' .. KEYS[1], 'c' .. redis.call('PTTL', KEYS[1])) end
  return ${take}
end
if not v or v == MARK then
  -- Not ours to take: a writer waits before us. Readers ahead of it go in now;
  -- a free key goes to the writer at the head.
  local h = head()
  if h and h ~= mine then
    if is_reader(h) then
      admit()
      if not v then redis.call('SET', KEYS[1], MARK) end
      sync()
    elseif not v then
      pass_on()
    end
  end
end
` + scripts.TICKET;
}

/**
 * A reader's acquire (KEYS[1] lock, KEYS[2] readers, KEYS[3] queue; ARGV
 * token, ttl, wait, ticket). Replies as scripts.ACQUIRE_QUEUED. No `alone`
 * form: without its readers a reader cannot take anything (under a Cluster
 * slot migration, TRYAGAIN is retried while the wait allows).
 */
export const READ_ACQUIRE = script("shared acquire", readAcquire("'OK'"), 3, scripts.isOk);

/** As READ_ACQUIRE, with KEYS[3] the fence counter (the queue KEYS[4]): { "OK", fence } when taken. */
export const READ_ACQUIRE_FENCED = script("shared acquire", readAcquire("{ 'OK', redis.call('INCR', KEYS[3]) }"), 4,
  scripts.isOkFenced);

// The readers' scripts on the lock key and its readers alone (KEYS[1], KEYS[2]):
// a Cluster slot migrating (script.ts `alone`). A key freed wakes every waiter,
// who take turns meanwhile. In a migrating slot a key the script deleted cannot
// be touched again ("non local key"): leave() counts the readers left first
// (two live ones at most: beside ours, one more is enough; ZRANGE, which the
// README's least-privilege ACL rule allows, where ZCOUNT is not in it).
const ALONE = "local R = KEYS[2]\n" + scripts.NOW + `local function leave()
  local others = #redis.call('ZRANGE', R, '(' .. now, '+inf', 'BYSCORE', 'LIMIT', 0, 2)
  local exp = redis.call('ZSCORE', R, ARGV[1])
  if exp and tonumber(exp) > now then others = others - 1 end
  if others <= 0 then
    redis.call('DEL', R, KEYS[1])
    redis.pcall('PUBLISH', '${CHANNEL}' .. KEYS[1], '')
    return
  end
  redis.call('ZREM', R, ARGV[1])
  redis.call('ZREMRANGEBYSCORE', R, '-inf', now)
  local last = redis.call('ZRANGE', R, -1, -1, 'WITHSCORES')
  redis.call('PEXPIREAT', R, last[2])
  redis.call('PEXPIREAT', KEYS[1], last[2])
end
local v = redis.call('GET', KEYS[1])
`;

const READ_RELEASE_ALONE = script("shared release", ALONE + `if v ~= '${MARK}' then return 0 end
local exp = redis.call('ZSCORE', R, ARGV[1])
leave()
return (exp and tonumber(exp) > now) and 1 or 0
`, 2, undefined, undefined, scripts.FREES);

const READ_DROP_ALONE = script("shared drop", ALONE + `if v == ARGV[1] then
  redis.call('DEL', R, KEYS[1])
  redis.pcall('PUBLISH', '${CHANNEL}' .. KEYS[1], '')
  return 1
end
if v == '${MARK}' and redis.call('ZSCORE', R, ARGV[1]) then
  leave()
  return 1
end
return 0
`, 2, undefined, undefined, scripts.FREES);

/**
 * KEYS[1] lock, KEYS[2] readers, KEYS[3] queue; ARGV[1] token. 1 when our live
 * reader's place was given back; the last reader out hands the key on (then
 * the token of the writer it went to, as RELEASE_QUEUED); 0 when not ours (or
 * run out: then it is only tidied away). A MARK left with no live reader, ours
 * or not, is freed: a writer would otherwise find the key busy until it expires.
 */
export const READ_RELEASE = script("shared release", scripts.QUEUE + scripts.LINE + READERS + `clock()
if redis.call('GET', KEYS[1]) ~= MARK then return 0 end
local exp = redis.call('ZSCORE', R, ARGV[1])
local live = exp ~= false and tonumber(exp) > now
if step_out(ARGV[1], live) then return live and 1 or 0 end
if redis.call('EXISTS', Q) == 0 then
  redis.call('DEL', KEYS[1])
  return live and 1 or 0
end
local r = hand_on()
if live then return r end
return 0
`, 3, undefined, READ_RELEASE_ALONE, scripts.FREES);

const EXTEND = `local R = KEYS[2]
if redis.call('GET', KEYS[1]) ~= '${MARK}' then return 0 end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local exp = redis.call('ZSCORE', R, ARGV[1])
if not exp or tonumber(exp) <= now then
  redis.call('ZREM', R, ARGV[1])
  return 0
end
redis.call('ZADD', R, 'XX', now + tonumber(ARGV[2]), ARGV[1])
local last = redis.call('ZRANGE', R, -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', R, last[2])
redis.call('PEXPIREAT', KEYS[1], last[2])
return 1
`;

/**
 * KEYS[1] lock, KEYS[2] readers, KEYS[3] queue; ARGV[1] token, ARGV[2] ttl ms.
 * 1 when our live reader's lease now ends ttl ms from now (the key follows the
 * latest reader), else 0. KEYS[3] is not read: the form without it is the same script.
 */
export const READ_EXTEND = script("shared extend", EXTEND, 3, scripts.isOne,
  script("shared extend", EXTEND, 2, scripts.isOne, undefined, scripts.FREES), scripts.FREES);

/**
 * KEYS[1] lock, KEYS[2] readers, KEYS[3] queue; ARGV[1] token: a reader that
 * is gone (gave up, its reply lost). Its ticket leaves the line; a key handed
 * to it, or its place among the readers (taken or reserved), is given back,
 * the last reader's handing the key on. Replies as scripts.DROP.
 */
export const READ_DROP = script("shared drop", scripts.QUEUE + scripts.LINE + READERS + `clock()
` + scripts.LEAVE + `local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('DEL', R)
  return hand_on()
end
local exp = v == MARK and redis.call('ZSCORE', R, ARGV[1])
if exp then
  if step_out(ARGV[1], tonumber(exp) > now) then return 1 end
  return hand_on()
end
return dropped
`, 3, undefined, READ_DROP_ALONE, scripts.FREES);

READ_ACQUIRE.undo = READ_DROP;
READ_ACQUIRE_FENCED.undo = READ_DROP;
