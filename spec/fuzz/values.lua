-- The fuzz's inputs (spec/fuzz_*_spec.lua): a fixed-seed PRNG, hostile values
-- of every Lua type, and a bounded printer that shows them in failure messages.
local ffi = require "ffi"
local dlock = require "resty.dlock"

local SEED = require("testenv").fuzz_seed or 20240611
local MAX_KEY = dlock.MAX_KEY_LEN

local _M = { SEED = SEED }

------------------------------------------------------------------------------
-- Deterministic PRNG (Park-Miller minimal standard; exact in doubles).
------------------------------------------------------------------------------
local state = SEED
local function reseed(n) state = (SEED + n * 7919) % 2147483646 + 1 end
local function rand()
  state = state * 16807 % 2147483647
  return state / 2147483647
end
local function int(lo, hi) return lo + math.floor(rand() * (hi - lo + 1)) end
local function chance(p) return rand() < p end
local function pick(list) return list[int(1, #list)] end

------------------------------------------------------------------------------
-- Printing inputs: a bounded serializer for failure messages.
------------------------------------------------------------------------------
local NAMES = setmetatable({}, { __mode = "k" }) -- value -> readable name (functions, userdata...)
local function named(name, v) NAMES[v] = name return v end

local function pack(...) return { n = select("#", ...), ... } end

local function esc(s)
  return (s:gsub("[%c\"\\\128-\255]", function(c) return string.format("\\%03d", c:byte()) end))
end

local ser
ser = function(v, seen, depth)
  local t = type(v)
  if t == "nil" or t == "boolean" then return tostring(v) end
  if t == "number" then
    if v ~= v then return "0/0" end
    if v == math.huge then return "math.huge" end
    if v == -math.huge then return "-math.huge" end
    if v == 0 and 1 / v < 0 then return "-0.0" end
    if v == math.floor(v) and math.abs(v) < 2 ^ 53 then return string.format("%d", v) end
    return string.format("%.17g", v)
  end
  if t == "string" then
    if #v <= 80 then return '"' .. esc(v) .. '"' end
    return '"' .. esc(v:sub(1, 40)) .. '"...<' .. #v .. " bytes>"
  end
  if NAMES[v] then return NAMES[v] end
  if t ~= "table" then return "<" .. t .. " " .. tostring(v) .. ">" end
  seen = seen or {}
  depth = depth or 0
  if seen[v] then return "<cycle>" end
  if depth >= 5 then return "{...}" end
  seen[v] = true
  local parts, n = {}, 0
  for k, x in pairs(v) do
    n = n + 1
    if n > 12 then parts[#parts + 1] = "..." break end
    local ks = type(k) == "string" and k:match("^[%a_][%w_]*$") and k or "[" .. ser(k, seen, depth + 1) .. "]"
    parts[#parts + 1] = ks .. "=" .. ser(x, seen, depth + 1)
  end
  seen[v] = nil
  local mt = getmetatable(v)
  return (mt and "setmetatable(" or "") .. "{" .. table.concat(parts, ", ") .. "}" .. (mt and ", {...})" or "")
end

local function args_of(r)
  local out = {}
  for i = 1, r.n do out[i] = ser(r[i]) end
  return table.concat(out, ", ")
end

------------------------------------------------------------------------------
-- Hostile values.
------------------------------------------------------------------------------
local NUMBERS = {
  0, -1, 1, 2, 7, 42, 0.5, 1.5, -2.5, 1e-300, -0.0, 2 ^ 31, 2 ^ 31 - 1, -2 ^ 31, 2 ^ 32, 2 ^ 53, 2 ^ 53 + 2,
  1e308, -1e308, 0 / 0, math.huge, -math.huge, 199, 200, 599, 600, 65535, 65536, 100000, 100001,
  1000000, 1000001, 3600000, 3600001, 86400000, 86400001,
}
local STRINGS = {
  "", "a", "0", "10", "-1", "1.5", "nan", "inf", "true", "nil", "\0", "\0\255", "\255\254\253", "%", "%s%d%%",
  "%z%b()", "[%a-z]*$^().+-?", "$", "$$", "$1", "$http_x", "$remote_addr:$uri", "a b", "\n", "\r\n",
  "dlock", "dlock_other", "nope", "random", "worker", "dedup", "concurrency", "throttle", "mutex", "allow",
  "deny", "pass", "reject", "unix:", "unix:/nonexistent/redis.sock", "/tmp/r.sock", "127.0.0.1", "::1",
  "localhost", "fz:", "ttl", "wait", "__index", "__gc", "ключ", "\xff\xfe\0\0",
}
local TYPOS = { "ttl_ms", "wiat", "TTL", "Wait", "timeout", "expire", "hots", "dicts", "name ", "", "prefix\0" }

local MISC = {
  named("function() end", function() end),
  named("function() return 1 end", function() return 1 end),
  named("function() error('boom') end", function() error("boom") end),
  named("coroutine.create(f)", coroutine.create(function() end)),
  named("ngx.null", ngx.null),
  named("newproxy(true)", newproxy(true)),
  named("io.stdout", io.stdout),
  named("ffi.new('int64_t', 5)", ffi.new("int64_t", 5)),
  named("ffi.new('uint64_t', -1)", ffi.new("uint64_t", -1)),
  named("ffi.new('double[1]')", ffi.new("double[1]")),
  named("ffi.cast('void *', 0)", ffi.cast("void *", 0)), -- NULL: compares equal to nil in LuaJIT
  named("callable table", setmetatable({}, { __call = function() return "called" end })),
}
-- A finished coroutine joins MISC in spec/fuzz/suite.lua: ngx_lua's resume cannot run inside require.

local function bytes(n)
  local t = {}
  for i = 1, n do t[i] = string.char(int(0, 255)) end
  return table.concat(t)
end
local function printable(n)
  local t = {}
  for i = 1, n do t[i] = string.char(int(32, 126)) end
  return table.concat(t)
end

local function hostile_string()
  local k = int(1, 10)
  if k <= 5 then return pick(STRINGS) end
  if k == 6 then return bytes(int(1, 600)) end
  if k == 7 then return printable(int(1, 80)) end
  if k == 8 then return pick({ string.rep("k", MAX_KEY), string.rep("k", MAX_KEY + 1), string.rep("%", 257) }) end
  if k == 9 then return string.rep(pick({ "x", "\0", "$a", "%" }), int(1, 100 * 1024)) end
  return string.rep("\0\255", 50 * 1024) -- 100 KB of binary
end

local hostile
local function hostile_table(depth)
  local k = int(1, 9)
  if k == 1 then return {} end
  if k == 2 then
    local t = {}
    for i = 1, int(1, 5) do t[i] = hostile(depth - 1) end
    return t
  end
  if k == 3 then
    local t = {}
    t.self, t[1], t[t] = t, t, t
    return t
  end
  if k == 4 then -- deep nesting
    local t = {}
    for _ = 1, int(10, 300) do t = { x = t, ttl = t } end
    return t
  end
  if k == 5 then -- keys that are not strings
    local t = {}
    t[pick({ 1, 1.5, -1, math.huge, true, false })] = hostile(depth - 1)
    t[{}] = true
    t[pick(MISC)] = 1
    return t
  end
  if k == 6 then
    local t = {}
    for _ = 1, int(1, 4) do t[pick(STRINGS) .. ""] = hostile(depth - 1) end
    return t
  end
  if k == 7 then -- looks like options
    return { ttl = hostile(depth - 1), wait = hostile(depth - 1) }
  end
  if k == 8 then
    local t = {}
    for i = 1, 1000 do t[i] = i end
    return t
  end
  return setmetatable({}, { __index = function() return nil end }) -- a proxy that never raises
end

hostile = function(depth)
  depth = depth or 2
  local k = int(1, 100)
  if k <= 8 then return nil end
  if k <= 14 then return k % 2 == 0 end
  if k <= 38 then return pick(NUMBERS) end
  if k <= 68 then return hostile_string() end
  if k <= 86 then return depth > 0 and hostile_table(depth) or {} end
  return pick(MISC)
end

_M.reseed, _M.int, _M.chance, _M.pick = reseed, int, chance, pick
_M.NAMES, _M.named, _M.pack, _M.ser, _M.args_of = NAMES, named, pack, ser, args_of
_M.TYPOS, _M.MISC, _M.hostile, _M.bytes, _M.printable = TYPOS, MISC, hostile, bytes, printable

return _M
