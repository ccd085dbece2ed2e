-- Bad input: every public entry point answers nil and a message that names
-- the problem and the value, never raises, never falls back to a default.
local h = require "helpers"
local dlock = require "resty.dlock"

local function new_err(opts)
  local ok, locks, err = pcall(dlock.new, opts)
  assert.is_true(ok, locks)
  assert.is_nil(locks)
  return err
end

describe("bad input", function()
  describe("dlock.new", function()
    local cases = {
      { nil, "dlock: new needs an options table with at least dict" },
      { "dlock", 'dlock: dlock.new options must be a table, got "dlock"' },
      { {}, "dlock: dict must be a string, got nil" },
      { { dict = "nope" }, 'dlock: no lua_shared_dict named nope (declare it in nginx.conf), got "nope"' },
      { { dict = "" }, 'dlock: dict must not be empty, got ""' },
      { { dict = "dlock", ttl_ms = 5 }, 'dlock: unknown option in dlock.new options, got "ttl_ms"' },
      { { dict = "dlock", [1] = true }, "dlock: unknown option in dlock.new options, got 1" },
      { { dict = "dlock", owner = "request" }, 'dlock: owner must be "random" or "worker", got "request"' },
      { { dict = "dlock", ttl = -5 }, "dlock: ttl must be a positive integer of ms, got -5" },
      { { dict = "dlock", ttl = 0 }, "dlock: ttl must be a positive integer of ms, got 0" },
      { { dict = "dlock", ttl = 1.5 }, "dlock: ttl must be a positive integer of ms, got 1.5" },
      { { dict = "dlock", ttl = "10" }, 'dlock: ttl must be a positive integer of ms, got "10"' },
      { { dict = "dlock", ttl = 0 / 0 }, "dlock: ttl must be a positive integer of ms, got nan" },
      { { dict = "dlock", ttl = math.huge }, "dlock: ttl must be at most 86400000, got inf" },
      { { dict = "dlock", ttl = 1e12 }, "dlock: ttl must be at most 86400000, got 1000000000000" },
      { { dict = "dlock", wait = -1 }, "dlock: wait must be a non-negative integer of ms, got -1" },
      { { dict = "dlock", redis = "127.0.0.1" }, 'dlock: redis must be a table, got "127.0.0.1"' },
      { { dict = "dlock", redis = { hots = "x" } }, 'dlock: unknown option in redis, got "hots"' },
      { { dict = "dlock", redis = { port = "6379" } }, 'dlock: redis.port must be an integer port number, got "6379"' },
      { { dict = "dlock", redis = { port = 70000 } }, "dlock: redis.port must be at most 65535, got 70000" },
      { { dict = "dlock", redis = { host = "" } }, 'dlock: redis.host must not be empty, got ""' },
      { { dict = "dlock", redis = { path = "/tmp/r.sock" } }, 'dlock: redis.path must start with "unix:", got "/tmp/r.sock"' },
      { { dict = "dlock", redis = { path = "unix:/r.sock", port = 1 } }, 'dlock: redis.path excludes redis.host and redis.port, got "unix:/r.sock"' },
      { { dict = "dlock", redis = { connect_timeout = 0 } }, "dlock: redis.connect_timeout must be a positive integer of ms, got 0" },
      { { dict = "dlock", redis = { read_timeout = -1 } }, "dlock: redis.read_timeout must be a positive integer of ms, got -1" },
      { { dict = "dlock", redis = { db = -1 } }, "dlock: redis.db must be a non-negative integer, got -1" },
      { { dict = "dlock", redis = { pool_size = 0 } }, "dlock: redis.pool_size must be a positive integer, got 0" },
      { { dict = "dlock", redis = { username = "u" } }, "dlock: redis.username needs redis.password" },
      { { dict = "dlock", redis = { password = 1234 } }, "dlock: redis.password must be a string, got a number" },
      { { dict = "dlock", redis = { ssl = "yes" } }, 'dlock: redis.ssl must be a boolean, got "yes"' },
      { { dict = "dlock", redis = { ssl_verify = true } }, "dlock: redis.ssl_verify and redis.server_name need redis.ssl = true" },
      { { dict = "dlock", redis = { server_name = "redis.example" } }, "dlock: redis.ssl_verify and redis.server_name need redis.ssl = true" },
      { { dict = "dlock", redis = { password = {} } }, "dlock: redis.password must be a string, got a table" },
      { { dict = "dlock", redis = { cluster = { nodes = { "127.0.0.1:7000" } }, host = "x" } },
        'dlock: redis.cluster excludes redis.host, got "x"' },
      { { dict = "dlock", redis = { cluster = { nodes = { "127.0.0.1:7000" } }, path = "unix:/r.sock" } },
        'dlock: redis.cluster excludes redis.path, got "unix:/r.sock"' },
      { { dict = "dlock", redis = { cluster = { nodes = { "127.0.0.1:7000" } }, db = 1 } },
        "dlock: redis.db is refused with redis.cluster (Redis Cluster has one database), got 1" },
      { { dict = "dlock", redis = { cluster = { nodes = { "127.0.0.1:7000" }, max_redirects = 0 } } },
        "dlock: redis.cluster.max_redirects must be a positive integer, got 0" },
      { { dict = "dlock", redis = { cluster = { nodes = { "127.0.0.1:7000" }, max_redirects = "x" } } },
        'dlock: redis.cluster.max_redirects must be a positive integer, got "x"' },
      { { dict = "dlock", redis = { cluster = { nodes = { "127.0.0.1:7000" }, max_redirects = 17 } } },
        "dlock: redis.cluster.max_redirects must be at most 16, got 17" },
      { { dict = "dlock", redis = { cluster = { nodes = { "127.0.0.1:7000" }, max_redirect = 3 } } },
        'dlock: unknown option in redis.cluster, got "max_redirect"' },
      { { dict = "dlock", redis = { cluster = { max_redirects = 3 } } },
        'dlock: redis.cluster.nodes must be a list of "host:port" strings, got nil' },
      { { dict = "dlock", redis = { cluster = "127.0.0.1:7000" } }, 'dlock: redis.cluster must be a table, got "127.0.0.1:7000"' },
      { { dict = "dlock", redis = { redlock = { "127.0.0.1:7000", "127.0.0.1:7001" } } },
        "dlock: redis.redlock needs at least 3 independent masters, got 2" },
      { { dict = "dlock", redis = { redlock = { "127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7000" } } },
        'dlock: redis.redlock names 127.0.0.1:7000 twice: its masters must be independent, got "127.0.0.1:7000"' },
      { { dict = "dlock", redis = { redlock = { "127.0.0.1:7000", "127.0.0.1:7001", "nope" } } },
        'dlock: redis.redlock must be "host:port" strings, got "nope"' },
      { { dict = "dlock", redis = { redlock = { "127.0.0.1:7000", "127.0.0.1:7001", "[::1]:70000" } } },
        'dlock: redis.redlock must be "host:port" strings, got "[::1]:70000"' },
      { { dict = "dlock", redis = { redlock = { "127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7002" }, replicas = 1 } },
        "dlock: redis.replicas is refused with redis.redlock (a Redlock majority is its replication: WAIT does not apply), got 1" },
      { { dict = "dlock", redis = { redlock = { "127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7002" }, port = 6379 } },
        "dlock: redis.redlock excludes redis.port, got 6379" },
      { { dict = "dlock", redis = { sentinel = { master = "m", nodes = { "127.0.0.1:1" } }, cluster = { nodes = { "127.0.0.1:7000" } } } },
        "dlock: redis.sentinel excludes redis.cluster, got a table" },
      { { dict = "dlock", redis = { sentinel = { master = "m", nodes = { "127.0.0.1:1" }, password = 5 } } },
        "dlock: redis.sentinel.password must be a string, got a number" },
      { { dict = "dlock", redis = { sentinel = { master = "m", nodes = { "127.0.0.1:1" }, username = "u" } } },
        "dlock: redis.sentinel.username needs redis.sentinel.password" },
    }
    for i, c in ipairs(cases) do
      it("rejects case " .. i .. ": " .. c[2], function()
        assert.equal(c[2], new_err(c[1]))
      end)
    end
  end)

  describe("redis option defaults", function()
    local redis = require "resty.dlock.redis.client"

    it("fills in every default of an empty redis table", function()
      local conf = assert(redis.parse({}))
      assert.equal("127.0.0.1", conf.host)
      assert.equal(6379, conf.port)
      assert.equal(0, conf.db)
      assert.equal(1000, conf.connect_timeout)
      assert.equal(1000, conf.read_timeout)
      assert.equal(64, conf.pool_size)
      assert.equal(60000, conf.keepalive_timeout)
      assert.equal(0, conf.replicas)
      assert.equal(50, conf.replicas_timeout)
      assert.is_false(conf.ssl)
      assert.is_false(conf.ssl_verify)
      assert.is_nil(conf.backlog)
      assert.is_nil(conf.path)
      assert.is_nil(conf.password)
      assert.equal(5, conf.max_redirects)
      assert.equal("standalone", conf.topology)
      assert.equal("127.0.0.1:6379", conf.endpoint)
      assert.equal("dlock:127.0.0.1:6379:0", conf.pool)
      assert.same(conf, assert(redis.parse(nil)))
    end)

    it("gives a factory made without connect_timeout 1000 ms, and leaves the caller's table alone", function()
      local opts = { port = h.redis_port }
      local locks = assert(dlock.new({ dict = "dlock", redis = opts }))
      assert.equal(1000, locks._store.redis.connect_timeout)
      assert.same({ port = h.redis_port }, opts)
    end)

    it("gives a cluster max_redirects 5 and each seed node the factory's settings", function()
      local conf = assert(redis.parse({ cluster = { nodes = { "10.0.0.1:7000", "[::1]:7001" } }, password = "pw", read_timeout = 300 }))
      assert.equal("cluster", conf.topology)
      assert.equal(5, conf.max_redirects)
      -- An IPv6 address keeps its brackets: nginx connects to it so, and "[::1]:7001" names it unambiguously.
      assert.equal("cluster 10.0.0.1:7000,[::1]:7001", conf.endpoint)
      assert.equal(2, #conf.nodes)
      assert.equal("[::1]", conf.nodes[2].host)
      assert.equal("[::1]:7001", conf.nodes[2].endpoint)
      assert.equal(7001, conf.nodes[2].port)
      assert.equal(300, conf.nodes[2].read_timeout)
      -- The factory's credentials (the password itself is readable from neither).
      assert.is_truthy(conf.credentials)
      assert.equal(conf.credentials, conf.nodes[2].credentials)
      assert.is_nil(conf.nodes[2].password)
      assert.equal(16, assert(redis.parse({ cluster = { nodes = { "h:1" }, max_redirects = 16 }, db = 0 })).max_redirects)
    end)

    it("takes three Redlock masters, and replicas = 0 beside them", function()
      local conf = assert(redis.parse({ redlock = { "a:1", "b:2", "c:3" }, replicas = 0 }))
      assert.equal("redlock", conf.topology)
      assert.equal(3, #conf.nodes)
      assert.equal("redlock a:1,b:2,c:3", conf.endpoint)
    end)
  end)

  describe("option schemas", function()
    local schema = require "resty.dlock.core.schema"

    it("refuses, at compile time, a spec that names an option the schema lacks", function()
      local ok, err = pcall(schema.compile, "t", { { name = "a", kind = "boolean", excludes = { "b" } } })
      assert.is_false(ok)
      assert.matches("dlock: schema t: a refers to no option b", err, 1, true)
    end)

    it("hands back a fresh table with defaults, never the caller's", function()
      local check = schema.compile("t", {
        { name = "n", kind = "integer", min = 1, max = 9, unit = "a digit", default = 5 },
        { name = "s", kind = "string", maxLen = 3, secret = true },
      })
      local given = { s = "abc" }
      local out = assert(check(given))
      assert.are_not.equal(given, out)
      assert.same({ n = 5, s = "abc" }, out)
      assert.same({ s = "abc" }, given)
      local _, err = check({ s = "abcd" })
      assert.equal("dlock: t.s must be at most 3 bytes, got 4 bytes", err)
      _, err = check({ s = true })
      assert.equal("dlock: t.s must be a string, got a boolean", err)
      _, err = check({ n = 10 })
      assert.equal("dlock: t.n must be at most 9, got 10", err)
    end)
  end)

  describe("acquire", function()
    local locks
    setup(function() locks = h.locks() end)

    local function acquire_err(key, opts)
      local ok, lease, err = pcall(locks.acquire, locks, key, opts)
      assert.is_true(ok, lease)
      assert.is_nil(lease)
      return err
    end

    it("rejects a missing key", function()
      assert.equal("dlock: key must be a string, got nil", acquire_err(nil))
    end)
    it("rejects an empty key", function()
      assert.equal('dlock: key must not be empty, got ""', acquire_err(""))
    end)
    it("rejects a non-string key", function()
      assert.equal("dlock: key must be a string, got 42", acquire_err(42))
      assert.equal("dlock: key must be a string, got a table", acquire_err({}))
    end)
    it("rejects a key over " .. dlock.MAX_KEY_LEN .. " bytes", function()
      assert.equal("dlock: key must be at most 512 bytes, got 513 bytes", acquire_err(string.rep("k", 513)))
      local lease = assert(locks:acquire(string.rep("k", 512)))
      lease:release()
    end)
    it("accepts binary keys as they are", function()
      local lease = assert(locks:acquire("\0\255\n key"))
      assert.equal(lease.token, h.cmd(nil, "get", locks.prefix .. "\0\255\n key"))
      lease:release()
    end)
    it("rejects bad ttl and wait", function()
      assert.equal("dlock: ttl must be a positive integer of ms, got -5", acquire_err("a", { ttl = -5 }))
      assert.equal("dlock: ttl must be at most 86400000, got 86400001", acquire_err("a", { ttl = 86400001 }))
      assert.equal("dlock: wait must be a non-negative integer of ms, got -1", acquire_err("a", { wait = -1 }))
      assert.equal("dlock: wait must be a non-negative integer of ms, got nan", acquire_err("a", { wait = 0 / 0 }))
    end)
    it("rejects unknown and misspelt options", function()
      assert.equal('dlock: unknown option in acquire options, got "wiat"', acquire_err("a", { wiat = 100 }))
      assert.equal('dlock: acquire options must be a table, got "fast"', acquire_err("a", "fast"))
    end)
  end)

  describe("lease and with", function()
    it("rejects a bad ttl on extend and keeps the lease", function()
      local locks = h.locks()
      local lease = assert(locks:acquire("a", { ttl = 5000 }))
      local ok, err = lease:extend(-1)
      assert.is_nil(ok)
      assert.equal("dlock: ttl must be a positive integer of ms, got -1", err)
      assert.equal(5000, lease.ttl)
      assert.is_true(lease:release())
    end)
    it("rejects a with() without a function", function()
      local locks = h.locks()
      local ok, err = locks:with("a", nil, "not a function")
      assert.is_nil(ok)
      assert.equal('dlock: with needs a function, got "not a function"', err)
    end)
  end)

  -- A method called with "." where ":" was meant gets its object as nil (or
  -- the first argument in its place): nil and the error, never a raise.
  describe("methods called without their object", function()
    --- f(...)'s results; a raise fails the test, naming the error.
    local function returns(f, ...)
      local r = { pcall(f, ...) }
      assert(r[1], "raised: " .. tostring(r[2]))
      return unpack(r, 2, 3)
    end
    local function refused(call, got, f, ...)
      local v, err = returns(f, ...)
      assert.is_nil(v)
      assert.equal("dlock: " .. call .. ' was called without its object (with "." where ":" was meant), got ' .. got, err)
    end

    it("leases: release, extend and valid (false)", function()
      local locks = h.locks()
      for _, lease in ipairs({ assert(locks:acquire("a", { ttl = 5000 })), assert(locks:acquire_all({ "b", "c" }, { ttl = 5000 })),
                               assert(h.locks({ reentrant = true }):acquire("d", { ttl = 5000 })) }) do
        refused("lease:release()", "nil", lease.release)
        refused("lease:release()", "a table", lease.release, {})
        refused("lease:extend()", "5000", lease.extend, 5000)
        assert.is_false(returns(lease.valid))
        assert.is_true(lease:valid())
        assert.is_true(lease:release())
      end
    end)

    it("factories: acquire, acquire_all, held, with", function()
      local locks = h.locks()
      refused("locks:acquire()", "nil", locks.acquire)
      refused("locks:acquire()", '"k"', locks.acquire, "k", { ttl = 1 })
      refused("locks:acquire_all()", "a table", locks.acquire_all, { "a" }, { "b" })
      refused("locks:held()", "nil", locks.held)
      local _, err = returns(locks.with, "k", nil, function() end)
      assert.equal('dlock: with() was called without its object (with "." where ":" was meant), got "k"', err)
      local sem = assert(require("resty.dlock.semaphore").new({ dict = "dlock", permits = 2, redis = h.redis_opts() }))
      refused("sem:acquire()", "nil", sem.acquire)
      refused("sem:held()", "nil", sem.held)
      local permit = assert(sem:acquire("p", { ttl = 5000 }))
      refused("lease:release()", "nil", permit.release)
      assert.is_true(permit:release())
    end)

    it("guards of every mode: access and log raise nothing (outside a request they only say so)", function()
      local gateway = require "resty.dlock.gateway"
      local redis = h.redis_opts()
      for _, o in ipairs({ { mode = "dedup" }, { mode = "rate", rate = 5 }, { mode = "idempotency", scope = false } }) do
        o.key, o.on_error, o.redis = "$arg_k", "deny", redis
        local g = assert(gateway.new(o))
        returns(g.access)
        returns(g.log)
      end
    end)
  end)
end)

local gateway_for_lists = require "resty.dlock.gateway"

--- dlock.new over `redis`, then one acquire when new accepted it: new's error, or the acquire's.
local function first_error(redis)
  local locks, err = dlock.new({ dict = "dlock", redis = redis })
  if locks == nil then return nil, err end
  local lease, aerr = locks:acquire(h.unique("hunt"))
  if lease then lease:release() end
  return locks, aerr
end

describe("bad redis options, refused by dlock.new, never by the first acquire", function()
  it("refuses a host with a port in it at dlock.new, naming redis.host", function()
    local host = "127.0.0.1:" .. h.redis_port
    local locks, err = first_error({ host = host, connect_timeout = 200 })
    assert.is_true(locks == nil, "accepted redis.host = " .. host .. "; the first acquire then said: " .. tostring(err))
    assert.matches("^dlock: redis%.host .*, got \"127%.0%.0%.1:%d+\"$", err)
  end)

  it("refuses a URL with credentials as redis.host, and no message shows its password", function()
    local locks, err = first_error({ host = "redis://:s3cret@127.0.0.1", port = h.redis_port, connect_timeout = 200 })
    assert.is_nil(tostring(err):find("s3cret", 1, true), "a message shows the password: " .. tostring(err))
    assert.is_true(locks == nil, "accepted a URL as redis.host")
  end)

  it("refuses a redis URL string given for the table without showing its password", function()
    local locks, err = dlock.new({ dict = "dlock", redis = "redis://:s3cret@127.0.0.1:6379" })
    assert.is_nil(locks)
    assert.is_nil(err:find("s3cret", 1, true), "the message shows the password: " .. err)
  end)

  it("refuses redis.path = \"unix:\" (no socket path) at dlock.new", function()
    local locks, err = first_error({ path = "unix:", connect_timeout = 200 })
    assert.is_true(locks == nil, "accepted redis.path = \"unix:\"; the first acquire then said: " .. tostring(err))
    assert.matches("^dlock: redis%.path .*, got \"unix:\"$", err)
  end)

  it("refuses node lists with fields other than 1..n (cluster.nodes, sentinel.nodes, redlock)", function()
    local port = h.redis_port
    local cases = {
      { "redis.cluster.nodes", { cluster = { nodes = { "127.0.0.1:" .. port, extra = "127.0.0.1:7001" } } } },
      { "redis.sentinel.nodes", { sentinel = { master = "m", nodes = { "127.0.0.1:26379", extra = "127.0.0.1:26380" } } } },
      { "redis.redlock", { redlock = { "127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003", extra = "127.0.0.1:7004" } } },
    }
    local accepted = {}
    for _, c in ipairs(cases) do
      local locks, err = dlock.new({ dict = "dlock", redis = c[2] })
      if locks ~= nil or not err:find("^dlock: " .. c[1]:gsub("%.", "%%.") .. " .*, got ") then
        accepted[#accepted + 1] = c[1] .. " (" .. tostring(err) .. ")"
      end
    end
    assert.same({}, accepted, "accepted with an extra field, which is ignored: " .. table.concat(accepted, ", "))
  end)
end)

describe("gateway.new's list options with fields other than 1..n", function()
  it("mode idempotency refuses methods with fields other than 1..n (PATCH would go unguarded)", function()
    local g, err = gateway_for_lists.new({ name = (h.unique("hunt-idem"):gsub("[^%w_%-%.]", "_")), mode = "idempotency", key = "$http_idempotency_key",
      scope = false, on_error = "deny", redis = { port = h.redis_port }, methods = { "POST", also = "PATCH" } })
    assert.is_true(g == nil, "methods = { \"POST\", also = \"PATCH\" } was accepted; guarded: " ..
      (g and table.concat((function() local t = {} for m in pairs(g._methods) do t[#t + 1] = m end return t end)(), ",") or ""))
    assert.matches("^dlock: methods .*, got ", err)
  end)

  it("mode mutex refuses shared with fields other than 1..n (HEAD would take the lock exclusive)", function()
    local g, err = gateway_for_lists.new({ name = (h.unique("hunt-mutex"):gsub("[^%w_%-%.]", "_")), mode = "mutex", key = "$arg_k", on_error = "deny",
      redis = { port = h.redis_port }, shared = { "GET", also = "HEAD" } })
    assert.is_true(g == nil, "shared = { \"GET\", also = \"HEAD\" } was accepted")
    assert.matches("^dlock: shared .*, got ", err)
  end)
end)

describe("bad gateway options", function()
  local gateway = require "resty.dlock.gateway"
  local function err_of(opts)
    local ok, g, err = pcall(gateway.new, opts)
    assert.is_true(ok, g)
    assert.is_nil(g)
    return err
  end
  local base = { mode = "dedup", key = "$http_idempotency_key", on_error = "allow", redis = { port = h.redis_port } }
  local function with(over)
    local o = {}
    for k, v in pairs(base) do o[k] = v end
    for k, v in pairs(over) do o[k] = v end
    return o
  end

  local cases = {
    { nil, "dlock: gateway.new needs an options table with mode, key and on_error" },
    { with({ mode = "lock" }), 'dlock: mode must be "dedup", "concurrency", "throttle", "mutex", "idempotency" or "rate", got "lock"' },
    { with({ key = "idempotency_key" }), 'dlock: key must name at least one nginx variable ($http_x, $arg_x, $remote_addr...) or be a function, got "idempotency_key"' },
    { with({ key = 42 }), 'dlock: key must be a string of nginx variables ("$http_idempotency_key") or a function, got 42' },
    { with({ key = "$http_x:$" }), 'dlock: key: a "$" must start a variable name ($name or ${name}), got "$http_x:$"' },
    { with({ key = "${arg_x" }), 'dlock: key: a "$" must start a variable name ($name or ${name}), got "${arg_x"' },
    { { mode = "dedup", key = "$http_x" }, 'dlock: on_error must be "allow" (fail open) or "deny" (fail closed), got nil' },
    { with({ on_error = "open" }), 'dlock: on_error must be "allow" (fail open) or "deny" (fail closed), got "open"' },
    { with({ on_missing = "skip" }), 'dlock: on_missing must be "pass" or "reject", got "skip"' },
    { with({ permits = 3 }), "dlock: permits applies to mode concurrency only, not dedup, got 3" },
    { with({ wait = 100 }), "dlock: wait applies to modes concurrency and mutex only, not dedup, got 100" },
    { with({ mode = "throttle", hold = 100 }), "dlock: hold applies to mode dedup only, not throttle, got 100" },
    { with({ mode = "throttle", renew = true }), "dlock: renew does not apply to mode throttle (its lock is never released), got true" },
    { with({ mode = "concurrency" }), "dlock: permits must be a positive integer, got nil" },
    { with({ reject_status = 99 }),
      "dlock: reject_status must be an HTTP status code from 300 to 599 (a refusal must not read as a success), got 99" },
    { with({ error_status = 200 }),
      "dlock: error_status must be an HTTP status code from 300 to 599 (a refusal must not read as a success), got 200" },
    { with({ breaker_cooldown = 0 }), "dlock: breaker_cooldown must be a positive integer of ms, got 0" },
    { with({ headers = { ["X-A"] = 1 } }), 'dlock: headers must be a table of name = value strings, got "X-A"' },
    { with({ headers = { ["X-A: b"] = "c" } }), 'dlock: headers: a header name must be an HTTP token, got "X-A: b"' },
    { with({ headers = { ["X-A"] = "b\r\nSet-Cookie: s=1" } }),
      'dlock: headers: the value of X-A has a control character, got "b\\13\\nSet-Cookie: s=1"' },
    { with({ name = "has space" }), "dlock: name may hold letters, digits, '_', '-' and '.' only, got \"has space\"" },
    { with({ ttl = -1 }), "dlock: ttl must be a positive integer of ms, got -1" },
    { with({ dict = "missing" }), 'dlock: no lua_shared_dict named missing (declare it in nginx.conf), got "missing"' },
    { with({ holdd = 5 }), 'dlock: unknown option in gateway.new options, got "holdd"' },
  }
  for i, c in ipairs(cases) do
    it("rejects case " .. i .. ": " .. c[2], function()
      assert.equal(c[2], err_of(c[1]))
    end)
  end

  it("rejects a second guard with the same name", function()
    assert(gateway.new(with({ name = "twice" })))
    assert.equal('dlock: a guard with this name exists already, got "twice"', err_of(with({ name = "twice" })))
  end)
end)

-- The guards' methods called with "." by "methods called without their object", on purpose.
h.check_error_logs({ "dlock: guard:%a+%(%) was called without its guard" })
