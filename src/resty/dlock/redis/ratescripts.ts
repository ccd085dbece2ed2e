// The GCRA scripts of rate limits (core/rate.ts): one for any number of
// limits, and the same for one limit, the usual case, written without the
// tables the general one builds per call (fields, per-limit arrays, the HSET
// list): Redis runs it in about two thirds of the time. Both keep the same
// hash (field "1" for a lone limit) and answer the same reply, so a limiter
// whose limits change from one to several finds its clients' state as it was.
//
// KEYS[1] the key's hash; ARGV[1] mode ("1" decide and charge, "0" decide
// only, "-1" give back), ARGV[2] cost, then per limit: interval (us) and burst.
// Reply: { outcome, retry ms, then per limit: remaining, ms until full }, where
// outcome is 1 admitted and charged, 2 admitted (nothing written: mode "0" or
// "-1"), 0 refused. Remaining and ms until full describe the state after the
// decision (as if charged, for mode "0"). A limit is over when the request
// would put the client more than 1 us beyond burst * interval ahead: the us
// absorbs the rounding of the doubles, never a request.
//
// A TAT is written with %d when it is a whole number of us (an interval of
// whole us, the usual case: 60000 ms / 100 is 600000 us), else with 17
// digits so that it reads back exactly: glibc formats a double with %.17g in
// about 1 us of the 10 a decision costs Redis, an integer in a tenth of that.

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
local tats = redis.call('HMGET', KEYS[1], unpack(fields))
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
    redis.call('HSET', KEYS[1], unpack(set))
    redis.call('PEXPIRE', KEYS[1], math.ceil(far / 1000))
  end
end
local out = { 0, math.ceil(over / 1000) }
if ok then out[1] = (write and mode == '1') and 1 or 2 end
for i = 1, n do
  local d = (ok and nxt[i] or base[i]) - now
  local r = math.floor((cap[i] - d) / iv[i] + 0.000001)
  if r < 0 then r = 0 end
  out[#out + 1] = r
  out[#out + 1] = math.ceil(d / 1000)
end
return out
`;

const ONE = `local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local mode = ARGV[1]
local cost = tonumber(ARGV[2])
local iv = tonumber(ARGV[3])
local cap = tonumber(ARGV[4]) * iv
local tat = tonumber(redis.call('HGET', KEYS[1], '1')) or now
if tat < now then tat = now end
local nxt, over = tat + cost * iv, 0
if mode == '-1' then
  nxt = tat - cost * iv
  if nxt < now then nxt = now end
else
  local o = nxt - now - cap
  if o > 1 then over = o end
end
local ok = over == 0
local write = (ok and mode == '1') or mode == '-1'
if write then
  if nxt <= now then
    redis.call('DEL', KEYS[1])
  else
    redis.call('HSET', KEYS[1], '1', string.format(nxt % 1 == 0 and '%d' or '%.17g', nxt))
    redis.call('PEXPIRE', KEYS[1], math.ceil((nxt - now) / 1000))
  end
end
local d = (ok and nxt or tat) - now
local r = math.floor((cap - d) / iv + 0.000001)
if r < 0 then r = 0 end
return { ok and (write and mode == '1' and 1 or 2) or 0, math.ceil(over / 1000), r, math.ceil(d / 1000) }
`;

function isCharged(this: void, reply: RedisValue): boolean {
  return lua_type(reply) === "table" && (reply as LuaTable<number, unknown>).get(1) === 1;
}

/** The GCRA script for any number of limits: its charged answers are writes that WAIT for replicas (redis.replicas). */
export const RATE: scripts.Script = script.script("rate", MANY, 1, isCharged);

/** The same for one limit (ARGV[3], ARGV[4] its interval and burst). */
export const RATE_ONE: scripts.Script = script.script("rate", ONE, 1, isCharged);
