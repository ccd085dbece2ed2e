-- Generated from src/resty/dlock/redis/ratescripts.ts by TypeScriptToLua: edit that file, not this one.
-- The GCRA scripts of rate limits (core/rate.lua): one for any number of
-- limits, and one for a single limit, the usual case, which Redis runs in
-- about two thirds of the time of the general one (redis-benchmark, one limit,
-- fresh keys: 6 to 7 us against 9 to 11 in INFO commandstats).
--
-- The general script (RATE). KEYS[1] the key's hash, field i limit i's TAT
-- (theoretical arrival time, Redis' TIME in us); ARGV[1] mode ("1" decide and
-- charge, "0" decide only, "-1" give back), ARGV[2] cost, then per limit:
-- interval (us) and burst. Reply: { outcome, retry ms, then per limit:
-- remaining, ms until full }, where outcome is 1 admitted and charged, 2
-- admitted (nothing written: mode "0" or "-1"), 0 refused. Remaining and ms
-- until full describe the state after the decision (as if charged, for mode
-- "0"). A limit is over when the request would put the client more than 1 us
-- beyond burst * interval ahead: the us absorbs the rounding of the doubles,
-- never a request. A TAT is written with %d when it is a whole number of us
-- (an interval of whole us, the usual case: 60000 ms / 100 is 600000 us), else
-- with 17 digits so that it reads back exactly: glibc formats a double with
-- %.17g in about 1 us of the 10 a decision costs Redis, an integer in a tenth.
--
-- The one-limit script (RATE_ONE) keeps its TAT in the key's expiry instead:
-- a plain string that expires at the TAT rounded up to the ms and holds the
-- us the TAT lies before that. PTTL then tells how far ahead of Redis' clock
-- the client is, without TIME (2 us of Redis' time), a hash, a formatted
-- double, nor a PEXPIRE of its own (SET PX); and it answers one integer,
-- 4 * (us ahead, rounded up) + outcome, which core/rate.lua turns into the
-- general script's reply (a reply table cost Redis another 1 to 2 us). Its
-- clock is Redis' ms (PTTL counts from the current ms): a span of e ms
-- admits at most burst + rate * (e + 1) / period; the TAT itself is kept as
-- exactly as the general script keeps it (the us before the expiry written
-- the same way: %d when whole, else 17 digits; "0" without a format when the
-- TAT falls on a ms, as it always does for an interval of whole ms: a tenth
-- of the script's time in Redis, 4.57 against 5.10 us per call in
-- redis-benchmark -P 16, ten alternations). Each script reads the other's state, so a limiter
-- whose limits change from one to several (or back) finds its clients' state
-- as it was: the general one reads the string's PEXPIRETIME, the one-limit
-- one a hash's field "1" on Redis' TIME.
local _M = {}
local script = require("resty.dlock.redis.script")
local lua_type = type
local MANY = "local t = redis.call('TIME')\nlocal now = t[1] * 1000000 + t[2]\nlocal mode = ARGV[1]\nlocal cost = tonumber(ARGV[2])\nlocal n = (#ARGV - 2) / 2\nlocal fields = {}\nfor i = 1, n do fields[i] = i end\nlocal tats = redis.pcall('HMGET', KEYS[1], unpack(fields))\nlocal str = tats.err ~= nil\nif str then\n  local e = redis.call('PEXPIRETIME', KEYS[1])\n  tats = { e > 0 and e * 1000 - (tonumber(redis.call('GET', KEYS[1])) or 0) or false }\nend\nlocal iv, cap, base, nxt = {}, {}, {}, {}\nlocal over = 0\nfor i = 1, n do\n  iv[i] = tonumber(ARGV[1 + 2 * i])\n  cap[i] = tonumber(ARGV[2 + 2 * i]) * iv[i]\n  local tat = tonumber(tats[i]) or now\n  if tat < now then tat = now end\n  base[i] = tat\n  if mode == '-1' then\n    local b = tat - cost * iv[i]\n    if b < now then b = now end\n    nxt[i] = b\n  else\n    nxt[i] = tat + cost * iv[i]\n    local o = nxt[i] - now - cap[i]\n    if o > 1 and o > over then over = o end\n  end\nend\nlocal ok = over == 0\nlocal write = (ok and mode == '1') or mode == '-1'\nif write then\n  local set, far = {}, 0\n  for i = 1, n do\n    set[2 * i - 1] = i\n    set[2 * i] = string.format(nxt[i] % 1 == 0 and '%d' or '%.17g', nxt[i])\n    if nxt[i] - now > far then far = nxt[i] - now end\n  end\n  if far <= 0 then\n    redis.call('DEL', KEYS[1])\n  else\n    if str then redis.call('DEL', KEYS[1]) end\n    redis.call('HSET', KEYS[1], unpack(set))\n    redis.call('PEXPIRE', KEYS[1], math.ceil(far / 1000))\n  end\nend\nlocal out = { 0, math.ceil(over / 1000) }\nif ok then out[1] = (write and mode == '1') and 1 or 2 end\nfor i = 1, n do\n  local d = (ok and nxt[i] or base[i]) - now\n  local r = math.floor((cap[i] - d + 1) / iv[i] + 0.000000001)\n  if r < 0 then r = 0 end\n  out[#out + 1] = r\n  out[#out + 1] = math.ceil(d / 1000)\nend\nreturn out\n"
local ONE = "local mode = ARGV[1]\nlocal iv = tonumber(ARGV[3])\nlocal step = tonumber(ARGV[2]) * iv\nlocal cap = tonumber(ARGV[4]) * iv\nlocal d = redis.call('PTTL', KEYS[1])\nif d == -2 then\n  d = 0\nelse\n  local v = redis.pcall('GET', KEYS[1])\n  if type(v) == 'table' then\n    local t = redis.call('TIME')\n    local now = t[1] * 1000000 + t[2]\n    d = (tonumber(redis.call('HGET', KEYS[1], '1')) or now) - now\n  else\n    d = d * 1000 - (tonumber(v) or 0)\n  end\n  if d < 0 then d = 0 end\nend\nlocal nxt, out = d + step, 1\nif mode == '-1' then\n  nxt, out = d - step, 2\n  if nxt < 0 then nxt = 0 end\nelseif nxt - cap > 1 then\n  return math.ceil(d) * 4\nelseif mode ~= '1' then\n  return math.ceil(nxt) * 4 + 2\nend\nif nxt <= 0 then\n  redis.call('DEL', KEYS[1])\nelse\n  local ms = math.ceil(nxt / 1000)\n  local rem = ms * 1000 - nxt\n  redis.call('SET', KEYS[1], rem == 0 and '0' or string.format(rem % 1 == 0 and '%d' or '%.17g', rem), 'PX', ms)\nend\nreturn math.ceil(nxt) * 4 + out\n"
local function isCharged(reply)
    return lua_type(reply) == "table" and reply[1] == 1
end
local function isChargedOne(reply)
    return lua_type(reply) == "number" and reply % 4 == 1
end
--- The GCRA script for any number of limits: its charged answers are writes that WAIT for replicas (redis.replicas).
_M.RATE = script.script("rate", MANY, 1, isCharged)
--- One limit (ARGV[3], ARGV[4] its interval and burst), answering 4 * us ahead + outcome.
_M.RATE_ONE = script.script("rate", ONE, 1, isChargedOne)
-- The same scripts for giving back (mode "-1", uncommit and a guard's
-- give-back): declared allow-oom, as a lock's release is, or a Redis out of
-- memory would keep every charge taken before it filled up. A give-back
-- rewrites a key in place or deletes it: it never grows Redis.
--- RATE, giving back.
_M.RATE_BACK = script.script("rate_back", MANY, 1, nil, nil, script.FREES)
--- RATE_ONE, giving back.
_M.RATE_ONE_BACK = script.script("rate_back", ONE, 1, nil, nil, script.FREES)
return _M
