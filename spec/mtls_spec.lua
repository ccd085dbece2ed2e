-- Client certificates (mutual TLS). A redis-server with TLS asks every client
-- for a certificate its tls-ca-cert-file signed unless tls-auth-clients is off,
-- and so do sentinels and cluster nodes set up the same way: redis.ssl_client_cert
-- and redis.ssl_client_priv_key give it. Read and checked when the factory is
-- made, refused there with the option and the path named; shown in every
-- fresh connection's handshake; never a pooled connection of another
-- certificate (or of none). And an operator's nginx whose workers run as nobody
-- and cannot read the key: the master read it in init_by_lua.
-- (Every topology with client certificates: matrix_spec's TLS column; failovers:
-- secure_failover_spec.)
local h = require "helpers"
local dlock = require "resty.dlock"

local CERT, STRANGER = h.client_cert(), h.client_cert(true)
local USER, USER_PASSWORD = "locker", "mtls-secret-1"

--- The redis table of a TLS factory (verified) on port, with more options.
local function tls(port, extra)
  local o = { port = port, ssl = true, ssl_verify = true, server_name = "localhost", connect_timeout = 1000 }
  for k, v in pairs(extra or {}) do o[k] = v end
  return o
end

--- dlock.new's error for these redis options (it must not raise).
local function new_err(redis)
  local ok, locks, err = pcall(dlock.new, { dict = "dlock", redis = redis })
  assert.is_true(ok, locks)
  assert.is_nil(locks)
  return err
end

describe("redis.ssl_client_cert and ssl_client_priv_key are refused when the factory is made", function()
  it("without TLS", function()
    assert.equal("dlock: redis.ssl_client_cert and redis.ssl_client_priv_key need redis.ssl = true",
      new_err({ ssl_client_cert = CERT.ssl_client_cert, ssl_client_priv_key = CERT.ssl_client_priv_key }))
  end)

  it("one without the other", function()
    assert.equal("dlock: redis.ssl_client_cert needs redis.ssl_client_priv_key",
      new_err(tls(6379, { ssl_client_cert = CERT.ssl_client_cert })))
    assert.equal("dlock: redis.ssl_client_priv_key needs redis.ssl_client_cert",
      new_err(tls(6379, { ssl_client_priv_key = CERT.ssl_client_priv_key })))
  end)

  it("a file that cannot be read, naming the option, the path and the reason", function()
    assert.equal("dlock: redis.ssl_client_cert: cannot read /nonexistent/client.pem: No such file or directory",
      new_err(tls(6379, { ssl_client_cert = "/nonexistent/client.pem", ssl_client_priv_key = CERT.ssl_client_priv_key })))
    assert.equal("dlock: redis.ssl_client_priv_key: cannot read /nonexistent/client.key: No such file or directory",
      new_err(tls(6379, { ssl_client_cert = CERT.ssl_client_cert, ssl_client_priv_key = "/nonexistent/client.key" })))
  end)

  it("a file that holds no certificate, or no key", function()
    -- The key where the certificate goes, and the other way round.
    local err = new_err(tls(6379, { ssl_client_cert = CERT.ssl_client_priv_key, ssl_client_priv_key = CERT.ssl_client_priv_key }))
    assert.matches("^dlock: redis%.ssl_client_cert: no PEM certificate in " .. CERT.ssl_client_priv_key:gsub("%p", "%%%0") .. " %(.+%)$", err)
    err = new_err(tls(6379, { ssl_client_cert = CERT.ssl_client_cert, ssl_client_priv_key = CERT.ssl_client_cert }))
    assert.matches("^dlock: redis%.ssl_client_priv_key: no unencrypted PEM private key in " ..
      CERT.ssl_client_cert:gsub("%p", "%%%0") .. " %(.+%)$", err)
  end)

  it("a key of another certificate", function()
    assert.equal("dlock: redis.ssl_client_priv_key: the key in " .. STRANGER.ssl_client_priv_key ..
      " does not belong to the certificate in " .. CERT.ssl_client_cert,
      new_err(tls(6379, { ssl_client_cert = CERT.ssl_client_cert, ssl_client_priv_key = STRANGER.ssl_client_priv_key })))
  end)

  it("a key given as PEM text is never shown, nor a value of the wrong type", function()
    local text = "-----BEGIN PRIVATE KEY-----\nnot-really-a-key-7\n-----END PRIVATE KEY-----\n"
    local err = new_err(tls(6379, { ssl_client_cert = CERT.ssl_client_cert, ssl_client_priv_key = text }))
    assert.matches("^dlock: redis%.ssl_client_priv_key: no unencrypted PEM private key in the PEM text given %(", err)
    assert.is_nil(err:find("not-really-a-key-7", 1, true), err)
    assert.equal("dlock: redis.ssl_client_priv_key must be a string, got a number",
      new_err(tls(6379, { ssl_client_cert = CERT.ssl_client_cert, ssl_client_priv_key = 77 })))
    assert.equal("dlock: redis.ssl_client_cert must be a string, got 5",
      new_err(tls(6379, { ssl_client_cert = 5, ssl_client_priv_key = CERT.ssl_client_priv_key })))
  end)
end)

