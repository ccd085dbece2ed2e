-- Redis by host name, as Kubernetes names it: a DNS server of the specs'
-- (spec/tools/dns.js) and an nginx whose resolver it is (nginx resolves names
-- only through its resolver directive, never /etc/hosts), with a location that
-- takes a lock with the redis options a request gives.
local h = require "harness.base"
local process = require "harness.process"
local nginx = require "harness.nginx"

local _M = {}

--- A DNS server answering `names` ("name=IPv4 ..."), on `port` (a free one unless given): { port, stop() }.
function _M.start_dns(names, port)
  port = port or process.free_port()
  local dir = h.env.prefix .. "/dns-" .. port
  assert(process.sh("mkdir -p " .. dir .. " && (node " .. h.env.root .. "/spec/tools/dns.js " .. port .. " " .. names ..
    " > " .. dir .. "/dns.log 2>&1 & echo $! > " .. dir .. "/dns.pid)"))
  local pid = tonumber(process.read_file(dir .. "/dns.pid"))
  process.track(pid)
  assert(h.eventually(5, function() return (process.read_file(dir .. "/dns.log") or ""):find("dns on", 1, true) end),
    "the DNS server did not start")
  return { port = port, stop = function() return process.stop_pid(pid, "TERM") end }
end

--- An nginx whose resolver is that DNS server (nginx/spec-resolver.conf), trusting the test CA.
function _M.resolving_nginx(dns)
  return nginx.start_nginx("spec-resolver.conf", { DNS_PORT = dns.port, TLS_CA = h.env.prefix .. "/tls/ca.pem" })
end

--- The lock nginx n (a resolving_nginx) takes on key (a fresh one when nil) with these redis options (a Lua
--- table constructor), released at once, or kept for its ttl of 5 s with `hold`: its token, or nil and the error.
function _M.lock_via(n, redis_lua, key, hold)
  local res = assert(nginx.http(n.port, "/lock?key=" .. (key or h.unique("named")) .. "&redis=" .. ngx.escape_uri(redis_lua) ..
    (hold and "&hold=1" or "")))
  local token = res.body:match("^taken (%x+)\n$")
  if token then return token end
  return nil, res.body
end

return _M
