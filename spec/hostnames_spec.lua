-- Redis named by host name, as Kubernetes services name it: nginx resolves
-- names only through its resolver directive (never /etc/hosts), against a DNS
-- server here (spec/tools/dns.js). A server by name; sentinels by name that
-- announce their master by name (resolve-hostnames, announce-hostnames, as the
-- usual Helm charts set them); a cluster whose CLUSTER SLOTS names its nodes
-- (cluster-preferred-endpoint-type hostname). And the same without a resolver:
-- refused, saying what to add. Over TLS with ssl_verify, each of them is
-- checked against the name it is reached by, as lua-resty-http, Redisson and
-- redis-py check it, unless server_name names another.
local h = require "helpers"
local dlock = require "resty.dlock"

local start_dns, resolving_nginx, lock_on = h.start_dns, h.resolving_nginx, h.lock_via

describe("Redis named by host name", function()
  local dns, n, redis, sentinel
  local BOTH = h.has_ipv6() and "--bind '127.0.0.1 ::1'" or ""

  setup(function()
    dns = start_dns("redis.test=127.0.0.1 sentinel.test=127.0.0.1 localhost=127.0.0.1")
    n = resolving_nginx(dns)
    -- The master listens where "localhost" may resolve to for the sentinel: 127.0.0.1, and ::1 when there is one.
    redis = h.start_redis(nil, BOTH)
    sentinel = h.start_sentinel("named", redis.port, { host = "localhost",
      conf = "sentinel resolve-hostnames yes\nsentinel announce-hostnames yes" })
  end)
  teardown(function()
    if sentinel then sentinel.stop() end
    if redis then redis.stop() end
    if n then n.stop() end
    if dns then dns.stop() end
  end)

  local function lock(redis_lua, key) return lock_on(n, redis_lua, key) end

  it("takes a lock on a server named redis.test", function()
    assert(lock("{ host = 'redis.test', port = " .. redis.port .. " }"))
  end)

  it("takes a lock through sentinels named sentinel.test that name their master localhost", function()
    assert.equal("localhost", h.cmd(sentinel.port, "sentinel", "get-master-addr-by-name", "named")[1])
    assert(lock("{ sentinel = { master = 'named', nodes = { 'sentinel.test:" .. sentinel.port .. "' } } }"))
  end)

  it("takes a lock on each master of a cluster whose CLUSTER SLOTS names them localhost", function()
    local c = h.start_bare_cluster("127.0.0.1", "--cluster-announce-hostname localhost",
      "--cluster-preferred-endpoint-type hostname")
    finally(c.stop)
    local nodes, ranges = c.nodes, c.ranges
    assert.equal("localhost", h.cmd(nodes[1].port, "cluster", "slots")[1][3][1])
    -- A key in each master's slots (the factory's keys are "dlock:<key>").
    local covered, count, i = {}, 0, 0
    while count < 3 do
      i = i + 1
      local key = h.unique("named")
      local slot = h.cmd(nodes[1].port, "cluster", "keyslot", "dlock:" .. key)
      for r, range in ipairs(ranges) do
        if slot >= range[1] and slot <= range[2] and not covered[r] then
          covered[r], count = true, count + 1
          local token = assert(lock("{ cluster = { nodes = { 'redis.test:" .. nodes[1].port .. "' } } }", key))
          assert.matches("^%x+$", token)
        end
      end
      assert(i < 200, "no key for every master")
    end
  end)


  it("says a node's name came from CLUSTER SLOTS when nginx cannot resolve it (cluster-announce-hostname)", function()
    local c = h.start_bare_cluster("127.0.0.1", "--cluster-announce-hostname internal.test",
      "--cluster-preferred-endpoint-type hostname")
    finally(c.stop)
    local token, err = lock("{ cluster = { nodes = { 'redis.test:" .. c.nodes[1].port .. "' } } }")
    assert.is_nil(token)
    assert.matches("^dlock: redis internal%.test:%d+: internal%.test could not be resolved %(3: Host not found%) " ..
      "%(an address the cluster gave in CLUSTER SLOTS or MOVED: the nodes announce themselves by cluster%-announce%-ip or " ..
      "cluster%-announce%-hostname, " ..
      "which nginx must be able to resolve and reach%)", err)
  end)

  it("says which master the sentinels named, and that they did, when nginx cannot resolve it (announce-hostnames)", function()
    local s = h.start_sentinel("inside", redis.port, { host = "internal.test",
      conf = "sentinel resolve-hostnames yes\nsentinel announce-hostnames yes" })
    finally(s.stop)
    local token, err = lock("{ sentinel = { master = 'inside', nodes = { 'sentinel.test:" .. s.port .. "' } } }")
    assert.is_nil(token)
    assert.matches("^dlock: redis sentinel inside: master internal%.test:" .. redis.port .. ": internal%.test could not be " ..
      "resolved %(3: Host not found%) %(the master's address as the sentinels announce it: replica%-announce%-ip, or the " ..
      "names of announce%-hostnames, which nginx must be able to resolve and reach%)", err)
  end)

  -- The test certificate names localhost and 127.0.0.1, not redis.test nor sentinel.test.
  describe("over TLS with ssl_verify and no server_name", function()
    local tls, tls_sentinel

    setup(function()
      tls = h.start_redis(nil, BOTH, unpack(h.tls_args()))
      local conf = { "sentinel resolve-hostnames yes", "sentinel announce-hostnames yes" }
      for _, a in ipairs(h.tls_args()) do conf[#conf + 1] = (a:gsub("^%-%-", "")) end
      tls_sentinel = h.start_sentinel("named-tls", tls.tls_port, { host = "localhost", conf = table.concat(conf, "\n") })
    end)
    teardown(function()
      if tls_sentinel then tls_sentinel.stop() end
      if tls then tls.stop() end
    end)

    local function verified(fields)
      return "{ ssl = true, ssl_verify = true, connect_timeout = 1000, " .. fields .. " }"
    end
    --- A refusal of `name` by ssl_verify: "certificate host mismatch" and what was checked, or the
    --- assertion lua-resty-core 0.1.25's sslhandshake sometimes raises instead (a refusal all the same).
    local function assert_name_refused(name, err)
      assert.matches("TLS handshake failed: ", err, 1, true)
      if err:find("mismatch", 1, true) then
        assert.matches(": certificate host mismatch %(ssl_verify: the certificate does not name " .. name:gsub("%.", "%%.") ..
          ", the host it is reached by: server_name, when given, is checked instead%)", err)
      else
        assert.matches("resty/core/socket.lua:%d+: assertion failed!", err)
      end
    end

    it("checks a server's certificate against the name it is reached by: localhost, which it names", function()
      assert(lock(verified("host = 'localhost', port = " .. tls.tls_port)))
    end)

    it("refuses a server reached as redis.test, which its certificate does not name, saying which name it checked", function()
      local token, err = lock(verified("host = 'redis.test', port = " .. tls.tls_port))
      assert.is_nil(token)
      assert.matches("^dlock: redis redis%.test:" .. tls.tls_port .. ": ", err)
      assert_name_refused("redis.test", err)
    end)

    it("checks server_name instead when it is given: redis.test with server_name = 'localhost'", function()
      assert(lock(verified("host = 'redis.test', port = " .. tls.tls_port .. ", server_name = 'localhost'")))
    end)

    it("checks the chain alone for a server reached by address (an address is no name to check)", function()
      assert(lock(verified("host = '127.0.0.1', port = " .. tls.tls_port)))
    end)

    it("checks each sentinel by its name and the master by the name the sentinels announce (localhost)", function()
      assert.equal("localhost", h.cmd(tls_sentinel.port, "sentinel", "get-master-addr-by-name", "named-tls")[1])
      assert(lock(verified("sentinel = { master = 'named-tls', nodes = { 'localhost:" .. tls_sentinel.tls_port .. "' } }")))
    end)

    it("refuses a sentinel reached as sentinel.test, which the certificate does not name", function()
      local token, err = lock(verified("sentinel = { master = 'named-tls', nodes = { 'sentinel.test:" ..
        tls_sentinel.tls_port .. "' } }"))
      assert.is_nil(token)
      assert.matches("sentinel%.test:" .. tls_sentinel.tls_port .. " TLS handshake failed: ", err)
      assert_name_refused("sentinel.test", err)
    end)

    it("checks each cluster node by the name CLUSTER SLOTS gives: refused as redis.test, taken with server_name", function()
      local c = h.start_cluster({ tls = true, args = { "--cluster-announce-hostname redis.test",
        "--cluster-preferred-endpoint-type hostname" } })
      finally(c.stop)
      local seed = "'localhost:" .. c.nodes[1].tls_port .. "'"
      assert.equal("redis.test", h.cmd(c.nodes[1].port, "cluster", "slots")[1][3][1])
      -- The seed is asked for the slots as localhost (its certificate names it); the master of the key as redis.test.
      local token, err = lock(verified("cluster = { nodes = { " .. seed .. " } }"))
      assert.is_nil(token)
      assert.matches("redis%.test:%d+: TLS handshake failed: ", err)
      assert_name_refused("redis.test", err)
      for i = 1, 6 do
        assert(lock(verified("cluster = { nodes = { " .. seed .. " } }, server_name = 'localhost'")))
      end
    end)
  end)

  it("without a resolver (the spec runner's nginx), refuses the master the sentinels name, saying what to add", function()
    local l = assert(dlock.new({ dict = "dlock", redis = { sentinel = { master = "named", nodes = { "127.0.0.1:" .. sentinel.port } } } }))
    local lease, err = l:acquire("k")
    assert.is_nil(lease)
    assert.matches("^dlock: redis sentinel named: master localhost:" .. redis.port .. ": no resolver defined to resolve " ..
      "\"localhost\" %(nginx resolves host names " ..
      "only through its resolver directive, never /etc/hosts: add one, or give an IP address%)", err)
  end)
end)

