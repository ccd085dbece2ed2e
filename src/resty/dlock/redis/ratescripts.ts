// The GCRA scripts of rate limits (core/rate.ts): one for any number of
// limits, and one for a single limit, the usual case, which Redis runs in
// about two thirds of the time of the general one (redis-benchmark, one limit,
// fresh keys: 6 to 7 us against 9 to 11 in INFO commandstats).
//
// The general script (RATE). KEYS[1] the key's hash, field i limit i's TAT
// (theoretical arrival time, Redis' TIME in us); ARGV[1] mode ("1" decide and
// charge, "0" decide only, "-1" give back), ARGV[2] cost, then per limit:
// interval (us) and burst. Reply: { outcome, retry ms, then per limit:
// remaining, ms until full }, where outcome is 1 admitted and charged, 2
// admitted (nothing written: mode "0" or "-1"), 0 refused. Remaining and ms
// until full describe the state after the decision (as if charged, for mode
// "0"). A limit is over when the request would put the client more than 1 us
// beyond burst * interval ahead: the us absorbs the rounding of the doubles,
// never a request. A TAT is written with %d when it is a whole number of us
// (an interval of whole us, the usual case: 60000 ms / 100 is 600000 us), else
// with 17 digits so that it reads back exactly: glibc formats a double with
// %.17g in about 1 us of the 10 a decision costs Redis, an integer in a tenth.
//
// The one-limit script (RATE_ONE) keeps its TAT in the key's expiry instead:
// a plain string that expires at the TAT rounded up to the ms and holds the
// us the TAT lies before that. PTTL then tells how far ahead of Redis' clock
// the client is, without TIME (2 us of Redis' time), a hash, a formatted
// double, nor a PEXPIRE of its own (SET PX); and it answers one integer,
// 4 * (us ahead, rounded up) + outcome, which core/rate.ts turns into the
// general script's reply (a reply table cost Redis another 1 to 2 us). Its
// clock is Redis' ms (PTTL counts from the current ms): a span of e ms
// admits at most burst + rate * (e + 1) / period; the TAT itself is kept as
// exactly as the general script keeps it (the us before the expiry written
// the same way: %d when whole, else 17 digits; "0" without a format when the
// TAT falls on a ms, as it always does for an interval of whole ms: a tenth
// of the script's time in Redis, 4.57 against 5.10 us per call in
// redis-benchmark -P 16, ten alternations). Each script reads the other's state, so a limiter
// whose limits change from one to several (or back) finds its clients' state
// as it was: the general one reads the string's PEXPIRETIME, the one-limit
// one a hash's field "1" on Redis' TIME.

import type * as scripts from "./scripts";
import * as script from "./script";

const lua_type = type;

const MANY = `local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local mode = ARGV[1]
local cost = tonumber(ARGV[2])
local n = (#ARGV - 2) / 2
local fields = {}
for i = 1, n do fields[i] = i end
local tats = redis.pcall('HMGET', KEYS[1], unpack(fields))
local str = tats.err ~= nil
if str then
  local e = redis.call('PEXPIRETIME', KEYS[1])
  tats = { e > 0 and e * 1000 - (tonumber(redis.call('GET', KEYS[1])) or 0) or false }
end
local iv, cap, base, nxt = {}, {}, {}, {}
local over = 0
for i = 1, n do
  iv[i] = tonumber(ARGV[1 + 2 * i])
  cap[i] = tonumber(ARGV[2 + 2 * i]) * iv[i]
  local tat = tonumber(tats[i]) or now
  if tat < now then tat = now end
  base[i] = tat
  if mode == '-1' then
    local b = tat - cost * iv[i]
    if b < now then b = now end
    nxt[i] = b
  else
    nxt[i] = tat + cost * iv[i]
    local o = nxt[i] - now - cap[i]
    if o > 1 and o > over then over = o end
  end
end
local ok = over == 0
local write = (ok and mode == '1') or mode == '-1'
if write then
  local set, far = {}, 0
  for i = 1, n do
    set[2 * i - 1] = i
    set[2 * i] = string.format(nxt[i] % 1 == 0 and '%d' or '%.17g', nxt[i])
    if nxt[i] - now > far then far = nxt[i] - now end
  end
  if far <= 0 then
    redis.call('DEL', KEYS[1])
  else
    if str then redis.call('DEL', KEYS[1]) end
    redis.call('HSET', KEYS[1], unpack(set))
    redis.call('PEXPIRE', KEYS[1], math.ceil(far / 1000))
  end
end
local out = { 0, math.ceil(over / 1000) }
if ok then out[1] = (write and mode == '1') and 1 or 2 end
for i = 1, n do
  local d = (ok and nxt[i] or base[i]) - now
  local r = math.floor((cap[i] - d + 1) / iv[i] + 0.000000001)
  if r < 0 then r = 0 end
  out[#out + 1] = r
  out[#out + 1] = math.ceil(d / 1000)
end
return out
`;

const ONE = `local mode = ARGV[1]
local iv = tonumber(ARGV[3])
local step = tonumber(ARGV[2]) * iv
local cap = tonumber(ARGV[4]) * iv
local d = redis.call('PTTL', KEYS[1])
if d == -2 then
  d = 0
else
  local v = redis.pcall('GET', KEYS[1])
  if type(v) == 'table' then
    local t = redis.call('TIME')
    local now = t[1] * 1000000 + t[2]
    d = (tonumber(redis.call('HGET', KEYS[1], '1')) or now) - now
  else
    d = d * 1000 - (tonumber(v) or 0)
  end
  if d < 0 then d = 0 end
end
local nxt, out = d + step, 1
if mode == '-1' then
  nxt, out = d - step, 2
  if nxt < 0 then nxt = 0 end
elseif nxt - cap > 1 then
  return math.ceil(d) * 4
elseif mode ~= '1' then
  return math.ceil(nxt) * 4 + 2
end
if nxt <= 0 then
  redis.call('DEL', KEYS[1])
else
  local ms = math.ceil(nxt / 1000)
  local rem = ms * 1000 - nxt
  redis.call('SET', KEYS[1], rem == 0 and '0' or string.format(rem % 1 == 0 and '%d' or '%.17g', rem), 'PX', ms)
end
return math.ceil(nxt) * 4 + out
`;

function isCharged(this: void, reply: RedisValue): boolean {
  return lua_type(reply) === "table" && (reply as LuaTable<number, unknown>).get(1) === 1;
}

function isChargedOne(this: void, reply: RedisValue): boolean {
  return lua_type(reply) === "number" && (reply as number) % 4 === 1;
}

/** The GCRA script for any number of limits: its charged answers are writes that WAIT for replicas (redis.replicas). */
export const RATE: scripts.Script = script.script("rate", MANY, 1, isCharged);

/** One limit (ARGV[3], ARGV[4] its interval and burst), answering 4 * us ahead + outcome. */
export const RATE_ONE: scripts.Script = script.script("rate", ONE, 1, isChargedOne);

// The same scripts for giving back (mode "-1", uncommit and a guard's
// give-back): declared allow-oom, as a lock's release is, or a Redis out of
// memory would keep every charge taken before it filled up. A give-back
// rewrites a key in place or deletes it: it never grows Redis.

/** RATE, giving back. */
export const RATE_BACK: scripts.Script = script.script("rate_back", MANY, 1, undefined, undefined, script.FREES);

/** RATE_ONE, giving back. */
export const RATE_ONE_BACK: scripts.Script = script.script("rate_back", ONE, 1, undefined, undefined, script.FREES);
