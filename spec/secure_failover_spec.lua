-- Failovers as production runs them: mutual TLS everywhere (ssl_verify against
-- the servers' CA; every server, sentinel and node asks for a client
-- certificate, as redis-server does by default), every server with a password
-- and an ACL user with only what the locks need.
-- Sentinel, with sentinels that want a password of their own and speak TLS to
-- each other: locks, readers, permits and rate limits taken before a failover
-- are on the new master (replicas = 1), and the library finds it through the
-- same credentials without a reload; the same through an operator's nginx.conf
-- of guards (nginx/spec-secure.conf), over HTTP. Cluster: a master killed, its
-- replica promoted, the lock taken before still held there; the same conf's
-- guards on a Cluster keep a permit, a used-up rate and a stored payment. Redlock: a master
-- killed, the lock taken before still exclusive on the majority left.
local h = require "helpers"
local dlock = require "resty.dlock"

local PASSWORD = "default-secret-1"
-- The lock user with only what the locks need (the README's rule): its keys and
-- wake-up channels, no ROLE (the sentinels' word is taken for the master, and a
-- demoted one's READONLY has them asked again), no INFO nor CONFIG.
local USER = { name = "locker", password = "acl-secret-2", rules = h.least_privilege_rules({ "secure" }) }
local SENTINEL_PASSWORD = "sentinel-secret-3"

describe("redis.sentinel with mutual TLS (ssl_verify, a client certificate), an ACL user and sentinels with a password of their own", function()
  local set

  setup(function()
    set = h.start_sentinel_set({ name = "secure", replicas = 2, tls = "mutual", password = PASSWORD, user = USER,
      sentinel_password = SENTINEL_PASSWORD })
  end)
  teardown(function() if set then set.stop() end end)

  local function redis(extra)
    local o = { sentinel = { master = "secure", nodes = set.nodes(), password = SENTINEL_PASSWORD },
      username = USER.name, password = USER.password, ssl = true, ssl_verify = true, server_name = "localhost",
      connect_timeout = 500, read_timeout = 1000 }
    for k, v in pairs(h.client_cert()) do o[k] = v end
    for k, v in pairs(extra or {}) do o[k] = v end
    return o
  end

  it("names the master's TLS port, and takes a lock there over TLS as the ACL user", function()
    local master = set.master_port()   -- h.cmd reaches it on its plaintext port, as an operator's redis-cli would
    assert.equal(set.master.tls_port, master)
    local l = assert(dlock.new({ dict = "dlock", prefix = h.unique("secure"), redis = redis() }))
    local lease = assert(l:acquire("k", { ttl = 5000 }))
    assert.equal(lease.token, h.cmd(master, "get", l.prefix .. "k"))
    -- The lock's connections are the ACL user's (CLIENT LIST names the user of each connection).
    assert.matches("user=" .. USER.name, h.cmd(master, "client", "list"))
    assert.is_true(lease:release())
    assert.equal(0, h.cmd(master, "exists", l.prefix .. "k"))
  end)

  it("refuses a wrong sentinel password, naming the sentinels asked and never the secret", function()
    local o = redis()
    o.sentinel.password = "wrong-sentinel-secret"
    local l = assert(dlock.new({ dict = "dlock", prefix = h.unique("secure"), redis = o }))
    local lease, err = l:acquire("k")
    assert.is_nil(lease)
    assert.matches("^dlock: redis sentinel secure: no sentinel named the master", err)
    assert.matches("WRONGPASS", err)
    assert.is_nil(err:find("wrong-sentinel-secret", 1, true), err)
  end)

  it("keeps a lock, a reader, a permit and a full rate limit taken before a failover (replicas = 1): the new master " ..
     "holds each and refuses past it, and every kind works there within a few seconds, under the same credentials", function()
    local prefix = h.unique("securefail")
    local acked = redis({ replicas = 1 })
    local locks = assert(dlock.new({ dict = "dlock", prefix = prefix, redis = acked }))
    local sems = assert(require("resty.dlock.semaphore").new({ dict = "dlock", prefix = prefix .. "s:", permits = 1,
      redis = acked }))
    local lim = assert(require("resty.dlock.rate").new({ dict = "dlock", prefix = prefix .. "r:", rate = 2,
      period = 60000, redis = acked }))
    local old = set.master_port()
    assert.is_true(h.wait_replicated(old, 15, 2), "the replicas do not acknowledge the master's writes")

    local lock = assert(locks:acquire("lock", { ttl = 30000 }))
    local reader = assert(locks:acquire("doc", { shared = true, ttl = 30000 }))
    local permit = assert(sems:acquire("pool", { ttl = 30000 }))
    for i = 1, 2 do assert.equal(0, (lim:incoming("client", true)), "request " .. i) end

    local new = set.failover()
    local t0 = h.now()
    assert.is_true(new ~= old)
    assert.equal(lock.token, h.cmd(new, "get", prefix .. "lock"))

    -- Each held before is refused beside on the new master, through TLS and the ACL user.
    local other = assert(dlock.new({ dict = "dlock", prefix = prefix, redis = redis() }))
    local l2, err, _, at = h.decided(10, function() return other:acquire("lock", { wait = 0 }) end)
    assert.is_nil(l2, "a second holder got in after the failover")
    assert.equal("busy", err)
    assert.is_true(at - t0 < 5, "Redis decided " .. (at - t0) .. " s after the sentinels named the new master")
    assert.is_nil(select(1, other:acquire("doc", { wait = 0 })), "a writer got in beside the reader")
    assert.is_nil(select(1, sems:acquire("pool", { wait = 0 })), "a second permit of one")
    local delay, why = lim:incoming("client", false)
    assert.is_nil(delay, "the rate limit's state was lost in the failover")
    assert.equal("rejected", why)

    -- Given back there, and taken again.
    assert.is_true(lock:release())
    assert.is_true(reader:release())
    assert.is_true(permit:release())
    assert.equal(0, h.cmd(new, "exists", prefix .. "lock"))
    local again = assert(other:acquire("lock", { ttl = 5000 }))
    assert.equal(again.token, h.cmd(new, "get", prefix .. "lock"))
    assert.is_true(again:release())
    -- A permit acknowledged by a replica again once the sentinels moved the other replica over (refused until then:
    -- "only 0 of 1 replica(s) acknowledged", and released).
    assert.is_true(h.wait_replicated(new, 15), "no replica of the new master acknowledges its writes")
    assert.is_true(assert(sems:acquire("pool", { ttl = 5000, wait = 0 })):release())

    -- The status page names the new master, reached over TLS.
    local ep = assert(require("resty.dlock.status").report()).topology["sentinel secure"]
    assert.equal("sentinel", ep.kind)
    assert.equal("127.0.0.1:" .. new, ep.master)
    assert.is_true(ep.tls)
  end)
end)

--- The operator's nginx.conf of guards (nginx/spec-secure.conf) on `topology` (the redis table's lines naming
--- where the keys live), as the ACL user; the nginx and its backend's port.
local function start_gateway(topology)
  local backend = h.free_port()
  local cert = h.client_cert()
  return h.start_nginx("spec-secure.conf", { BACKEND_PORT = backend, TLS_CA = h.env.prefix .. "/tls/ca.pem",
    TOPOLOGY = topology, ACL_USER = USER.name, ACL_PASSWORD = USER.password,
    CLIENT_CERT = cert.ssl_client_cert, CLIENT_KEY = cert.ssl_client_priv_key }), backend
end
--- A request to the gateway nginx n (a failover may hold it up).
local function gateway_get(n, path, opts)
  opts = opts or {}
  opts.timeout = 15000
  return assert(h.http(n.port, path, opts))
end
--- Requests of `key` in the backend now.
local function backend_in_flight(backend, key)
  local _, _, in_flight = h.backend_stats(backend, key)
  return in_flight
end
--- A payment of the idempotency guard: the first POST with its key, or a retry.
local function pay(n, key)
  return gateway_get(n, "/payments?key=" .. key .. "&ms=50", { method = "POST", body = "amount=10",
    headers = { ["Idempotency-Key"] = "\"" .. key .. "\"", Authorization = "Bearer client-a" } })
end
--- After a failover, the payment's retry: refused (503) until the guard reaches the new master, never run again,
--- then the first response replayed from there; the backend ran it once.
local function replayed_after_failover(n, backend, key, first)
  local res
  assert.is_true(h.eventually(5, function()
    res = pay(n, key)
    assert.is_true(res.status == 200 or res.status == 503, "a retry after the failover got " .. res.status)
    return res.status == 200
  end), "no replay within 5 s of the failover")
  assert.equal("true", res.headers["idempotent-replayed"])
  assert.equal(first.body, res.body)
  assert.equal(1, (h.backend_stats(backend, key)))
end

describe("an operator's nginx.conf of gateway guards on that Sentinel set", function()
  local set, n, backend

  setup(function()
    set = h.start_sentinel_set({ name = "gateway", replicas = 2, tls = "mutual", password = PASSWORD, user = USER,
      sentinel_password = SENTINEL_PASSWORD })
    local nodes = set.nodes()
    n, backend = start_gateway(string.format(
      'sentinel = { master = "gateway", nodes = { "%s", "%s", "%s" }, password = "%s" }, replicas = 1',
      nodes[1], nodes[2], nodes[3], SENTINEL_PASSWORD))
  end)
  teardown(function()
    if n then n.stop() end
    if set then set.stop() end
  end)

  local function get_with(path, opts) return gateway_get(n, path, opts) end
  local function get(path) return get_with(path, {}) end
  local function in_flight(key) return backend_in_flight(backend, key) end

  it("keeps a request's permit and a client's used-up rate through a failover: refused on the new master as before, " ..
     "the permit given back there when the request ends", function()
    assert.is_true(h.wait_replicated(set.master_port(), 15, 2), "the replicas do not acknowledge the master's writes")
    -- A request holds the one permit of key c for 8 s, past a slow failover (once it is in the backend, a second
    -- request of c is refused); a client uses up its 2 per minute.
    local holder = ngx.thread.spawn(get, "/g/one_at_a_time?key=c&ms=8000")
    assert.is_true(h.eventually(2, function() return in_flight("c") == 1 end), "the holder never reached the backend")
    assert.equal(429, get("/g/one_at_a_time?key=c").status)
    assert.equal(200, get("/g/per_minute?key=r").status)
    assert.equal(200, get("/g/per_minute?key=r").status)
    assert.equal(429, get("/g/per_minute?key=r").status)

    local old = set.master_port()
    local new = set.failover()
    assert.is_true(new ~= old)
    assert.equal(1, h.cmd(new, "zcard", h.guard_key("one_at_a_time", "c")), "the permit is not on the new master")
    -- Until the workers find the new master a request may meet the demoted one: refused with error_status, never let
    -- through. Then Redis decides again, with what the old master held.
    local status
    assert.is_true(h.eventually(5, function()
      status = get("/g/one_at_a_time?key=c").status
      assert.is_true(status == 429 or status == 503, "a second request got status " .. status)
      return status == 429
    end), "the guard did not decide on the new master within 5 s: " .. tostring(status))
    local rs = get("/g/per_minute?key=r").status
    assert.is_true(rs == 429 or rs == 503, "the rate limit let a client through after the failover: " .. rs)
    assert.is_true(h.eventually(5, function() return get("/g/per_minute?key=r").status == 429 end))

    -- The holder's request ends; its permit goes back to the new master (the release sent from the log phase), and
    -- the next request of c gets in (its acquire acknowledged by the replica the sentinels moved over).
    local ok, res = ngx.thread.wait(holder)
    assert.is_true(ok)
    assert.equal(200, res.status)
    assert.is_true(h.wait_replicated(new, 15), "no replica of the new master acknowledges its writes")
    assert.is_true(h.eventually(3, function() return get("/g/one_at_a_time?key=c").status == 200 end))
    assert.is_true(h.eventually(2, function() return h.cmd(new, "zcard", h.guard_key("one_at_a_time", "c")) == 0 end))
  end)

  it("replays a stored response after a failover: the retry of a payment gets the first response from the new " ..
     "master, and the backend never runs it twice", function()
    local first = pay(n, "pay1")
    assert.equal(200, first.status)
    assert.is_nil(first.headers["idempotent-replayed"])
    -- Stored just after the response's last bytes: a retry then is a replay.
    local again = pay(n, "pay1")
    assert.equal("true", again.headers["idempotent-replayed"])
    assert.equal(first.body, again.body)
    -- Every write so far on both replicas, whichever the sentinels promote.
    assert.is_true(h.wait_replicated(set.master_port(), 15, 2), "the replicas do not acknowledge the master's writes")
    set.failover()
    replayed_after_failover(n, backend, "pay1", first)
  end)

  it("decides the same after nginx -s reload: new workers find the master through the sentinels, with every " ..
     "credential, and the used-up rate stays used up", function()
    -- A write waits for a replica (replicas = 1): after the last test's failover the sentinels move one over in time.
    assert.is_true(h.wait_replicated(set.master_port(), 15), "no replica of the master acknowledges its writes")
    local old = n.workers()
    assert.is_true(n.reload())
    assert.is_true(n.replaced(old, 2))
    assert.equal(429, get("/g/per_minute?key=r").status)
    assert.equal(200, get("/g/per_minute?key=fresh").status)
    local holder = ngx.thread.spawn(get, "/g/one_at_a_time?key=after&ms=1000")
    assert.is_true(h.eventually(2, function() return in_flight("after") == 1 end), "the holder never reached the backend")
    assert.equal(429, get("/g/one_at_a_time?key=after").status)
    local ok, res = ngx.thread.wait(holder)
    assert.is_true(ok)
    assert.equal(200, res.status)
  end)
end)

describe("redis.cluster with mutual TLS (ssl_verify, a client certificate) and an ACL user, a master killed", function()
  local c

  setup(function()
    c = h.start_cluster({ tls = "mutual", args = { "--requirepass " .. PASSWORD, "--masterauth " .. PASSWORD,
      "--user " .. USER.name .. " on '>" .. USER.password .. "' " .. USER.rules } })
  end)
  teardown(function() if c then c.stop() end end)

  local function redis(extra)
    local o = { cluster = { nodes = c.tls_seeds }, username = USER.name, password = USER.password,
      ssl = true, ssl_verify = true, server_name = "localhost", connect_timeout = 300, read_timeout = 1000 }
    for k, v in pairs(h.client_cert()) do o[k] = v end
    for k, v in pairs(extra or {}) do o[k] = v end
    return o
  end

  it("finds the replica promoted in its place through TLS and the ACL user: a lock taken before (replicas = 1) is " ..
     "held there and refuses a second holder, is released there, and the key is taken again within seconds", function()
    local prefix = h.unique("securecl")
    local locks = assert(dlock.new({ dict = "dlock", prefix = prefix, redis = redis({ replicas = 1 }) }))
    local other = assert(dlock.new({ dict = "dlock", prefix = prefix, redis = redis() }))
    -- A write waits for a replica (replicas = 1): the key's master streams to its replica first (a replica
    -- "online" after a diskless sync may not yet, and then the acquire is rightly refused and released).
    assert.is_true(h.wait_replicated(c.slot_owner(prefix .. "k"), 15, 1, "{" .. prefix .. "k}:replicated"),
      "the replica of the key's master does not acknowledge its writes")
    local lease = assert(locks:acquire("k", { ttl = 30000 }))
    local victim_port = c.slot_owner(prefix .. "k")
    assert.equal(lease.token, h.cmd(victim_port, "get", prefix .. "k"))
    for _, n in ipairs(c.nodes) do
      if n.port == victim_port then c.kill(n) end
    end
    assert.is_true(c.wait_failover(victim_port, 20), "no replica took over within 20 s")
    local t0 = h.now()
    local new = c.slot_owner(prefix .. "k")
    assert.are_not.equal(victim_port, new)
    assert.equal(lease.token, h.cmd(new, "get", prefix .. "k"))

    local l2, err, _, at = h.decided(5, function() return other:acquire("k", { wait = 0 }) end)
    assert.is_nil(l2, "a second holder got in after the failover")
    assert.equal("busy", err)
    assert.is_true(at - t0 < 3, "Redis decided " .. (at - t0) .. " s after the failover")
    assert.is_true(lease:release())
    assert.equal(0, h.cmd(new, "exists", prefix .. "k"))
    local again = assert(other:acquire("k", { ttl = 5000, wait = 0 }))
    assert.equal(again.token, h.cmd(new, "get", prefix .. "k"))
    assert.is_true(again:release())
  end)
end)

