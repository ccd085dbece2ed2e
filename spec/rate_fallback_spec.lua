-- Guards with on_error = "local" while their Redis is gone (rate, concurrency
-- and mutex): once the breaker is open each nginx decides alone on its share
-- of the limit (rate / fleet, burst / fleet, permits / fleet) from its shared
-- dict, status and metrics say the guard is degraded, nobody waits for Redis,
-- and Redis decides again by itself after the cool-down. Two real nginx
-- (nginx/spec-rate.conf) on one real Redis, paused with SIGSTOP.
local h = require "helpers"

local note = h.rate_note

describe("gateway mode rate with on_error = local", function()
  local r, a, b
  setup(function()
    r = h.start_redis()
    local vars = { REDIS_PORT = r.port, CLUSTER_SEEDS = "", DOWN_PORT = h.free_port(), PREFIX_KEYS = h.unique("fb") }
    local ns = {}
    for i = 1, 2 do
      local v = { BACKEND_PORT = h.free_port() }
      for k, x in pairs(vars) do v[k] = x end
      ns[i] = h.start_nginx("spec-rate.conf", v)
      ns[i].backend_port = v.BACKEND_PORT
    end
    a, b = ns[1], ns[2]
  end)
  teardown(function()
    if r then r.signal("CONT") end
    if a then a.stop() end
    if b then b.stop() end
    if r then r.stop() end
  end)

  local cjson = require "cjson.safe"
  --- Guard `name`'s row on nginx n's status page.
  local function guard_row(n, name)
    return assert(cjson.decode(assert(h.http(n.port, "/dlock/status")).body)).guards[name]
  end
  local function row(n) return guard_row(n, "fallback") end

  it("admit per nginx its share (rate / fleet, burst / fleet) while Redis is paused: the fleet stays within the limit, " ..
     "no request waits once the breaker is open, and Redis decides again after the cool-down", function()
    assert.equal('"20-per-1s";r=9;t=1', assert(h.http(a.port, "/g/fallback?key=f")).headers["ratelimit"])
    assert.is_true(r.signal("STOP"))
    local admitted, refused, other, slow = 0, 0, 0, 0
    local t0 = h.now()
    h.under_load(2, 16, function(i)
      local n = (i % 2 == 0) and a or b
      local sent = h.now()
      local res = assert(h.http(n.port, "/g/fallback?key=f"))
      local took = h.now() - sent
      if res.status == 200 then admitted = admitted + 1
      elseif res.status == 429 and res.headers["retry-after"] then refused = refused + 1
      else other = other + 1 end
      -- Once the breaker is open (the first failure, after read_timeout 200 ms), nobody waits for Redis.
      if sent > t0 + 0.5 and took >= 0.2 then slow = slow + 1 end
      ngx.sleep(0.01)
    end)
    local elapsed = h.now() - t0
    note("two nginx, Redis paused, on_error = local", admitted, refused, elapsed, 10 + 20 * elapsed)
    assert.equal(0, other)
    assert.equal(0, slow)
    assert.is_true(admitted <= 10 + 20 * elapsed, admitted .. " admitted in " .. elapsed .. " s")
    assert.is_true(admitted >= 10 + 20 * elapsed * 0.5, admitted .. " admitted in " .. elapsed .. " s")
    assert.is_true(refused > admitted)
    local ra, rb = row(a), row(b)
    assert.equal("open", ra.breaker)
    assert.equal(admitted, ra.local_admitted + rb.local_admitted)
    assert.equal(refused, ra.local_rejected + rb.local_rejected)

    assert.is_true(r.signal("CONT"))
    -- Back on Redis within a cool-down (1000 ms) and a margin: the breaker closes, local decisions stop.
    assert.is_true(h.eventually(3, function()
      h.http(a.port, "/g/fallback?key=back")
      return row(a).breaker == "closed"
    end))
    local before = row(a).local_admitted
    local res = assert(h.http(a.port, "/g/fallback?key=back2"))
    assert.equal(200, res.status)
    assert.equal('"20-per-1s";r=9;t=1', res.headers["ratelimit"])
    assert.equal(before, row(a).local_admitted)
  end)

  local function backend_max(n, key)
    local hits, max = h.backend_stats(n.backend_port, key)
    return hits, max
  end

  for _, case in ipairs({
    { guard = "conc_local", share = 2, permits = 4, what = "permits / fleet (2 of 4) at once" },
    { guard = "mutex_local", share = 1, permits = 2, what = "one request at a time (a mutex per nginx)" },
  }) do
    it("let through per nginx " .. case.what .. " with " .. case.guard .. " while Redis is paused, " ..
       "say degraded in status and metrics, wait for no Redis once the breaker is open, and go back to Redis by itself", function()
      local key = h.unique(case.guard)
      assert.is_true(r.signal("STOP"))
      local ok, refused, other, slow = 0, 0, 0, 0
      local t0 = h.now()
      h.under_load(1.5, 12, function(i)
        local n = (i % 2 == 0) and a or b
        local sent = h.now()
        local res = assert(h.http(n.port, "/l/" .. case.guard .. "?key=" .. key .. "&ms=150"))
        if res.status == 200 then ok = ok + 1
        elseif res.status == (case.guard == "mutex_local" and 503 or 429) then refused = refused + 1
        else other = other + 1 end
        -- Past the first failure (read_timeout 200 ms) nobody waits for Redis: 150 ms of backend, the mutex's 100 ms wait, a margin.
        if sent > t0 + 0.5 and h.now() - sent >= 0.45 then slow = slow + 1 end
        ngx.sleep(0.005)
      end)
      for _, n in ipairs({ a, b }) do
        local g = guard_row(n, case.guard)
        assert.is_true(g.degraded)
        assert.is_not.equal("closed", g.breaker)
        assert.is_true(g.local_admitted > 0)
        local metrics = assert(h.http(n.port, "/dlock/metrics")).body
        assert.matches('dlock_guard_degraded{guard="' .. case.guard .. '"} 1', metrics, 1, true)
      end
      local hits_a, max_a = backend_max(a, key)
      local hits_b, max_b = backend_max(b, key)
      assert.equal(0, other)
      assert.equal(0, slow)
      assert.equal(ok, hits_a + hits_b)
      assert.is_true(refused > 0)
      assert.is_true(max_a <= case.share and max_b <= case.share, max_a .. " and " .. max_b .. " at once")
      assert.is_true(max_a + max_b <= case.permits)
      assert.equal(case.share, max_a)   -- the share is used, not just bounded

      assert.is_true(r.signal("CONT"))
      -- Back on Redis after the cool-down (1000 ms) and a probe: the breaker closes, nothing local any more.
      for _, n in ipairs({ a, b }) do
        assert.is_true(h.eventually(4, function()
          h.http(n.port, "/l/" .. case.guard .. "?key=" .. key .. "-back&ms=0")
          return guard_row(n, case.guard).breaker == "closed"
        end))
        local before = guard_row(n, case.guard)
        assert.is_false(before.degraded)
        assert.equal(200, assert(h.http(n.port, "/l/" .. case.guard .. "?key=" .. key .. "-redis&ms=0")).status)
        local after = guard_row(n, case.guard)
        assert.equal(before.local_admitted, after.local_admitted)
        assert.equal(before.acquired + 1, after.acquired)
        assert.matches('dlock_guard_degraded{guard="' .. case.guard .. '"} 0', assert(h.http(n.port, "/dlock/metrics")).body, 1, true)
      end
    end)
  end

  it("admit a request that costs more than this nginx's share of the burst: the share is one request at least", function()
    -- costly_local: 10 per second, burst 4, cost 3, a fleet of 2, its Redis unreachable: each nginx
    -- 5 per second, and 3 (not 2) at once.
    assert.equal(200, assert(h.http(a.port, "/g/costly_local?key=c")).status)
    local res = assert(h.http(a.port, "/g/costly_local?key=c"))
    assert.equal(429, res.status)
    assert.equal("1", res.headers["retry-after"])  -- 3 units back in 600 ms
    ngx.sleep(1.05)
    assert.equal(200, assert(h.http(a.port, "/g/costly_local?key=c")).status)
  end)

  it("refuse a request whose key cannot be computed with on_error = local (rate and lock guards), saying why in the log", function()
    for _, name in ipairs({ "rate_nokey", "conc_nokey" }) do
      local path = name == "rate_nokey" and "/g/" or "/l/"
      for _ = 1, 3 do
        assert.equal(503, assert(h.http(a.port, path .. name .. "?key=k")).status)
      end
      assert.is_true(h.eventually(2, function()
        return a.error_log():find("guard " .. name .. ": no key: the key function raised: [^\n]*no key today[^\n]*" ..
          "refused with 503 %(on_error = \"local\": a key error is not Redis failing%)") ~= nil
      end), name)
    end
  end)

  it("refuse on_error = local without fleet, and fleet without on_error = local, for lock guards too", function()
    local gateway = require "resty.dlock.gateway"
    local o = { mode = "concurrency", permits = 3, key = "$arg_k", on_error = "local", redis = h.redis_opts() }
    assert.equal('dlock: fleet must be a positive integer with on_error = "local" (how many nginx share the permits), got nil',
      select(2, gateway.new(o)))
    o.on_error, o.fleet = "deny", 3
    assert.equal('dlock: fleet applies with on_error = "local" only, got 3', select(2, gateway.new(o)))
    assert.equal('dlock: on_error must be "allow" (fail open) or "deny" (fail closed), got "local"',
      select(2, gateway.new({ mode = "dedup", key = "$arg_k", on_error = "local", redis = h.redis_opts() })))
  end)

  it("refuse on_error = local without fleet, and fleet without on_error = local", function()
    local gateway = require "resty.dlock.gateway"
    local o = { mode = "rate", key = "$arg_k", on_error = "local", rate = 5, redis = h.redis_opts() }
    assert.equal('dlock: fleet must be a positive integer with on_error = "local" (how many nginx share the limit), got nil',
      select(2, gateway.new(o)))
    o.on_error, o.fleet = "deny", 3
    assert.equal('dlock: fleet applies with on_error = "local" only, got 3', select(2, gateway.new(o)))
  end)
end)

-- The paused Redis: each worker's calls in flight when it stopped time out and the breaker opens; the same for
-- conc_local and mutex_local, and their probes (in timers) while Redis is still paused.
h.check_error_logs({ { "lua tcp socket read timed out", max = 120 },
  { "dlock: guard fallback: redis 127%.0%.0%.1:%d+: [^\n]*timeout", max = 40 },
  { "dlock: guard fallback: Redis keeps failing", max = 8 },
  { "dlock: guard %a+_local: redis 127%.0%.0%.1:%d+: [^\n]*timeout", max = 60 },
  { "dlock: guard %a+_local: Redis keeps failing", max = 16 },
  -- costly_local's unreachable Redis.
  { "connect%(%) failed %(111: Connection refused%)", max = 4 },
  { "dlock: guard costly_local: redis 127%.0%.0%.1:%d+: connect", max = 4 },
  -- The key functions of the *_nokey guards raise: one line per worker and interval.
  { "dlock: guard %a+_nokey: no key: the key function raised", max = 8 } })
