-- Combinations of the redis options as production has them, and what is said
-- when one part is wrong: TLS pools per server name (SNI) behind a routing
-- proxy, replicas whose WAIT outlasts read_timeout, a Sentinel master's own
-- setup failing (named as the master, with the master's options), two
-- factories of one dict and prefix on two keyspaces, and node lists with
-- credentials in them.
local h = require "helpers"
local dlock = require "resty.dlock"
local ledger = require "resty.dlock.core.ledger"

local function stream_module()
  local p = io.popen(h.env.nginx .. " -V 2>&1")
  local v = p:read("*a")
  p:close()
  if v:find("--with-stream=dynamic", 1, true) then
    local dir = v:match("%-%-modules%-path=(%S+)") or "/usr/lib/nginx/modules"
    return "load_module " .. dir .. "/ngx_stream_module.so;"
  end
  return ""
end

describe("pools of TLS factories that differ only in server_name (SNI)", function()
  local a, b, front

  setup(function()
    a = h.start_redis(nil, unpack(h.tls_args(false)))
    b = h.start_redis(nil, unpack(h.tls_args(false)))
    front = h.start_nginx("spec-sni.conf", { STREAM_MODULE = stream_module(), A_PORT = a.tls_port,
      B_PORT = b.tls_port, SNI_PORT = h.free_port() })
  end)
  teardown(function()
    if front then front.stop() end
    if a then a.stop() end
    if b then b.stop() end
  end)

  it("never hands a connection made with one server_name (SNI) to a factory that sends another", function()
    local conf = h.read_file(front.prefix .. "/nginx.conf")
    local port = tonumber(conf:match("listen 127%.0%.0%.1:(%d+);\n%s*ssl_preread on"))
    local function factory(name)
      return assert(dlock.new({ dict = "dlock", prefix = h.unique("sni"), redis = { host = "127.0.0.1", port = port,
        ssl = true, server_name = name } }))
    end
    local la, lb = factory("a.redis.test"), factory("b.redis.test")
    -- Through a fresh connection each: each lands on its own server.
    local first = assert(la:acquire("k", { ttl = 5000 }))
    assert.equal(first.token, h.cmd(a.port, "get", la.prefix .. "k"))
    assert.is_true(first:release())
    -- Factory B, with A's connection in the pool: its lock must be on B's server.
    local lease, err = lb:acquire("k", { ttl = 5000 })
    assert(lease, err)
    local on_a, on_b = h.cmd(a.port, "get", lb.prefix .. "k"), h.cmd(b.port, "get", lb.prefix .. "k")
    assert.is_true(lease:release())
    assert.equal(ngx.null, on_a, "factory b (server_name b.redis.test) put its lock on server a")
    assert.equal(lease.token, on_b)
  end)
end)

describe("redis.replicas with a replicas_timeout longer than read_timeout", function()
  local master, replica

  setup(function()
    master = h.start_redis(nil, "--repl-diskless-sync-delay 0")
    replica = h.start_redis(nil, "--replicaof 127.0.0.1 " .. master.port, "--repl-diskless-sync-delay 0")
    assert.is_true(h.eventually(10, function()
      return (h.cmd(replica.port, "info", "replication") or ""):find("master_link_status:up", 1, true) ~= nil
        and h.cmd(master.port, "wait", 1, 100) == 1
    end))
  end)
  teardown(function()
    if replica then replica.signal("CONT") replica.stop() end
    if master then master.stop() end
  end)

  it("says a replica shortfall as one (WAIT answered within replicas_timeout), not as a broken connection", function()
    local l = assert(dlock.new({ dict = "dlock", prefix = h.unique("repl"),
      redis = { port = master.port, replicas = 1, replicas_timeout = 1200, read_timeout = 400 } }))
    replica.signal("STOP")
    local lease, err = l:acquire("a", { ttl = 5000 })
    replica.signal("CONT")
    assert.is_nil(lease)
    assert.equal("dlock: redis 127.0.0.1:" .. master.port ..
      ": only 0 of 1 replica(s) acknowledged the acquire within 1200 ms; released", err)
  end)
end)

describe("behind Sentinel, a master's own setup failing", function()
  local master, sentinel, protected, psentinel, addr

  setup(function()
    master = h.start_redis(nil, "--requirepass master-secret-7")
    sentinel = h.start_sentinel("sm-master", master.port, { conf = "sentinel auth-pass sm-master master-secret-7" })
  end)
  teardown(function()
    for _, x in ipairs({ psentinel or false, protected or false, sentinel or false, master or false }) do
      if x then x.stop() end
    end
  end)

  local function refused(redis)
    local l = assert(dlock.new({ dict = "dlock", prefix = h.unique("smaster"), redis = redis }))
    local lease, err = l:acquire("k", { ttl = 5000 })
    assert.is_nil(lease)
    return err
  end

  it("names the master the sentinels gave when its password is wrong (not worded as the sentinels' failure)", function()
    local err = refused({ sentinel = { master = "sm-master", nodes = { "127.0.0.1:" .. sentinel.port } },
      password = "stale-secret-8" })
    assert.is_nil(err:find("stale-secret-8", 1, true), err)
    assert.matches("authentication failed for user default", err)
    -- As a refused connect to it does: "master 127.0.0.1:<port>: ...".
    assert.matches("master 127%.0%.0%.1:" .. master.port .. ": ", err)
  end)

  it("names redis.ssl, not redis.sentinel.ssl, when the master's port does not answer a TLS handshake", function()
    local err = refused({ sentinel = { master = "sm-master", nodes = { "127.0.0.1:" .. sentinel.port }, ssl = false },
      ssl = true, password = "master-secret-7", connect_timeout = 300, read_timeout = 300 })
    assert.matches("TLS handshake failed: timeout", err)
    assert.is_nil(err:find("redis.sentinel.ssl", 1, true), "the master's TLS is redis.ssl: " .. err)
    assert.matches("is it a TLS port%? redis%.ssl%)", err)
  end)

  it("names redis.password, not redis.sentinel.password, when the master is in protected mode", function()
    local p = io.popen("hostname -I 2>/dev/null")
    addr = (p:read("*a") or ""):match("(%d+%.%d+%.%d+%.%d+)")
    p:close()
    if not addr or addr:match("^127%.") then return pending("this machine has no IPv4 address but loopback") end
    protected = h.start_redis(nil, "--bind 127.0.0.1 " .. addr .. " --protected-mode yes")
    psentinel = h.start_sentinel("sm-protected", protected.port, { host = addr })
    local err = refused({ sentinel = { master = "sm-protected", nodes = { "127.0.0.1:" .. psentinel.port } } })
    assert.matches("DENIED: the server is in protected mode", err)
    assert.is_nil(err:find("redis.sentinel.password", 1, true), "the master's password is redis.password: " .. err)
    assert.matches("give it requirepass %(and redis%.password here%)", err)
  end)
end)

describe("two Redlock factories on the same masters, different db, same dict and prefix", function()
  local servers

  setup(function() servers = h.parallel(3, function() return h.start_redis(nil) end) end)
  teardown(function()
    for _, r in ipairs(servers or {}) do r.stop() end
  end)

  it("lets a waiter in db 1 take a key its Redis has free, whatever a holder of the same name in db 0 does", function()
    local prefix = h.unique("dbs")
    local masters = {}
    for i, r in ipairs(servers) do masters[i] = "127.0.0.1:" .. r.port end
    local a = assert(dlock.new({ dict = "dlock", prefix = prefix, redis = { redlock = masters, db = 0 } }))
    local b = assert(dlock.new({ dict = "dlock", prefix = prefix, redis = { redlock = masters, db = 1 } }))
    local held = assert(a:acquire("job", { ttl = 5000 }))
    -- B's Redis (db 1 of every master) has the key free: B takes it at once, not at the end of its wait.
    local took, lease, err, retry = h.took(b.acquire, b, "job", { ttl = 5000, wait = 1500 })
    assert(lease, tostring(err) .. " after " .. took .. " s (retry_after " .. tostring(retry) .. ")")
    assert.is_true(took < 0.5, "took the key free in db 1 only after " .. took .. " s, held up by db 0's holder")
    assert.is_true(lease:release())
    assert.is_true(held:release())
  end)
end)

describe("two factories on one server, different db, same dict and prefix", function()
  local r

  setup(function() r = h.start_redis(nil) end)
  teardown(function() if r then r.stop() end end)

  it("keeps both leases of one key name in held() (each db has its own holder), also after one is released", function()
    local prefix = h.unique("dbs")
    local a = assert(dlock.new({ dict = "dlock", prefix = prefix, redis = { port = r.port, db = 0 } }))
    local b = assert(dlock.new({ dict = "dlock", prefix = prefix, redis = { port = r.port, db = 1 } }))
    local la = assert(a:acquire("job", { ttl = 5000 }))
    local lb = assert(b:acquire("job", { ttl = 5000 }))
    local function tokens()
      local out = {}
      for _, l in ipairs(a:held()) do
        if l.key == "job" or l.key == prefix .. "job" then out[#out + 1] = l.token end
      end
      table.sort(out)
      return out
    end
    local both = { la.token, lb.token }
    table.sort(both)
    local listed = tokens()
    assert.is_true(lb:release())
    local after = tokens()
    assert.is_true(la:release())
    assert.same(both, listed)
    -- db 0's lease is still held in Redis: its record (held(), status, crash recovery) must be too.
    assert.same({ la.token }, after)
  end)
end)

describe("a password written into a node list", function()
  it("is refused without being shown, as redis.host and a redis URL are (sentinels, cluster seeds, Redlock masters)", function()
    local cases = {
      { sentinel = { master = "m", nodes = { "redis://:node-secret-1@10.0.0.1:26379" } } },
      { sentinel = { master = "m", nodes = { "10.0.0.1:26379", ":node-secret-2@10.0.0.2:26379" } }, password = "x" },
      { cluster = { nodes = { "rediss://locker:node-secret-3@10.0.1.1:7000" } } },
      { redlock = { "user:node-secret-4@10.0.2.1:6379", "10.0.2.2:6379", "10.0.2.3:6379" } },
    }
    for i, redis in ipairs(cases) do
      local l, err = dlock.new({ dict = "dlock", redis = redis })
      assert.is_nil(l)
      assert.matches("must be \"host:port\" strings", err)
      assert.is_nil(err:find("node-secret-", 1, true), "case " .. i .. " shows the secret: " .. err)
    end
  end)
end)

describe("the keyspace of the shared dict's records", function()
  it("differs for two TLS factories that differ only in server_name (their pools do)", function()
    local function factory(name)
      return assert(dlock.new({ dict = "dlock", prefix = "ks:", redis = { host = "127.0.0.1", port = 6390,
        ssl = true, server_name = name } }))
    end
    local a, b = factory("a.redis.test"), factory("b.redis.test")
    assert.are_not.equal(a._store.redis.pool, b._store.redis.pool)
    -- the same record key for "k" on two different Redis behind an SNI proxy?
    local ra = ledger.recordKey(a._store.redis.keyspace, "ks:k", "", false)
    local rb = ledger.recordKey(b._store.redis.keyspace, "ks:k", "", false)
    assert.are_not.equal(ra, rb, "records of two Redis (by SNI) share one dict key: " .. ra)
  end)
end)

h.check_error_logs({})