describe("an operator's nginx.conf of gateway guards on a Redis Cluster with TLS and that ACL user, a master killed",
  function()
  local c, n, backend

  setup(function()
    c = h.start_cluster({ tls = "mutual", args = { "--requirepass " .. PASSWORD, "--masterauth " .. PASSWORD,
      "--user " .. USER.name .. " on '>" .. USER.password .. "' " .. USER.rules } })
    n, backend = start_gateway(string.format('cluster = { nodes = { "%s", "%s" } }', c.tls_seeds[1], c.tls_seeds[2]))
  end)
  teardown(function()
    if n then n.stop() end
    if c then c.stop() end
  end)

  local function status(path) return gateway_get(n, path).status end

  it("keeps a request's permit, a client's used-up rate and a stored payment on the replica promoted in place of " ..
     "their master: refused (429, or 503 while the slot map is read again), never let through, the payment " ..
     "replayed, the permit given back there", function()
    -- The payment first; its record's master is the one killed, and the permit's and the rate's keys are picked on it.
    local first = pay(n, "cl-pay")
    assert.equal(200, first.status)
    local victim
    assert.is_true(h.eventually(2, function()
      for _, port in ipairs(c.masters()) do
        if #h.cmd(port, "keys", "dlock:gw:payments:*") > 0 then victim = port end
      end
      return victim ~= nil
    end), "no master holds the payment")
    local function on_victim(guard)
      for i = 1, 1000 do
        if c.slot_owner(h.guard_key(guard, "k" .. i)) == victim then return "k" .. i end
      end
    end
    local ck, rk = on_victim("one_at_a_time"), on_victim("per_minute")
    local holder = ngx.thread.spawn(status, "/g/one_at_a_time?key=" .. ck .. "&ms=8000")
    assert.is_true(h.eventually(2, function() return backend_in_flight(backend, ck) == 1 end), "the holder never reached the backend")
    assert.equal(429, status("/g/one_at_a_time?key=" .. ck))
    for _, want in ipairs({ 200, 200, 429 }) do assert.equal(want, status("/g/per_minute?key=" .. rk)) end
    -- Replication is asynchronous: what the master had not sent its replica is lost with it. Everything has been.
    assert.equal(1, h.cmd(victim, "wait", 1, 2000))

    for _, node in ipairs(c.nodes) do
      if node.port == victim then c.kill(node) end
    end
    assert.is_true(c.wait_failover(victim, 20), "no replica took over within 20 s")
    local new = c.slot_owner(h.guard_key("one_at_a_time", ck))
    assert.are_not.equal(victim, new)
    assert.equal(1, h.cmd(new, "zcard", h.guard_key("one_at_a_time", ck)), "the permit is not on the promoted replica")

    -- Until the workers read the new slot map a request may meet the dead master: refused, never let through.
    local function decided(path, want)
      local got
      assert.is_true(h.eventually(5, function()
        got = status(path)
        assert.is_true(got == want or got == 503, path .. " got " .. got)
        return got == want
      end), path .. ": no decision on the promoted replica within 5 s: " .. tostring(got))
    end
    decided("/g/one_at_a_time?key=" .. ck, 429)
    decided("/g/per_minute?key=" .. rk, 429)
    replayed_after_failover(n, backend, "cl-pay", first)

    -- The holder's request ends: its permit goes back to the promoted replica, and the next request gets in.
    local ok, st = ngx.thread.wait(holder)
    assert.is_true(ok)
    assert.equal(200, st)
    assert.is_true(h.eventually(3, function() return status("/g/one_at_a_time?key=" .. ck) == 200 end))
    assert.is_true(h.eventually(2, function() return h.cmd(new, "zcard", h.guard_key("one_at_a_time", ck)) == 0 end))
  end)
end)

