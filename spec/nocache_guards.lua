-- The guards and locks factory of nginx/spec-nocache.conf, made when init_by_lua
-- loads this module (in every request's Lua VM, with lua_code_cache off).
local gateway = require "resty.dlock.gateway"
local dlock = require "resty.dlock"

local _M = {}

function _M.make(port, name)
  local redis = { host = "127.0.0.1", port = port }
  local prefix = "nocache:" .. name .. ":"
  _M.api = assert(gateway.new({ name = "api", mode = "rate", key = "$arg_k", rate = 2, period = 60000,
    on_error = "deny", prefix = prefix .. "rate:", redis = redis }))
  _M.jobs = assert(gateway.new({ name = "jobs", mode = "mutex", key = "$arg_k", ttl = 5000,
    on_error = "deny", prefix = prefix .. "mutex:", redis = redis }))
  _M.once = assert(gateway.new({ name = "once", mode = "dedup", key = "$arg_k", ttl = 5000,
    on_error = "deny", prefix = prefix .. "dedup:", redis = redis }))
  _M.locks = assert(dlock.new({ dict = "dlock", prefix = prefix .. "lock:", redis = redis }))
end

return _M
