-- The overlap witnesses of the specs (spec/hammers.lua, the *_fleet_spec.lua
-- files, nginx/spec-peer.conf): counters in the test Redis of
-- who is inside a key's critical section. A holder enters and reads what it
-- must not find there in one script, so of two holders that overlap, the
-- second to enter always sees the first.
--   inside_all     a holder of a set of keys: two holders sharing a key overlap.
--   inside_shared  a reader (shared) or a writer of one key: a writer beside
--                  anyone, or a reader beside a writer, overlaps; a reader
--                  beside a reader counts as sharing (readers did run side by side).
local found, redis = pcall(require, "resty.redis")
if not found then redis = require "nginx.redis" end

local ENTER_ALL = [[
local over = 0
for i = 1, #KEYS - 1 do
  if redis.call('INCR', KEYS[i]) > 1 then over = 1 end
end
if over == 1 then redis.call('INCR', KEYS[#KEYS]) end
return over
]]
local LEAVE_ALL = [[
for i = 1, #KEYS do redis.call('DECR', KEYS[i]) end
return 1
]]

local ENTER_SHARED = [[
local w, r = KEYS[1], KEYS[2]
if ARGV[1] == 'w' then
  local n = redis.call('INCR', w)
  if n > 1 or tonumber(redis.call('GET', r) or '0') > 0 then redis.call('INCR', KEYS[3]) end
else
  local n = redis.call('INCR', r)
  if tonumber(redis.call('GET', w) or '0') > 0 then redis.call('INCR', KEYS[3]) end
  if n > 1 then redis.call('INCR', KEYS[4]) end
end
return 1
]]

local _M = {}

--- A connection to the witness's Redis (port), for one holder at a time; its
--- counters are <prefix>overlaps, <prefix>shared and <prefix>in:...
function _M.new(port, prefix)
  local red = redis:new()
  red:set_timeout(2000)
  assert(red:connect("127.0.0.1", port))
  return { red = red, prefix = prefix }
end

--- Inside every key of `keys` for `ms`, witnessed.
function _M.inside_all(w, keys, ms)
  local p = w.prefix
  local ks = {}
  for i, k in ipairs(keys) do ks[i] = p .. "in:" .. k end
  ks[#ks + 1] = p .. "overlaps"
  assert(w.red:eval(ENTER_ALL, #ks, unpack(ks)))
  if ms > 0 then ngx.sleep(ms / 1000) end
  ks[#ks] = nil
  assert(w.red:eval(LEAVE_ALL, #ks, unpack(ks)))
end

--- Inside key as a reader (shared) or a writer for `ms`, witnessed.
function _M.inside_shared(w, key, shared, ms)
  local p = w.prefix
  assert(w.red:eval(ENTER_SHARED, 4, p .. "in:w:" .. key, p .. "in:r:" .. key, p .. "overlaps", p .. "shared",
    shared and "r" or "w"))
  if ms > 0 then ngx.sleep(ms / 1000) end
  assert(w.red:decr(p .. (shared and "in:r:" or "in:w:") .. key))
end

function _M.close(w)
  w.red:set_keepalive()
end

return _M