describe("redis.redlock over 3 masters with mutual TLS (ssl_verify, a client certificate) and an ACL user, one master killed", function()
  local servers

  setup(function()
    servers = h.parallel(3, function()
      return h.start_redis(nil, "--requirepass " .. PASSWORD,
        "--user " .. USER.name .. " on '>" .. USER.password .. "' " .. USER.rules, unpack(h.tls_args(true)))
    end)
  end)
  teardown(function()
    for _, r in ipairs(servers or {}) do if not r.dead then r.stop() end end
  end)

  it("keeps a lock taken before exclusive on the majority left, releases it there, and takes the key again on it", function()
    local masters = {}
    for i, r in ipairs(servers) do masters[i] = "127.0.0.1:" .. r.tls_port end
    local o = { redlock = masters, username = USER.name, password = USER.password, ssl = true, ssl_verify = true,
      server_name = "localhost", connect_timeout = 300, read_timeout = 500 }
    for k, v in pairs(h.client_cert()) do o[k] = v end
    local prefix = h.unique("securerl")
    local locks = assert(dlock.new({ dict = "dlock", prefix = prefix, redis = o }))
    local other = assert(dlock.new({ dict = "dlock", prefix = prefix, redis = o }))
    local lease = assert(locks:acquire("k", { ttl = 30000 }))
    for _, r in ipairs(servers) do assert.equal(lease.token, h.cmd(r.port, "get", prefix .. "k")) end

    servers[1].dead = true
    servers[1].signal("KILL")
    local none, err = other:acquire("k", { wait = 0 })
    assert.is_nil(none, "a second holder got in with one master of three gone")
    assert.equal("busy", err)
    assert.is_true(lease:release())
    for i = 2, 3 do assert.equal(0, h.cmd(servers[i].port, "exists", prefix .. "k")) end
    local again = assert(other:acquire("k", { ttl = 5000, wait = 0 }))
    for i = 2, 3 do assert.equal(again.token, h.cmd(servers[i].port, "get", prefix .. "k")) end
    assert.is_true(again:release())
  end)
end)

-- Failovers with every credential in place log nothing at error level but nginx's own lines for a connection to
-- a master killed on purpose (a Cluster's slot map read asks the masters known first; Redlock asks every master),
-- refused, or reset in its TLS handshake when the kill lands in it; and in front of the Cluster, a guard's request
-- that met the dead master before its worker read the new slot map (refused with 503): nginx's line and the guard's.
h.check_error_logs({
  { "connect%(%) failed %(111: Connection refused%), context: ngx%.timer", max = 8 },
  { "peer closed connection in SSL handshake %(104: Connection reset by peer%), context: ngx%.timer", max = 4 },
  { 'connect%(%) failed %(111: Connection refused%), client: 127%.0%.0%.1, server: , request: "%u+ /', max = 8 },
  { "dlock: guard [%w_]+: redis 127%.0%.0%.1:%d+: connection refused, client", max = 8 },
})
