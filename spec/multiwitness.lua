-- The overlap witness of sets of keys (spec/multikey_spec.lua, nginx/spec-peer.conf):
-- counters in the test Redis of who is inside each key's critical section. A
-- holder of a set enters all its keys in one script, so of two holders that
-- overlap on a key, the second to enter always sees the first: an overlap.
local found, redis = pcall(require, "resty.redis")
if not found then redis = require "nginx.redis" end

local ENTER = [[
local over = 0
for i = 1, #KEYS - 1 do
  if redis.call('INCR', KEYS[i]) > 1 then over = 1 end
end
if over == 1 then redis.call('INCR', KEYS[#KEYS]) end
return over
]]
local LEAVE = [[
for i = 1, #KEYS do redis.call('DECR', KEYS[i]) end
return 1
]]

local _M = {}

--- A connection to the witness's Redis (port), for one holder at a time.
function _M.new(port, prefix)
  local red = redis:new()
  red:set_timeout(2000)
  assert(red:connect("127.0.0.1", port))
  return { red = red, prefix = prefix }
end

--- Inside every key of `keys` for `ms`, witnessed.
function _M.inside(w, keys, ms)
  local p = w.prefix
  local ks = {}
  for i, k in ipairs(keys) do ks[i] = p .. "in:" .. k end
  ks[#ks + 1] = p .. "overlaps"
  assert(w.red:eval(ENTER, #ks, unpack(ks)))
  ngx.sleep(ms / 1000)
  ks[#ks] = nil
  assert(w.red:eval(LEAVE, #ks, unpack(ks)))
end

function _M.close(w)
  w.red:set_keepalive()
end

return _M
