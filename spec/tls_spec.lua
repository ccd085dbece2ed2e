-- TLS to Redis, asserted on behaviour, not on the client's version number.
-- lua-resty-redis >= 0.28 (OpenResty's resty.redis) speaks TLS; Debian's 0.27
-- (nginx.redis) ignores `ssl = true` and would talk plaintext, so dlock.new must
-- refuse TLS with it. The spec asks the installed client itself: can it PING a
-- TLS-only port of a real redis-server (self-signed certificate made here)?
--
-- On Debian, where `make test` runs, the client is 0.27 and only the refusal branch
-- runs. The TLS branch runs with OpenResty's client (DLOCK_NGINX=openresty,
-- make test-docker); it is not exercised on this machine, so keep it correct by
-- reading: it must pass wherever the client can do TLS.
local h = require "helpers"
local dlock = require "resty.dlock"

--- PING over TLS with the raw client: true when it answers (the client did the handshake).
local function client_speaks_tls(port)
  local red = h.redis:new()
  red:set_timeout(1000)
  -- 0.27 hands the options to the socket's connect, which ignores `ssl`.
  local ok = red:connect("127.0.0.1", port, { ssl = true })
  if not ok then return false end
  local pong = red:ping()
  red:close()
  return pong == "PONG"
end

describe("TLS", function()
  local r, tls_port

  setup(function()
    local dir = h.prefix .. "/tls"
    assert(h.sh("mkdir -p " .. dir .. " && openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=localhost " ..
      "-keyout " .. dir .. "/key.pem -out " .. dir .. "/cert.pem 2>/dev/null"))
    tls_port = h.free_port()
    -- A plaintext port (for checking keys from the spec) and a TLS port (for the locks).
    r = h.start_redis(nil, "--tls-port " .. tls_port, "--tls-cert-file " .. dir .. "/cert.pem",
      "--tls-key-file " .. dir .. "/key.pem", "--tls-ca-cert-file " .. dir .. "/cert.pem", "--tls-auth-clients no")
  end)

  teardown(function()
    if r then r.stop() end
  end)

  it("ssl = true: refused with a clear error when the client would talk plaintext, " ..
     "locks over TLS when it can do TLS", function()
    local function locks(redis_extra)
      local o = { port = tls_port, ssl = true, connect_timeout = 1000, read_timeout = 1000 }
      for k, v in pairs(redis_extra or {}) do o[k] = v end
      return dlock.new({ dict = "dlock", prefix = h.unique("tls"), redis = o })
    end

    if not client_speaks_tls(tls_port) then
      local l, err = locks()
      assert.is_nil(l)
      assert.equal("dlock: redis.ssl = true needs lua-resty-redis >= 0.28 (resty.redis); the loaded client " ..
        h.redis._VERSION .. " would silently connect in plaintext", err)
      return
    end

    -- The client does TLS: locks work over it, seen from Redis through the plaintext port.
    local tls = assert(locks())
    local lease = assert(tls:acquire("a", { ttl = 5000 }))
    assert.equal(lease.token, h.cmd(r.port, "get", tls.prefix .. "a"))
    local none, err = tls:acquire("a")
    assert.is_nil(none)
    assert.equal("busy", err)
    assert.is_true(lease:extend(8000))
    assert.is_true(h.cmd(r.port, "pttl", tls.prefix .. "a") > 5000)
    assert.is_true(lease:release())
    assert.equal(0, h.cmd(r.port, "exists", tls.prefix .. "a"))
    -- The same port without TLS gets nowhere: the lock above really went over TLS.
    local plain = assert(dlock.new({ dict = "dlock", redis = { port = tls_port, read_timeout = 500 } }))
    local l, perr = plain:acquire("a")
    assert.is_nil(l)
    assert.matches("^dlock: redis 127.0.0.1:" .. tls_port .. ": ", perr)
    -- ssl_verify checks the certificate: this self-signed one is not trusted (no lua_ssl_trusted_certificate).
    local strict = assert(locks({ ssl_verify = true, server_name = "localhost" }))
    local s, serr = strict:acquire("b")
    assert.is_nil(s)
    assert.matches("^dlock: redis 127.0.0.1:" .. tls_port .. ": .*certificate", serr)
  end)
end)
