-- Every Redis deployment production runs, with its credentials: {standalone,
-- a unix socket (plain only), Sentinel, Cluster, Redlock} x {plain, mutual TLS with ssl_verify} x {no auth,
-- requirepass, ACL user}, Sentinel also with the sentinels' own password. Mutual
-- TLS is what a redis-server with TLS asks for unless told otherwise
-- (tls-auth-clients yes): every server, sentinel and cluster node wants a client
-- certificate, and the factories show one (redis.ssl_client_cert). Real
-- servers for each cell; in every cell a lock, readers of a shared lock, a set
-- of keys (acquire_all), a semaphore's permits and a fleet rate limit each take
-- what Redis really holds (read back with raw commands), are refused by another
-- holder or past their limit (a second lock; a writer beside the readers; a
-- single-key holder of one of the set's keys; a permit past the count; a request
-- past the burst), and give it back; a guard's release sent from the log phase
-- without waiting leaves the key gone. Redlock refuses readers, permits and rate
-- limits, naming why. Wrong or missing credentials are refused with a
-- message naming the user and never the secret.
local h = require "helpers"
local dlock = require "resty.dlock"
local semaphore = require "resty.dlock.semaphore"
local rate = require "resty.dlock.rate"
local releases = require "resty.dlock.gateway.releases"

local PASSWORD = "requirepass-secret-1"
local USER, USER_PASSWORD = "locker", "acl-secret-2"
local SENTINEL_PASSWORD = "sentinel-secret-3"
-- The guarded sentinel's ACL user for the locks: the one command they ask a sentinel (README).
local WATCHER, WATCHER_PASSWORD = "watcher", "watcher-secret-6"
local MASTER = "matrix"
-- A user with only what the locks need: the README's rule, for the specs' prefixes.
local LEAST, LEAST_PASSWORD = "keeper", "least-secret-5"

