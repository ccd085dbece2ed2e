-- Redis on IPv6 addresses. nginx connects to an IPv6 address only in brackets
-- ("[::1]"), while operators write `host = "::1"`, and CLUSTER SLOTS, MOVED and
-- the sentinels name hosts bare ("::1"): every topology takes a lock on servers
-- that listen on ::1, and messages name them "[::1]:port". (The servers listen on
-- 127.0.0.1 as well, for the specs' own commands.)
local h = require "helpers"
local dlock = require "resty.dlock"

local BOTH = "--bind '127.0.0.1 ::1'"

--- A lock taken with these redis options, held in Redis at each of ports, refused to another, released.
local function locks_on(redis, ports) h.lock_everywhere(redis, ports, "v6") end

describe("Redis on IPv6", function()
  if not h.has_ipv6() then
    pending("this machine has no IPv6 loopback address (::1)")
    return
  end
  local servers
  setup(function()
    servers = h.parallel(3, function() return h.start_redis(nil, BOTH) end)
  end)
  teardown(function() for _, r in ipairs(servers or {}) do r.stop() end end)

  it("one server, host written bare (\"::1\") or in brackets", function()
    locks_on({ host = "::1", port = servers[1].port }, { servers[1].port })
    locks_on({ host = "[::1]", port = servers[1].port }, { servers[1].port })
  end)

  it("names the server [::1]:port in its errors", function()
    local port = h.free_port()
    local l = assert(dlock.new({ dict = "dlock", redis = { host = "::1", port = port, connect_timeout = 500 } }))
    local lease, err = l:acquire("k")
    assert.is_nil(lease)
    assert.equal("dlock: redis [::1]:" .. port .. ": connection refused", err)
  end)

  it("TLS with ssl_verify to \"::1\": an address is no name to send or check, so the chain alone is checked", function()
    local tls = h.start_redis(nil, BOTH, unpack(h.tls_args()))
    finally(tls.stop)
    locks_on({ host = "::1", port = tls.tls_port, ssl = true, ssl_verify = true }, { tls.port })
  end)

  it("Redlock over masters named \"[::1]:port\"", function()
    local masters = {}
    for i, r in ipairs(servers) do masters[i] = "[::1]:" .. r.port end
    locks_on({ redlock = masters }, { servers[1].port, servers[2].port, servers[3].port })
  end)

  it("Sentinel on ::1 naming its master \"::1\"", function()
    local s = h.start_sentinel("v6", servers[1].port, { host = "::1", conf = "bind 127.0.0.1 ::1" })
    finally(function() s.stop() end)
    assert.equal("::1", h.cmd(s.port, "sentinel", "get-master-addr-by-name", "v6")[1])
    locks_on({ sentinel = { master = "v6", nodes = { "[::1]:" .. s.port } } }, { servers[1].port })
  end)

  it("a Cluster whose nodes know each other by ::1 (CLUSTER SLOTS names them so)", function()
    local c = h.start_bare_cluster("::1", BOTH)
    finally(c.stop)
    local nodes = c.nodes
    assert.equal("::1", h.cmd(nodes[1].port, "cluster", "slots")[1][3][1])
    local prefix = h.unique("v6")
    local l = assert(dlock.new({ dict = "dlock", prefix = prefix, redis = { cluster = { nodes = { "[::1]:" .. nodes[1].port } } } }))
    -- Keys on every master: the map's bare ::1 addresses are where the library goes.
    for i = 1, 12 do
      local key = "k" .. i
      local lease, err = l:acquire(key, { ttl = 5000 })
      assert(lease, err)
      local owner = c.owner(h.cmd(nodes[1].port, "cluster", "keyslot", prefix .. key))
      assert.equal(lease.token, h.cmd(owner.port, "get", prefix .. key))
      assert.is_true(lease:release())
    end
  end)
end)

h.check_error_logs({
  -- The refused connection the error test asks for.
  { "connect%(%) failed %(111: Connection refused%), context: ngx%.timer", max = 1 },
})
