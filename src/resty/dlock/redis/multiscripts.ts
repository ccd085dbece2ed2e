// The script that takes several lock keys at once, all or nothing
// (locks:acquire_all, core/multi.ts). The keys stay what a single lock's key
// is: a plain string holding the token, with a PX expiry, so a set's holder
// excludes single-key holders (and node-redlock's multi-resource locks, which
// SET the same shape) key by key, and is released, extended and recovered key
// by key with the single-key scripts (scripts.ts).
//
// Keys a script touches must share a Cluster slot: the caller runs it once for
// the whole set where they do (standalone, Sentinel, a Cluster slot by hash
// tags), else once per key, in sorted order (core/multi.ts).

import * as scripts from "./scripts";

const script = scripts.script;
const CHANNEL = scripts.CHANNEL;
const GRANT = scripts.GRANT;
const lua_type = type;
const lua_pairs = pairs;

/** The script's reply when every key was taken: "OK", or { "OK", fence1, ..., fenceN } when fenced. */
function took(this: void, reply: RedisValue): boolean {
  return reply === "OK" || (lua_type(reply) === "table" && (reply as LuaTable<number, unknown>).get(1) === "OK");
}

// KEYS: the n lock keys, (their n fence counters,) their n waiters' queues
// (none under Redlock, whose locks do not queue).
// ARGV[1] token, ARGV[2] ttl ms, ARGV[3] n. A key is free for the set when it
// is missing and nobody waits in its line, or when it already holds our token
// (handed to us in line: core/multi.ts waits for one key at a time). A free
// key with a live line is handed to the line's first waiter, as a single
// lock's acquire does (scripts.ts LINE): a set never cuts in. Returns "OK"
// (or { "OK", fences... }) with every key set, else { i, pttl } for the first
// key that is not free, and nothing was written but that hand-over.
const BODY = `local n = tonumber(ARGV[3])
local per = #KEYS / n
local fenced = per == 3
local qat = per > 1 and #KEYS - n
local t, now
local function head(Q)
  if not now then
    t = redis.call('TIME')
    now = t[1] * 1000 + math.floor(t[2] / 1000)
  end
${scripts.FIRST_LIVE}end
for i = 1, n do
  local k = KEYS[i]
  local v = redis.pcall('GET', k)
  if type(v) == 'table' then
    return redis.error_reply('WRONGTYPE lock key ' .. k .. ' holds a ' .. redis.call('TYPE', k).ok .. ', not a lock')
  end
  if v and v ~= ARGV[1] then return { i, redis.call('PTTL', k) } end
  local Q = qat and KEYS[qat + i]
  if not v and Q and redis.call('EXISTS', Q) == 1 then
    local h = head(Q)
    if h then
      local who = string.match(h, '^%d+ (.*)$')
      redis.call('ZREM', Q, h)
      if who ~= ARGV[1] then
        redis.call('SET', k, who, 'PX', ${GRANT})
        redis.pcall('PUBLISH', '${CHANNEL}' .. k, 'g${GRANT} ' .. who)
        return { i, ${GRANT} }
      end
    end
  end
end
local out = { 'OK' }
for i = 1, n do
  redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2])
  if fenced then out[i + 1] = redis.call('INCR', KEYS[n + i]) end
end
if fenced then return out end
return 'OK'
`;

/** Scripts by key count: the source is one, Redis is told how many of the arguments are keys. */
const bySize = new LuaTable<number, scripts.Script>();

/**
 * The acquire of n lock keys, with (fenced) or without fence counters: KEYS
 * as above, `per` keys per lock key (1: the key alone; 2: key and queue; 3:
 * key, fence, queue).
 * No `undo`: pipeline.ts takes back a gone caller's acquire by its first key
 * alone; a set whose caller left before the reply came expires by its ttl.
 */
export function acquire(n: number, per: number): scripts.Script {
  const size = n * per;
  let s = bySize.get(size * 4 + per);
  if (s === undefined) {
    s = script("acquire_all", BODY, size, took);
    bySize.set(size * 4 + per, s);
  }
  return s;
}

