-- The overlap witness of shared locks (spec/rwlock_spec.lua, nginx/spec-peer.conf):
-- counters in the test Redis of who is inside a key's critical section. Each
-- holder enters and reads the other side's counter in one script, so of two
-- holders that overlap, the second to enter always sees the first: a writer
-- beside anyone, or a reader beside a writer, counts as an overlap; a reader
-- beside a reader counts as sharing (readers did run side by side).
local found, redis = pcall(require, "resty.redis")
if not found then redis = require "nginx.redis" end

local ENTER = [[
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

--- A connection to the witness's Redis (port), for one holder at a time.
function _M.new(port, prefix)
  local red = redis:new()
  red:set_timeout(2000)
  assert(red:connect("127.0.0.1", port))
  return { red = red, prefix = prefix }
end

--- Inside key as a reader (shared) or a writer for `ms`, witnessed.
function _M.inside(w, key, shared, ms)
  local p = w.prefix
  assert(w.red:eval(ENTER, 4, p .. "in:w:" .. key, p .. "in:r:" .. key, p .. "overlaps", p .. "shared",
    shared and "r" or "w"))
  ngx.sleep(ms / 1000)
  assert(w.red:decr(p .. (shared and "in:r:" or "in:w:") .. key))
end

function _M.close(w)
  w.red:set_keepalive()
end

return _M
