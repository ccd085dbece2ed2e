-- DNS outages: nginx's resolver waits up to resolver_timeout (30 s unless set)
-- for a DNS server that does not answer, and the socket's connect timeout does
-- not count that wait. A fresh connection to Redis by name must still fail
-- within connect_timeout, so that a DNS outage costs a request what a dead
-- Redis does, and a guard keeps its on_error promise as fast.
local h = require "helpers"
local start_dns, resolving_nginx, lock_on = h.start_dns, h.resolving_nginx, h.lock_via

describe("when the DNS server stops answering", function()
  local dns, n, redis, sentinel

  setup(function()
    dns = start_dns("redis.test=127.0.0.1 fresh.test=127.0.0.1 sentinel.test=127.0.0.1")
    n = resolving_nginx(dns)
    redis = h.start_redis()
    sentinel = h.start_sentinel("gone-dns", redis.port)
  end)
  teardown(function()
    if sentinel then sentinel.stop() end
    if redis then redis.stop() end
    if n then n.stop() end
  end)

  local function timed(redis_lua)
    local took, token, err = h.took(lock_on, n, redis_lua)
    return token, err, took
  end
  --- What the error says of `name` (a pattern).
  local function unresolved(name)
    return "timeout: " .. name .. " was not resolved and connected within connect_timeout %(300 ms%): nginx's resolver " ..
      "may not be answering %(it waits up to its resolver_timeout%)"
  end

  it("keeps the connections it pooled: a lock by name is taken as before", function()
    -- Pooled while the DNS server answers; nginx looks in the pool before it resolves.
    assert(lock_on(n, "{ host = 'redis.test', port = " .. redis.port .. " }"))
    dns.stop()
    -- Past the resolver's cached answer (valid=5s in the conf): only the pool can serve it now.
    ngx.sleep(5.5)
    assert(lock_on(n, "{ host = 'redis.test', port = " .. redis.port .. " }"))
  end)

  it("fails a fresh connection to a server by name within connect_timeout, saying why", function()
    local token, err, took = timed("{ host = 'fresh.test', port = " .. redis.port .. ", connect_timeout = 300 }")
    assert.is_nil(token)
    assert.matches("^dlock: redis fresh%.test:" .. redis.port .. ": " .. unresolved("fresh%.test"), err)
    assert.is_true(took < 2, "took " .. took .. " s")
  end)

  it("fails to reach a sentinel by name within connect_timeout", function()
    local token, err, took = timed("{ sentinel = { master = 'gone-dns', nodes = { 'sentinel.test:" .. sentinel.port ..
      "' } }, connect_timeout = 300 }")
    assert.is_nil(token)
    assert.matches("sentinel%.test:" .. sentinel.port .. " " .. unresolved("sentinel%.test"), err)
    assert.is_true(took < 2, "took " .. took .. " s")
  end)
end)

describe("an operator's guards on a Redis by name, reloaded while the DNS server is down", function()
  local dns, n, redis

  setup(function()
    dns = start_dns("redis.test=127.0.0.1")
    redis = h.start_redis()
    n = h.start_nginx("spec-named-guard.conf", { DNS_PORT = dns.port, NAMED_PORT = redis.port })
  end)
  teardown(function()
    if n then n.stop() end
    if redis then redis.stop() end
    if dns then dns.stop() end
  end)

  --- GET /g/<guard>: its status and how long it took (s).
  local function get(guard)
    local took, res = h.took(h.http, n.port, "/g/" .. guard .. "?key=" .. h.unique("k"), { timeout = 15000 })
    return assert(res).status, took
  end

  it("answers within connect_timeout as on_error says (503 or through), never lets the deny guard's requests " ..
    "through, and decides on Redis again once the DNS server is back", function()
    assert.equal(200, (get("deny")))
    assert.equal(200, (get("allow")))
    dns.stop()
    -- New workers have nothing pooled and nginx a new resolver cache: every connection is a fresh one.
    local old = n.workers()
    assert(n.reload())
    assert(n.replaced(old, 2))
    for _ = 1, 8 do
      local status, took = get("deny")
      assert.equal(503, status)
      assert.is_true(took < 1.5, "a denied request took " .. took .. " s")
      status, took = get("allow")
      assert.equal(200, status)
      assert.is_true(took < 1.5, "an allowed request took " .. took .. " s")
    end
    dns = start_dns("redis.test=127.0.0.1", dns.port)
    -- After the breaker's cool-down (1 s) a request probes Redis and the guard decides there again.
    assert(h.eventually(10, function()
      if get("deny") == 200 then return true end
      ngx.sleep(0.2)
    end), "the deny guard still refuses 10 s after the DNS server came back")
  end)
end)

h.check_error_logs({
  -- nginx's resolver finding the stopped DNS server gone.
  "send%(%) failed %(111: Connection refused%) while resolving, resolver: 127%.0%.0%.1:%d+",
  -- The guards saying Redis could not be reached (each request until the breaker opens, each probe after).
  { "dlock: guard %a+: redis redis%.test:%d+: timeout: redis%.test was not resolved and connected within connect_timeout",
    max = 16 },
  { "dlock: guard %a+: Redis keeps failing, not calling it for 1000 ms", max = 8 },
})