describe("a redis-server that asks for a client certificate (tls-auth-clients yes), as an ACL user", function()
  local r
  setup(function()
    r = h.start_redis(nil, "--user " .. USER .. " on '>" .. USER_PASSWORD .. "' '~*' '&*' '+@all'", unpack(h.tls_args(true)))
  end)
  teardown(function() if r then r.stop() end end)

  local function opts(cert)
    return tls(r.tls_port, { username = USER, password = USER_PASSWORD,
      ssl_client_cert = cert and cert.ssl_client_cert, ssl_client_priv_key = cert and cert.ssl_client_priv_key })
  end

  --- A lock taken and checked in Redis (on its plaintext port), released, with these options; or nil and the error.
  local function lock(redis)
    local locks = assert(dlock.new({ dict = "dlock", prefix = h.unique("mtls"), redis = redis }))
    local lease, err = locks:acquire("k", { ttl = 5000 })
    if not lease then return nil, err end
    assert.equal(lease.token, h.cmd(r.port, "get", locks.prefix .. "k"))
    assert.is_true(lease:release())
    assert.equal(0, h.cmd(r.port, "exists", locks.prefix .. "k"))
    return true
  end

  it("takes a lock showing the certificate, given as files and as PEM text", function()
    assert(lock(opts(CERT)))
    assert(lock(opts({ ssl_client_cert = h.read_file(CERT.ssl_client_cert), ssl_client_priv_key = h.read_file(CERT.ssl_client_priv_key) })))
    -- Redis saw the ACL user on a TLS connection.
    assert.matches("user=" .. USER, h.cmd(r.port, "client", "list"))
  end)

  it("keeps a key given as PEM text out of reach: no table the factory or its lease leads to holds it", function()
    local key = h.read_file(CERT.ssl_client_priv_key)
    local locks = assert(dlock.new({ dict = "dlock", prefix = h.unique("mtls"),
      redis = opts({ ssl_client_cert = CERT.ssl_client_cert, ssl_client_priv_key = key }) }))
    local lease = assert(locks:acquire("k", { ttl = 5000 }))
    -- (The walk does reach the factory's own strings.)
    assert.is_true(#h.reachable(locks, { [locks.prefix] = true }) >= 1)
    assert.same({}, h.reachable(locks, { [key] = true }))
    assert.same({}, h.reachable(lease, { [key] = true }))
    assert.is_true(lease:release())
  end)

  it("never hands a connection made with the certificate to a factory without one, or with a stranger's", function()
    -- The first factory's connections are in the pool now; the others must make their own, and be refused.
    assert(lock(opts(CERT)))
    -- (The server breaks off the handshake, or, under TLS 1.3 with a newer OpenSSL, the first reply after it.)
    local _, err = lock(opts(nil))
    assert.matches("^dlock: redis 127%.0%.0%.1:" .. r.tls_port .. ": TLS handshake failed: [%w ]+ %(the server may " ..
      "want a client certificate, as redis%-server does unless tls%-auth%-clients is no: redis%.ssl_client_cert and " ..
      "redis%.ssl_client_priv_key; or no TLS version it takes: lua_ssl_protocols %(nginx's log has the server's alert%)%)$", err)
    _, err = lock(opts(STRANGER))
    assert.matches("^dlock: redis 127%.0%.0%.1:" .. r.tls_port .. ": TLS handshake failed: [%w ]+ %(the server may " ..
      "not trust the issuer of redis%.ssl_client_cert: its tls%-ca%-cert%-file; or no TLS version it takes: " ..
      "lua_ssl_protocols %(nginx's log has the server's alert%)%)$", err)
    assert(lock(opts(CERT)))
  end)
end)

describe("an operator's nginx whose workers run as nobody and cannot read the key, on Sentinel with mutual TLS " ..
         "and passwords (nginx/spec-mtls.conf)", function()
  local PASSWORD, SENTINEL_PASSWORD = "mtls-default-2", "mtls-sentinel-3"
  local set, n

  setup(function()
    set = h.start_sentinel_set({ name = "mtls", tls = "mutual", password = PASSWORD, sentinel_password = SENTINEL_PASSWORD,
      user = { name = USER, password = USER_PASSWORD, rules = h.least_privilege_rules() } })
    -- The key only root may read; the library where nobody can read it.
    local key, lib = h.private_key(h.env.prefix .. "/mtls", CERT), h.public_lib(h.env.prefix .. "/mtls")
    local sentinels = {}
    for i, a in ipairs(set.nodes()) do sentinels[i] = '"' .. a .. '"' end
    n = h.start_nginx("spec-mtls.conf", { LIB = lib, TLS_CA = h.env.prefix .. "/tls/ca.pem", MASTER = "mtls",
      SENTINELS = table.concat(sentinels, ", "), SENTINEL_PASSWORD = SENTINEL_PASSWORD, ACL_USER = USER,
      ACL_PASSWORD = USER_PASSWORD, CLIENT_CERT = CERT.ssl_client_cert, CLIENT_KEY = key })
  end)
  teardown(function()
    if n then n.stop() end
    if set then set.stop() end
  end)

  --- Four requests of one key at once, each held 0.6 s by the backend: their statuses, sorted.
  local function four(key)
    return h.together(n.port, "/g?hold=0.6&key=" .. key, 4, function()
      -- While the first holds it, its permit is on the master.
      assert.equal(1, h.cmd(set.master_port(), "zcard", h.guard_key("one_at_a_time", key)))
    end)
  end

  it("runs its workers as nobody, which cannot read the key", function()
    local p = io.popen("id -u nobody")
    local uid = assert(tonumber(p:read("*l")))
    p:close()
    assert.is_true(uid ~= 0)
    local res = assert(h.http(n.port, "/worker"))
    assert.equal(uid .. " cannot read the key", res.body:match("^[^\n]*"))
  end)

  it("lets one request of a key into the backend and refuses the others with 429, the permit given back after", function()
    local key = h.unique("k")
    assert.same({ 200, 429, 429, 429 }, four(key))
    assert.is_true(h.eventually(2, function() return h.cmd(set.master_port(), "zcard", h.guard_key("one_at_a_time", key)) == 0 end))
  end)

  it("decides as before in the new workers after nginx -s reload (the master read the key again)", function()
    local old = n.workers()
    assert.is_true(n.reload())
    assert.is_true(h.eventually(10, function() return n.exited(old) end), "the old workers did not exit")
    local key = h.unique("k")
    assert.same({ 200, 429, 429, 429 }, four(key))
  end)
end)

-- The handshakes the servers break off on purpose (no certificate, a stranger's): nginx logs each server's alert,
-- met in the handshake or at the write after it, whichever comes first (both at the write, at times, on OpenResty).
h.check_error_logs(h.refused_client_certs(2))
