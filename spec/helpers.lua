-- What every spec file requires as `h`: the harness in one table. Its parts
-- live in spec/harness/ (base: environment, names, raw Redis commands,
-- waiting; process: shell commands, processes, ports; servers: redis-servers,
-- replicas, sentinels, Redlock's masters; cluster: Redis Cluster; nginx: nginx
-- instances and an HTTP client; dns: a DNS server and an nginx resolving
-- through it; errors: the error-log check every spec file ends with).
local _M = {}
for _, part in ipairs({ "base", "process", "servers", "cluster", "nginx", "dns", "errors" }) do
  for k, v in pairs(require("harness." .. part)) do
    assert(_M[k] == nil, "spec/harness: " .. k .. " defined twice")
    _M[k] = v
  end
end
return _M
