-- Locks taken in ssl_certificate_by_lua, where a certificate is chosen or
-- issued per TLS handshake (nginx/spec-ssl-phase.conf): two nginx of two
-- workers each, handshakes from the specs' own TLS client, the overlap
-- witness around each issuance.
local h = require "helpers"

local redis, a, b

local function counter(name)
  return tonumber(h.cmd(redis.port, "get", name) or "0") or 0
end

--- A TLS handshake with n, naming `sni`, then a GET: the status, or nil and the error.
local function handshake(n, sni, port)
  local sock = ngx.socket.tcp()
  sock:settimeout(15000)
  local ok, err = sock:connect("127.0.0.1", port or n.tls_port)
  if not ok then return nil, err end
  ok, err = sock:sslhandshake(nil, sni, false)
  if not ok then return nil, err end
  sock:send("GET / HTTP/1.0\r\nHost: " .. sni .. "\r\n\r\n")
  local line = sock:receive("*l")
  sock:close()
  return tonumber(line and line:match("^HTTP/%S+ (%d+)"))
end

--- n handshakes naming `name`, at a and b in turn (on the port port_of(nginx) gives, the certificate phase's
--- unless given), in flight together: each answered, each inside the witness, none beside another.
local function in_turn(name, n, port_of)
  local threads = {}
  for i = 1, n do
    local x = i % 2 == 0 and a or b
    threads[i] = ngx.thread.spawn(handshake, x, name, port_of and port_of(x))
  end
  for i = 1, n do
    local _, status, err = ngx.thread.wait(threads[i])
    assert.equal(200, status, tostring(err))
  end
  assert.equal(n, counter("witness:" .. name .. ":runs"))
  assert.equal(0, counter("witness:" .. name .. ":overlaps"))
end

local function start()
  local tls_port, hello_port = h.free_port(), h.free_port()
  local n = h.start_nginx("spec-ssl-phase.conf", { REDIS_PORT = redis.port, TLS_PORT = tls_port, HELLO_PORT = hello_port,
    TLS_DIR = h.env.prefix .. "/tls" })
  n.tls_port, n.hello_port = tls_port, hello_port
  return n
end

describe("locks in ssl_certificate_by_lua", function()
  setup(function()
    redis = h.start_redis()
    a, b = start(), start()
  end)
  teardown(function()
    if a then a.stop() end
    if b then b.stop() end
  end)

  it("let one handshake of a name issue at a time across two nginx, the others waiting their turn, each answered", function()
    in_turn("hold-150." .. h.unique("turns"):gsub("[^%w]", "") .. ".test", 6)
  end)

  it("work in ssl_client_hello_by_lua as well, on OpenResty: one handshake of a name inside at a time across two nginx", function()
    -- Only OpenResty's nginx patch lets that phase yield: on a stock nginx (Debian's) a cosocket there, or any
    -- ngx.sleep, breaks the handshake off, whatever the library.
    if not h.nginx_is_openresty() then
      return pending("the runner's nginx is not OpenResty's: ssl_client_hello_by_lua cannot yield on it")
    end
    in_turn("hold-100." .. h.unique("hello"):gsub("[^%w]", "") .. ".test", 4, function(n) return n.hello_port end)
  end)

  it("renew the lease through an issuance longer than its ttl, while a handshake at the other nginx waits", function()
    local name = "hold-2500." .. h.unique("long"):gsub("[^%w]", "") .. ".test"
    local first = ngx.thread.spawn(handshake, a, name)
    ngx.sleep(0.3)
    local second = ngx.thread.spawn(handshake, b, name)
    for _, t in ipairs({ first, second }) do
      local _, status, err = ngx.thread.wait(t)
      assert.equal(200, status, tostring(err))
    end
    assert.equal(2, counter("witness:" .. name .. ":runs"))
    assert.equal(0, counter("witness:" .. name .. ":overlaps"))
  end)

  it("release a renewed lease the handshake forgot once the handshake is over, instead of renewing it for good", function()
    local name = "forget-" .. h.unique("f"):gsub("[^%w]", "") .. ".test"
    assert.equal(200, handshake(a, name))
    -- Taken just now with a 1000 ms ttl: gone within 600 ms is a release, not an expiry.
    assert.is_true(h.eventually(0.6, function() return h.cmd(redis.port, "exists", "dlock:cert:" .. name) == 0 end),
      "the forgotten lease is still held")
  end)
end)

h.check_error_logs()
