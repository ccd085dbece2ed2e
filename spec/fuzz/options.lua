-- Option tables for the fuzz (spec/fuzz_*_spec.lua): valid values, so that many
-- calls get through, redis tables safe to use or not, and whole option tables
-- drawn from a list of fields.
local dlock = require "resty.dlock"
local values = require "fuzz.values"

local int, chance, pick, hostile = values.int, values.chance, values.pick, values.hostile
local bytes, printable, TYPOS = values.bytes, values.printable, values.TYPOS
local MAX_TTL = dlock.MAX_TTL
local MAX_KEY = dlock.MAX_KEY_LEN

-- Where the fuzz Redis listens, and a port nothing listens on: the spec sets both in its setup.
local target = { redis_port = nil, closed_port = nil }

local _M = { target = target }

local SAFE = setmetatable({}, { __mode = "k" }) -- redis tables pointing at the fuzz Redis (or nowhere)

local function valid_ttl() return pick({ 1, 2, 999, 1000, 5000, 30000, MAX_TTL, int(1, MAX_TTL) }) end
local function valid_wait() return pick({ 0, 0, 1, 50, MAX_TTL, int(0, MAX_TTL) }) end

local function valid_key()
  local k = int(1, 10)
  if k == 1 then return pick({ "a", "b", "k", "0", "%", "$", " " }) end
  if k == 2 then return printable(int(1, 40)) end
  if k == 3 then return bytes(int(1, 64)) end
  if k == 4 then return string.rep("k", MAX_KEY) end
  if k == 5 then return bytes(int(1, MAX_KEY)) end
  if k == 6 then return "\0" end
  if k == 7 then return "key with spaces\n\r\t" end
  if k == 8 then return "%s%d%%[^%a]" end
  if k == 9 then return "ключ:" .. int(1, 99) end
  return "$http_x:" .. printable(int(1, 8))
end
local function any_key()
  if chance(0.6) then return valid_key() end
  return hostile()
end

--- A redis option table that is valid and safe to use: it points at the fuzz
--- Redis (sometimes with a db, a wrong password or a failing SELECT), or at
--- nothing (a closed port, a missing socket), so any Redis error comes quickly.
local function safe_redis()
  local k = int(1, 10)
  local r
  if k == 1 then r = { port = target.redis_port }
  elseif k == 2 then
    r = { host = "127.0.0.1", port = target.redis_port, connect_timeout = int(50, 1000), read_timeout = int(50, 1000) }
  elseif k == 3 then r = { port = target.redis_port, db = int(0, 15) }
  elseif k == 4 then r = { port = target.redis_port, db = 1000000 }
  elseif k == 5 then r = { port = target.redis_port, password = "fz-secret-" .. int(1000, 1003) }
  elseif k == 6 then r = { port = target.redis_port, username = "fz-user", password = "fz-secret-" .. int(1000, 1003) }
  elseif k == 7 then
    r = { port = target.redis_port, pool_size = int(1, 100), keepalive_timeout = pick({ 0, int(1, 60000) }), backlog = int(0, 10) }
  elseif k == 8 then r = { port = target.closed_port, connect_timeout = int(50, 1000) }
  elseif k == 9 then r = { path = "unix:/nonexistent/fz-redis.sock" }
  else r = { port = target.redis_port, ssl = false, read_timeout = pick({ 1, 2, 1000 }) }
  end
  SAFE[r] = true
  return r
end