local function concat(...)
  local out = {}
  for _, list in ipairs({ ... }) do
    for _, v in ipairs(list) do out[#out + 1] = v end
  end
  return out
end

local function addr(port) return "127.0.0.1:" .. port end

-- One set of servers for a {TLS, auth} column: a standalone server (also the
-- master the sentinels watch and the first Redlock master), two more Redlock
-- masters, a sentinel without and one with a password of its own, a cluster.
local function start_set(tls, auth)
  local args = {}
  if auth then
    -- requirepass is the default user's password; the ACL user has its own.
    args = { "--requirepass " .. PASSWORD, "--masterauth " .. PASSWORD,
             "--user " .. USER .. " on '>" .. USER_PASSWORD .. "' '~*' '&*' '+@all'",
             "--user " .. LEAST .. " on '>" .. LEAST_PASSWORD .. "' " .. h.least_privilege_rules({ "matrix:" }) }
  end
  -- The main server also listens on a unix socket, when plain (nginx has no TLS over one).
  local sock = not tls and h.env.prefix .. "/" .. h.unique("matrix") .. ".sock" or nil
  local function server(i)
    local own = (i == 1 and sock) and { "--unixsocket " .. sock .. " --unixsocketperm 700" } or {}
    return h.start_redis(nil, unpack(concat(args, tls and h.tls_args(true) or {}, own)))
  end
  local set = { tls = tls, auth = auth, sock = sock }
  set.servers = h.parallel(3, server)
  set.main = set.servers[1]
  local function port(r) return tls and r.tls_port or r.port end
  local function sconf()
    local conf = {}
    if tls then
      -- The sentinel's own TLS port, and TLS to the master it watches.
      local t = h.tls_args(true)
      for i = 1, #t do conf[#conf + 1] = (t[i]:gsub("^%-%-", "")) end
    end
    if auth then conf[#conf + 1] = "sentinel auth-pass " .. MASTER .. " " .. PASSWORD end
    return table.concat(conf, "\n")
  end
  set.sentinel = h.start_sentinel(MASTER, port(set.main), { conf = sconf() })
  set.guarded_sentinel = h.start_sentinel(MASTER, port(set.main), { password = SENTINEL_PASSWORD,
    conf = sconf() .. "\nuser " .. WATCHER .. " on >" .. WATCHER_PASSWORD .. " -@all +sentinel|get-master-addr-by-name" })
  set.cluster = h.start_cluster({ args = args, tls = tls and "mutual" })
  set.port = port
  return set
end

-- Sentinels listen for TLS on a port of their own.
local function sentinel_addr(set, s)
  return addr(set.tls and s.tls_port or s.port)
end

-- The redis option table of one cell; creds: {} / {password} / {username, password};
-- cert: the client certificate under TLS (h.client_cert(); false: none).
local function redis_opts(set, topology, creds, sentinel_creds, cert)
  local o = { connect_timeout = 1000, read_timeout = 1000 }
  if set.tls then
    o.ssl, o.ssl_verify, o.server_name = true, true, "localhost"
    if cert == nil then cert = h.client_cert() end
    if cert then o.ssl_client_cert, o.ssl_client_priv_key = cert.ssl_client_cert, cert.ssl_client_priv_key end
  end
  o.username, o.password = creds.username, creds.password
  if topology == "standalone" then
    o.port = set.port(set.main)
  elseif topology == "unix" then
    o.path = "unix:" .. set.sock
  elseif topology == "sentinel" then
    local s = sentinel_creds and set.guarded_sentinel or set.sentinel
    o.sentinel = { master = MASTER, nodes = { sentinel_addr(set, s) } }
    if sentinel_creds then o.sentinel.username, o.sentinel.password = sentinel_creds.username, sentinel_creds.password end
  elseif topology == "cluster" then
    o.cluster = { nodes = set.tls and set.cluster.tls_seeds or set.cluster.seeds }
  else
    local masters = {}
    for i, r in ipairs(set.servers) do masters[i] = addr(set.port(r)) end
    o.redlock = masters
  end
  return o
end

-- The servers that must hold a key of this cell (read on their plaintext ports).
local function holders(set, topology, key)
  if topology == "redlock" then return { set.servers[1].port, set.servers[2].port, set.servers[3].port } end
  if topology == "cluster" then return { set.cluster.slot_owner(key) } end
  return { set.main.port }
end

-- What each kind of lease takes, is refused by and gives back, on one cell's servers.
local exercise = {}

-- A lock: its token in the key, a second holder busy, nothing left after the release.
function exercise.lock(set, topology, opts)
  h.lock_everywhere(opts, function(key) return holders(set, topology, key) end, "matrix")
end

-- Readers: both in the key's readers set (the key says dlock!shared), a writer busy
-- beside them, nothing left when they are gone, then the writer's token in the key.
function exercise.shared(set, topology, opts)
  local prefix = h.unique("matrix")
  local a = assert(dlock.new({ dict = "dlock", prefix = prefix, redis = opts }))
  local b = assert(dlock.new({ dict = "dlock", prefix = prefix, redis = opts }))
  local rkey = prefix .. "doc"
  local readers = topology == "cluster" and "{" .. rkey .. "}:readers" or rkey .. ":readers"
  local r1, err = a:acquire("doc", { shared = true, ttl = 5000, wait = 0 })
  assert(r1, err)
  local r2 = assert(b:acquire("doc", { shared = true, ttl = 5000, wait = 0 }))
  local want = { r1.token, r2.token }
  table.sort(want)
  local port = holders(set, topology, rkey)[1]
  assert.equal("dlock!shared", h.cmd(port, "get", rkey))
  local inside = h.cmd(port, "zrange", readers, 0, -1)
  table.sort(inside)
  assert.same(want, inside)
  local w, werr, retry = b:acquire("doc", { wait = 0 })
  assert.is_nil(w)
  assert.equal("busy", werr)
  assert.is_true(retry > 4000 and retry <= 5000, tostring(retry))
  assert.is_true(r1:release())
  assert.equal("dlock!shared", h.cmd(port, "get", rkey))
  assert.is_true(r2:release())
  assert.equal(0, h.cmd(port, "exists", rkey, readers))
  local writer = assert(b:acquire("doc", { ttl = 5000, wait = 0 }))
  assert.equal(writer.token, h.cmd(port, "get", rkey))
  assert.is_true(writer:release())
  assert.equal(0, h.cmd(port, "exists", rkey))
end

-- A set of three keys (on different Cluster slots): busy beside a single-key holder
-- of one, taking none of the others; then its token in every key, a single-key
-- acquire of one busy, nothing left after the release.
function exercise.set(set, topology, opts)
  local prefix = h.unique("matrix")
  local a = assert(dlock.new({ dict = "dlock", prefix = prefix, redis = opts }))
  local b = assert(dlock.new({ dict = "dlock", prefix = prefix, redis = opts }))
  local keys = { "x", "y", "z" }
  local function values(k)
    local out = {}
    for _, port in ipairs(holders(set, topology, prefix .. k)) do out[#out + 1] = h.cmd(port, "get", prefix .. k) end
    return out
  end
  local n = #holders(set, topology, prefix .. "x")
  local single = assert(b:acquire("y", { ttl = 5000 }))
  local none, err, retry = a:acquire_all(keys, { ttl = 5000, wait = 0 })
  assert.is_nil(none)
  assert.equal("busy", err)
  assert.is_true(retry > 4000 and retry <= 5000, tostring(retry))
  assert.same(h.rep(ngx.null, n), values("x"))
  assert.same(h.rep(ngx.null, n), values("z"))
  assert.same(h.rep(single.token, n), values("y"))
  assert.is_true(single:release())
  local lease, aerr = a:acquire_all(keys, { ttl = 5000, wait = 0 })
  assert(lease, aerr)
  for _, k in ipairs(keys) do assert.same(h.rep(lease.token, n), values(k)) end
  local other, berr = b:acquire("z", { wait = 0 })
  assert.is_nil(other)
  assert.equal("busy", berr)
  assert.is_true(lease:release())
  for _, k in ipairs(keys) do assert.same(h.rep(ngx.null, n), values(k)) end
end

-- A guard's release from the log phase (gateway/releases.ts): sent without
-- waiting in the next pipeline to where the key lives (through the release
-- queue's timer under Redlock), the key gone on every server that held it,
-- the lease settled from the reply.
function exercise.posted(set, topology, opts)
  local prefix = h.unique("matrix")
  local locks = assert(dlock.new({ dict = "dlock", prefix = prefix, redis = opts }))
  local lease = assert(locks:acquire("req", { ttl = 10000 }))
  local ports = holders(set, topology, prefix .. "req")
  for _, port in ipairs(ports) do assert.equal(lease.token, h.cmd(port, "get", prefix .. "req")) end
  local owner = { name = "matrix", _dict = ngx.shared.dlock, _ttl = 10000, _renew = false, _release = true, _hold = 0 }
  releases.done({ owner = owner, lease = lease, done = false, answered = releases.answered }, 0)
  local left
  for _ = 1, 100 do
    left = 0
    for _, port in ipairs(ports) do left = left + h.cmd(port, "exists", prefix .. "req") end
    if left == 0 and not lease:valid() then break end
    ngx.sleep(0.02)
  end
  assert.equal(0, left)
  assert.is_false(lease:valid())
end

-- Permits of a semaphore of 2: both members of the key's sorted set, a third
-- busy until one is released, nothing left when both are.
function exercise.permits(set, topology, opts)
  local prefix = h.unique("matrix")
  local sem, err = semaphore.new({ dict = "dlock", prefix = prefix, permits = 2, redis = opts })
  assert(sem, err)
  local p1, aerr = sem:acquire("pool", { ttl = 5000 })
  assert(p1, aerr)
  local p2 = assert(sem:acquire("pool", { ttl = 5000 }))
  local port = holders(set, topology, prefix .. "pool")[1]
  local inside = h.cmd(port, "zrange", prefix .. "pool", 0, -1)
  local want = { p1.token, p2.token }
  table.sort(inside)
  table.sort(want)
  assert.same(want, inside)
  local third, berr, retry = sem:acquire("pool", { ttl = 5000, wait = 0 })
  assert.is_nil(third)
  assert.equal("busy", berr)
  assert.is_true(retry > 4000 and retry <= 5000, tostring(retry))
  assert.is_true(p1:release())
  local p3 = assert(sem:acquire("pool", { ttl = 5000, wait = 0 }))
  assert.is_true(p2:release())
  assert.is_true(p3:release())
  assert.equal(0, h.cmd(port, "exists", prefix .. "pool"))
end

-- A fleet rate limit of 3 a minute: three requests admitted and a TAT under
-- the key, the fourth refused with the wait for the next and charging nothing,
-- and uncommit() giving one back.
function exercise.rate(set, topology, opts)
  local prefix = h.unique("matrix")
  local lim, err = rate.new({ dict = "dlock", prefix = prefix, rate = 3, period = 60000, redis = opts })
  assert(lim, err)
  for i = 1, 3 do
    local delay, remaining = lim:incoming("client", true)
    assert.equal(0, delay, tostring(remaining))
    assert.equal(3 - i, remaining)
  end
  local port = holders(set, topology, prefix .. "client")[1]
  local tat = h.rate_state(port, prefix .. "client")["1"]
  assert.truthy(tonumber(tat), "a TAT under the key: " .. tostring(tat))
  local none, why, retry = lim:incoming("client", true)
  assert.is_nil(none)
  assert.equal("rejected", why)
  assert.is_true(retry > 19000 and retry <= 20000, tostring(retry))
  assert.equal(tat, h.rate_state(port, prefix .. "client")["1"])
  assert.equal(1, lim:uncommit("client"))
  local delay, remaining = lim:incoming("client", true)
  assert.equal(0, delay)
  assert.equal(0, remaining)
end

-- Waiting on a holder in another nginx (another dict: its leases are not this
-- one's): the waiter subscribes to the key's wake-up channel on the servers that
-- could announce the release (Redlock has none: its waiters ask in turns), and
-- the holder's release hands it the key.
function exercise.wakeup(set, topology, opts)
  local prefix = h.unique("matrix")
  local a = assert(dlock.new({ dict = "dlock_other", prefix = prefix, redis = opts }))
  local b = assert(dlock.new({ dict = "dlock", prefix = prefix, redis = opts }))
  local holder = assert(a:acquire("w", { ttl = 10000 }))
  local waiter = ngx.thread.spawn(function() return b:acquire("w", { ttl = 5000, wait = 8000 }) end)
  if topology ~= "redlock" then
    local channel = "dlock:released:" .. prefix .. "w"
    local ports = topology == "cluster" and set.cluster.masters() or holders(set, topology, prefix .. "w")
    assert.is_true(h.eventually(5, function()
      local n = 0
      for _, port in ipairs(ports) do n = n + h.cmd(port, "pubsub", "numsub", channel)[2] end
      return n >= 1
    end), "no subscriber to " .. channel)
  end
  assert.is_true(holder:release())
  local ok, lease, err = ngx.thread.wait(waiter)
  assert.is_true(ok)
  assert(lease, err)
  -- Under Redlock on a majority: a waiter's try may land while the release is still on its way to the last master.
  local ports, held = holders(set, topology, prefix .. "w"), 0
  for _, port in ipairs(ports) do
    if h.cmd(port, "get", prefix .. "w") == lease.token then held = held + 1 end
  end
  assert.is_true(held >= math.floor(#ports / 2) + 1, held .. " of " .. #ports)
  assert.is_true(lease:release())
end

-- Redlock's refusals, in its cells: what cannot be bounded across independent masters.
local function redlock_refuses(opts)
  local sem, serr = semaphore.new({ dict = "dlock", permits = 2, redis = opts })
  assert.is_nil(sem)
  assert.matches("semaphores %(and concurrency guards%) are refused with redis.redlock", serr)
  local lim, rerr = rate.new({ dict = "dlock", rate = 3, redis = opts })
  assert.is_nil(lim)
  assert.matches("rate limits are refused with redis.redlock", rerr)
end

-- The kinds of lease each topology offers (Redlock refuses shared: rwlock_spec).
local KINDS = {
  { "lock", "acquires a lock Redis holds, refuses a second holder, releases" },
  { "shared", "shared locks: two readers Redis holds together, a writer refused beside them, both release" },
  { "set", "acquire_all: refused beside a single-key holder taking nothing, then every key Redis holds, releases" },
  { "permits", "a semaphore: two permits Redis holds, a third refused until one is released" },
  { "rate", "a fleet rate limit: the burst admitted, the next request refused with its wait, one given back" },
  { "posted", "a guard's release from the log phase, sent without waiting: the key gone where it lived" },
  { "wakeup", "waiting: subscribed to the key's release, handed the key when its holder releases it" },
}
local REDLOCK_REFUSES = { shared = true, permits = true, rate = true }
local function offers(topology, kind) return not (topology == "redlock" and REDLOCK_REFUSES[kind]) end

local function refused(opts, pattern, secret)
  local l = assert(dlock.new({ dict = "dlock", prefix = h.unique("matrix"), redis = opts }))
  local lease, err = l:acquire("k", { ttl = 5000 })
  assert.is_nil(lease)
  assert.matches(pattern, err)
  if secret then assert.is_nil(err:find(secret, 1, true), "the error shows the secret: " .. err) end
  return err
end

for _, tls in ipairs({ false, true }) do
  local column = tls and "mutual TLS with ssl_verify" or "plain"
  local TOPOLOGIES = tls and { "standalone", "sentinel", "cluster", "redlock" }
    or { "standalone", "unix", "sentinel", "cluster", "redlock" }
  for _, auth in ipairs({ false, true }) do
    describe("every topology, " .. column .. ", " .. (auth and "with credentials" or "no auth") .. ":", function()
      local set
      setup(function() set = start_set(tls, auth) end)
      teardown(function()
        if not set then return end
        set.sentinel.stop()
        set.guarded_sentinel.stop()
        set.cluster.stop()
        for _, r in ipairs(set.servers) do r.stop() end
      end)

      local cells = auth and {
        { "requirepass", { password = PASSWORD } },
        { "ACL user", { username = USER, password = USER_PASSWORD } },
        { "least-privilege ACL user", { username = LEAST, password = LEAST_PASSWORD } },
      } or { { "no auth", {} } }

      for _, topology in ipairs(TOPOLOGIES) do
        for _, cell in ipairs(cells) do
          for _, kind in ipairs(KINDS) do
            if offers(topology, kind[1]) then
              it(topology .. ", " .. cell[1] .. ": " .. kind[2], function()
                exercise[kind[1]](set, topology, redis_opts(set, topology, cell[2]))
              end)
            end
          end
          if cell[2].username == LEAST then
            it(topology .. ", " .. cell[1] .. ": a key outside its patterns refused with Redis' NOPERM, naming the endpoint", function()
              local o = redis_opts(set, topology, cell[2])
              local l = assert(dlock.new({ dict = "dlock", prefix = h.unique("elsewhere"), redis = o }))
              local lease, err = l:acquire("k", { ttl = 5000 })
              assert.is_nil(lease)
              -- (Redlock's error names each master's refusal.)
              assert.matches("dlock: redis [^;]-: NOPERM this user has no permissions to access one of the keys", err)
            end)
            if topology == "sentinel" then
              it("sentinel, " .. cell[1] .. ": ROLE refused to it, the sentinels' word taken, said once at notice", function()
                local l = assert(dlock.new({ dict = "dlock", prefix = h.unique("matrix"), redis = redis_opts(set, topology, cell[2]) }))
                assert.is_true(assert(l:acquire("k", { ttl = 5000 })):release())
                local said = 0
                for line in (h.read_file(h.prefix .. "/logs/notice.log") or ""):gmatch("[^\n]+") do
                  if line:find("dlock: redis sentinel " .. MASTER .. ": ROLE on 127.0.0.1:" .. set.port(set.main) ..
                    " refused (NOPERM", 1, true) then
                    said = said + 1
                    assert.matches("%[notice%]", line)
                  end
                end
                assert.equal(1, said)
              end)
            end
          end
          if topology == "redlock" then
            it("redlock, " .. cell[1] .. ": refuses semaphores and rate limits, saying why", function()
              redlock_refuses(redis_opts(set, topology, cell[2]))
            end)
          end
        end
      end

      for _, kind in ipairs(KINDS) do
        it("sentinel with a password of its own (and " .. (auth and "the masters'" or "no") .. " password): " .. kind[2], function()
          local creds = auth and { password = PASSWORD } or {}
          exercise[kind[1]](set, "sentinel", redis_opts(set, "sentinel", creds, { password = SENTINEL_PASSWORD }))
        end)
      end

      for _, kind in ipairs(KINDS) do
        it("sentinel with an ACL user of its own allowed only SENTINEL get-master-addr-by-name (and " ..
           (auth and "the masters' least-privilege user" or "no password") .. "): " .. kind[2], function()
          local creds = auth and { username = LEAST, password = LEAST_PASSWORD } or {}
          exercise[kind[1]](set, "sentinel", redis_opts(set, "sentinel", creds, { username = WATCHER, password = WATCHER_PASSWORD }))
        end)
      end

      if tls then
        for _, topology in ipairs(TOPOLOGIES) do
          local creds = auth and { username = LEAST, password = LEAST_PASSWORD } or {}
          it(topology .. ", no client certificate: refused, saying the server may want one and which options give it", function()
            -- (In the handshake, or under TLS 1.3 with a newer OpenSSL at the first reply after it.)
            refused(redis_opts(set, topology, creds, nil, false),
              "TLS handshake failed: [%w ]+ %(the server may want a client certificate, as redis%-server does " ..
              "unless tls%-auth%-clients is no: redis%.ssl_client_cert and redis%.ssl_client_priv_key; or no TLS version it " ..
              "takes: lua_ssl_protocols %(nginx's log has the server's alert%)%)")
          end)
          it(topology .. ", a client certificate the servers do not trust: refused, saying so", function()
            refused(redis_opts(set, topology, creds, nil, h.client_cert(true)),
              "TLS handshake failed: [%w ]+ %(the server may not trust the issuer of redis%.ssl_client_cert: its tls%-ca%-cert%-file; " ..
              "or no TLS version it takes")
          end)
        end
      end

      it("sentinel with a wrong password of its own: refused naming the sentinel and its user, never the secret", function()
        local creds = auth and { password = PASSWORD } or {}
        local err = refused(redis_opts(set, "sentinel", creds, { password = "wrong-sentinel-pw" }),
          "no sentinel named the master %(.*authentication failed for user default", "wrong-sentinel-pw")
        assert.matches(sentinel_addr(set, set.guarded_sentinel):gsub("%.", "%%."), err)
      end)

      if auth then
        it("keeps every password out of reach: no table a factory or its lease leads to holds one", function()
          local secret = { [PASSWORD] = true, [USER_PASSWORD] = true, [SENTINEL_PASSWORD] = true }
          local function secrets_in(root) return h.reachable(root, secret) end
          for _, topology in ipairs(TOPOLOGIES) do
            local opts = redis_opts(set, topology, { username = USER, password = USER_PASSWORD },
              topology == "sentinel" and { password = SENTINEL_PASSWORD } or nil)
            local l = assert(dlock.new({ dict = "dlock", prefix = h.unique("matrix"), redis = opts }))
            local lease = assert(l:acquire("k", { ttl = 5000 }))
            assert.same({}, secrets_in(l), topology)
            assert.same({}, secrets_in(lease), topology)
            assert.is_true(lease:release())
          end
        end)

        for _, topology in ipairs(TOPOLOGIES) do
          it(topology .. ", a wrong password: refused naming the user, never the secret", function()
            refused(redis_opts(set, topology, { username = USER, password = "wrong-pw-4" }),
              "authentication failed for user " .. USER, "wrong-pw-4")
          end)
          it(topology .. ", no password for a server that wants one: refused with Redis' NOAUTH", function()
            refused(redis_opts(set, topology, {}), "NOAUTH")
          end)
        end
      end
    end)
  end
end

describe("the README's smallest ACL rule", function()
  it("names no @dangerous command: +@all -@dangerous with the same key and channel patterns allows all it does", function()
    local dangerous = {}
    for _, c in ipairs(h.cmd(nil, "acl", "cat", "dangerous")) do dangerous[c] = true end
    local named = 0
    for c in h.least_privilege_rules():gmatch("'%+([%w|]+)'") do
      named = named + 1
      assert.is_nil(dangerous[c], c)
      assert.is_nil(dangerous[c:match("^[^|]+")], c)
    end
    assert.is_true(named > 20, named .. " commands")
    assert.is_true(dangerous.role and dangerous.info and dangerous["config|get"], "ROLE, INFO and CONFIG GET are @dangerous")
  end)
end)

-- The handshakes the mutual-TLS servers break off on purpose (no client
-- certificate, or an untrusted one): nginx logs each server's alert.
h.check_error_logs(h.refused_client_certs(40))