-- A standalone Redis behind a name that moves to the new master on failover,
-- as a cloud's primary endpoint (ElastiCache's), a virtual IP or a Kubernetes
-- Service does: the old master, demoted, refuses writes with READONLY on the
-- connections pooled to it, and only new connections reach the new one. Here
-- primary.test names 127.0.0.1 (the master) and then 127.0.0.2, where its
-- replica listens on the same port.
describe("a Redis named primary.test whose name moves to the promoted replica", function()
  local dns, n, old, new, port

  --- A command to the server listening on 127.0.0.2:port.
  local function on_new(name, ...)
    local red = h.redis:new()
    red:set_timeout(2000)
    assert(red:connect("127.0.0.2", port))
    local res, err = red[name](red, ...)
    red:close()
    return res, err
  end

  setup(function()
    dns = start_dns("primary.test=127.0.0.1")
    n = resolving_nginx(dns)
    -- No diskless-sync delay (5 s by default): the replica links at once.
    old = h.start_redis(nil, "--repl-diskless-sync-delay 0")
    port = old.port
    -- Its replica on 127.0.0.2 and the same port (start_redis keeps a directory per port, and checks 127.0.0.1).
    local dir = h.env.prefix .. "/redis-moved-" .. port
    assert(h.sh("mkdir -p " .. dir .. " && redis-server --port " .. port .. " --bind 127.0.0.2 --save '' --appendonly no " ..
      "--daemonize yes --dir " .. dir .. " --pidfile " .. dir .. "/redis.pid --logfile " .. dir .. "/redis.log " ..
      "--replicaof 127.0.0.1 " .. port))
    assert(h.eventually(5, function() return h.read_file(dir .. "/redis.pid") end), "the replica did not start")
    local pid = tonumber(h.read_file(dir .. "/redis.pid"))
    h.track(pid)
    new = { stop = function() return h.stop_pid(pid, "TERM") end }
    assert(h.eventually(5, function()
      return (on_new("info", "replication") or ""):find("master_link_status:up", 1, true)
    end), "the replica did not link")
  end)
  teardown(function()
    if new then new.stop() end
    if old then old.stop() end
    if n then n.stop() end
    if dns then dns.stop() end
  end)

  it("takes locks on the new master once the name resolves to it: connections that met READONLY are closed, not pooled", function()
    local conf = "{ host = 'primary.test', port = " .. port .. " }"
    for _ = 1, 5 do assert(lock_on(n, conf)) end
    -- The failover: the replica promoted, the old master following it, the name moved.
    assert.equal("OK", on_new("replicaof", "no", "one"))
    assert.equal("OK", h.cmd(port, "replicaof", "127.0.0.2", port))
    dns.stop()
    dns = start_dns("primary.test=127.0.0.2", dns.port)
    -- Refused by the demoted master until nginx's cached answer expires (valid=5s), then taken on the new one.
    local token, err
    local moved = h.eventually(10, function()
      token, err = lock_on(n, conf, "moved")
      if token then return true end
      assert.matches("READONLY", err)
      ngx.sleep(0.2)
    end)
    assert.is_truthy(moved, "still refused 10 s after the failover: " .. tostring(err))
    -- Every lock after that is taken: no connection to the old master is left in the pool.
    for _ = 1, 20 do assert(lock_on(n, conf)) end
  end)
end)

h.check_error_logs({
  -- Certificates refused on purpose: names they do not carry.
  "lua ssl certificate does not match host \"redis%.test\"",
  "lua ssl certificate does not match host \"sentinel%.test\"",
})