/** A busy reply: the index (1-based, in the order sent) of the first key not free, and its holder's PTTL (nil: no TTL). */
export function busy(reply: RedisValue): LuaMultiReturn<[number | undefined, number | undefined]> {
  if (lua_type(reply) !== "table") return $multi(undefined, undefined);
  const r = reply as LuaTable<number, unknown>;
  const i = r.get(1);
  const pttl = r.get(2);
  if (lua_type(i) !== "number") return $multi(undefined, undefined);
  return $multi(i as number, lua_type(pttl) === "number" && (pttl as number) >= 0 ? pttl as number : undefined);
}

/** The fence of key i (1-based) in a fenced "OK" reply. */
export function fenceOf(reply: RedisValue, i: number): number | undefined {
  if (lua_type(reply) !== "table") return undefined;
  const f = (reply as LuaTable<number, unknown>).get(i + 1);
  return lua_type(f) === "number" ? f as number : undefined;
}

function anyOne(this: void, reply: RedisValue): boolean {
  if (lua_type(reply) !== "table") return false;
  for (const [_, v] of lua_pairs(reply as LuaTable<number, unknown>)) if (v === 1) return true;
  return false;
}

// KEYS: the n lock keys of a set, their n queues; ARGV[1] token. Per key, as
// the single lock's release (scripts.ts RELEASE_QUEUED) answers: 0 when not
// ours; when deleted, the token of the first waiter in line, handed the key,
// or 1 with nobody in line.
const RELEASE_BODY = `local n = #KEYS / 2
local t, now
local out = {}
for i = 1, n do
  local k, Q = KEYS[i], KEYS[n + i]
  if redis.call('GET', k) ~= ARGV[1] then
    out[i] = 0
  else
    out[i] = 1
    if redis.call('EXISTS', Q) == 0 then
      redis.call('DEL', k)
    else
      if not now then
        t = redis.call('TIME')
        now = t[1] * 1000 + math.floor(t[2] / 1000)
      end
      local h
      while true do
        h = redis.call('ZRANGE', Q, 0, 0)[1]
        if not h or tonumber(string.match(h, '^(%d+) ')) > now then break end
        redis.call('ZREM', Q, h)
      end
      if h then
        local who = string.match(h, '^%d+ (.*)$')
        redis.call('SET', k, who, 'PX', ${GRANT})
        redis.call('ZREM', Q, h)
        redis.pcall('PUBLISH', '${CHANNEL}' .. k, 'g${GRANT} ' .. who)
        out[i] = who
      else
        redis.call('DEL', k)
        redis.pcall('PUBLISH', '${CHANNEL}' .. k, '')
      end
    end
  end
end
return out
`;

// RELEASE_BODY without the queues (KEYS the n lock keys): a Cluster slot
// migrating (script.ts `alone`). As scripts.ts RELEASE: 1 when deleted, and
// every waiter woken, who take turns meanwhile; 0 when not ours.
const RELEASE_ALONE_BODY = `local out = {}
for i = 1, #KEYS do
  out[i] = 0
  if redis.call('GET', KEYS[i]) == ARGV[1] then
    redis.call('DEL', KEYS[i])
    redis.pcall('PUBLISH', '${CHANNEL}' .. KEYS[i], '')
    out[i] = 1
  end
end
return out
`;

// KEYS: the n lock keys of a set; ARGV[1] token, ARGV[2] ms. Per key 1 when
// extended, 0 when not ours (scripts.ts EXTEND).
const EXTEND_BODY = `local out = {}
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[1] then
    out[i] = redis.call('PEXPIRE', KEYS[i], ARGV[2])
  else
    out[i] = 0
  end
end
return out
`;

const releases = new LuaTable<number, scripts.Script>();
const extends_ = new LuaTable<number, scripts.Script>();

/** The release of a set of n keys whose keys share a call: KEYS the keys then their queues, ARGV[1] the token; a reply per key. */
export function release(n: number): scripts.Script {
  let s = releases.get(n);
  if (s === undefined) {
    const alone = script("release_all", RELEASE_ALONE_BODY, n, undefined, undefined, scripts.FREES);
    s = script("release_all", RELEASE_BODY, 2 * n, undefined, alone, scripts.FREES);
    releases.set(n, s);
  }
  return s;
}

/** The extend of a set of n keys whose keys share a call: KEYS the keys, ARGV[1] the token, ARGV[2] ms; a reply per key. */
export function extend(n: number): scripts.Script {
  let s = extends_.get(n);
  if (s === undefined) {
    s = script("extend_all", EXTEND_BODY, n, anyOne, undefined, scripts.FREES);
    extends_.set(n, s);
  }
  return s;
}