--- A redis option that is not known to be valid and safe: valid-looking or
--- hostile fields, or no table at all. The fuzz never reaches a server with it.
local REDIS_FIELDS = {
  host = function() return pick({ "127.0.0.1", "localhost", "redis.invalid", "::1" }) end,
  port = function() return int(1, 65535) end,
  path = function() return "unix:/tmp/" .. printable(int(1, 20)) end,
  username = function() return "u" end,
  password = function() return pick({ "", "p", "fz-secret" }) end,
  db = function() return int(0, 1000000) end,
  connect_timeout = function() return int(1, 3600000) end,
  read_timeout = function() return int(1, 3600000) end,
  pool_size = function() return int(1, 100000) end,
  backlog = function() return int(0, 100000) end,
  keepalive_timeout = function() return int(0, 3600000) end,
  ssl = function() return chance(0.5) end,
  ssl_verify = function() return chance(0.5) end,
  server_name = function() return "redis.example" end,
  replicas = function() return int(0, 100) end,
  replicas_timeout = function() return int(1, 3600000) end,
  sentinel = function()
    return pick({
      { master = "m", nodes = { "127.0.0.1:" .. target.closed_port } },
      { master = "m", nodes = { "[::1]:" .. int(1, 65535), "h:" .. int(0, 70000) } },
      { master = hostile(1), nodes = hostile(1), username = hostile(1), password = hostile(1) },
      { nodes = {} },
      hostile(1),
    })
  end,
  cluster = function()
    return pick({
      { nodes = { "127.0.0.1:" .. target.closed_port } },
      { nodes = { "[::1]:" .. int(1, 65535), "h:" .. int(0, 70000) }, max_redirects = int(0, 17) },
      { nodes = hostile(1), max_redirects = hostile(1) },
      { max_redirects = 5 },
      hostile(1),
    })
  end,
  redlock = function()
    return pick({
      { "127.0.0.1:" .. target.closed_port, "[::1]:" .. target.closed_port, "localhost:" .. target.closed_port },
      { "h:" .. int(0, 70000), "h:1" },
      { hostile(1), hostile(1), hostile(1) },
      {},
      hostile(1),
    })
  end,
}
local REDIS_NAMES = {}
for name in pairs(REDIS_FIELDS) do REDIS_NAMES[#REDIS_NAMES + 1] = name end
table.sort(REDIS_NAMES)

local function any_redis()
  local k = int(1, 10)
  if k <= 3 then return hostile() end
  local r = {}
  for _, name in ipairs(REDIS_NAMES) do
    if chance(0.15) then r[name] = chance(0.7) and REDIS_FIELDS[name]() or hostile(1) end
  end
  if chance(0.1) then r[pick(TYPOS)] = 1 end
  return r
end

--- An options table built from `fields` ({ name, valid generator, required,
--- chance to appear, generator of bad values (default: any hostile value) }).
--- Returns opts and two facts about it: `valid` (every part came from a valid
--- generator) and `typo` (an unknown top-level name is in it).
local function gen_opts(fields, p_field, p_bad)
  if chance(0.06) then return hostile(), false, false end
  local o, valid, typo = {}, true, false
  for _, f in ipairs(fields) do
    if f[3] or chance(f[4] or p_field) then
      if chance(p_bad) then
        o[f[1]] = (f[5] or hostile)()
        valid = false
      else
        o[f[1]] = f[2]()
      end
    end
  end
  if chance(0.05) then
    local name = pick(TYPOS)
    o[name] = hostile(1)
    valid, typo = false, o[name] ~= nil
  end
  if chance(0.03) then
    o[pick({ 1, true, 2.5 })] = "x"
    valid, typo = false, true
  end
  return o, valid, typo
end

local function gen_acquire_opts()
  local k = int(1, 10)
  if k <= 2 then return nil end
  if k == 3 then return hostile() end
  local o = (gen_opts({ { "ttl", valid_ttl }, { "wait", valid_wait }, { "shared", function() return chance(0.5) end, false, 0.2 } },
    0.5, 0.35))
  return o
end

_M.SAFE, _M.valid_ttl, _M.valid_wait, _M.valid_key, _M.any_key = SAFE, valid_ttl, valid_wait, valid_key, any_key
_M.safe_redis, _M.any_redis, _M.gen_opts, _M.gen_acquire_opts = safe_redis, any_redis, gen_opts, gen_acquire_opts

return _M
