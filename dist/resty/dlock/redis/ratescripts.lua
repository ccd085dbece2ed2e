-- Generated from src/resty/dlock/redis/ratescripts.ts by TypeScriptToLua: edit that file, not this one.
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
--- RATE, giving back.
_M.RATE_BACK = script.script(
    "rate_back",
    MANY,
    1,
    nil,
    nil,
    script.FREES
)
--- RATE_ONE, giving back.
_M.RATE_ONE_BACK = script.script(
    "rate_back",
    ONE,
    1,
    nil,
    nil,
    script.FREES
)
return _M
