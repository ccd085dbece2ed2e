-- The gateway's rate guards (mode = "rate") at their edges, against a
-- real nginx of 2 workers (nginx/spec-rate-guard-edges.conf) and a real redis-server:
-- the RateLimit fields against draft-ietf-httpapi-ratelimit-headers-11 (the
-- draft the README names), and the local fallback's probe across a reload.
local h = require "helpers"

local n, r

local function get(path, opts)
  return assert(h.http(n.port, path, opts))
end

local joined, items = h.joined, h.ratelimit_items

local function row(name) return h.guard_row(n.port, name) end

describe("rate guards at their edges", function()
  setup(function()
    r = h.start_redis()
    n = h.start_nginx("spec-rate-guard-edges.conf", { REDIS_PORT = r.port, PREFIX_KEYS = h.unique("rge") })
  end)
  teardown(function()
    if r then r.signal("CONT") end
    if n then n.stop() end
    if r then r.stop() end
  end)

  it("two rate guards on one request with the same numbers (per client, per API key) name their policies apart: " ..
     "no two RateLimit-Policy or RateLimit items share a policy name", function()
    local res = get("/two?ip=" .. h.unique("ip") .. "&key=" .. h.unique("k"))
    assert.equal(200, res.status)
    local policy, limits = items(res.headers["ratelimit-policy"]), items(res.headers["ratelimit"])
    assert.equal(2, #policy)
    assert.equal(2, #limits)
    local what = "RateLimit-Policy: " .. joined(res.headers["ratelimit-policy"]) ..
      " / RateLimit: " .. joined(res.headers["ratelimit"])
    -- A client matches a RateLimit item to its policy by name (draft-11 sections 3.1, 4.1): with one name
    -- for both, the per-client and the per-key limit cannot be told apart (their r differ once used unevenly).
    assert.are_not.equal(policy[1].name, policy[2].name, what)
    assert.are_not.equal(limits[1].name, limits[2].name, what)
  end)

  it("a 429 does not say an effective window (t) that ends after its Retry-After (draft-11 section 6): " ..
     "t of the refusing policy is the time until a request fits again", function()
    -- win: 4 per 8 s (one every 2 s). search (the README's): 100 per minute, burst 20, cost 5.
    for _, case in ipairs({ { guard = "win", admitted = 4 }, { guard = "search", admitted = 4 } }) do
      local key = h.unique(case.guard)
      for _ = 1, case.admitted do assert.equal(200, get("/g/" .. case.guard .. "?key=" .. key).status) end
      local res = get("/g/" .. case.guard .. "?key=" .. key)
      assert.equal(429, res.status)
      local retry = tonumber(res.headers["retry-after"])
      local item = items(res.headers["ratelimit"])[1]
      local what = case.guard .. ": Retry-After: " .. tostring(res.headers["retry-after"]) .. ", RateLimit: " ..
        joined(res.headers["ratelimit"])
      assert.equal(0, item.params.r, what)
      -- "If a response contains both the Retry-After and the RateLimit header fields, the Retry-After field
      -- value SHOULD NOT reference a point in time earlier than the end of the effective window", where t is
      -- "the number of seconds within which the client can use no more than the available quota" (r = 0 here).
      assert.is_true(item.params.t <= retry, what)
      -- And the retry at Retry-After is admitted: within t the client could in fact use more than r = 0.
      ngx.sleep(retry)
      assert.equal(200, get("/g/" .. case.guard .. "?key=" .. key).status, what)
    end
  end)

  -- Last: it reloads the nginx.
  it("on_error = local: after nginx -s reload during a Redis outage, an idle rate guard still probes Redis once it is " ..
     "back, and stops saying degraded after the cool-down and a probe", function()
    assert.is_true(r.signal("STOP"))
    finally(function() r.signal("CONT") end)
    -- read_timeout 200 ms, then decided locally; the breaker opens (breaker_failures 1) for 1000 ms.
    local res = get("/g/fb?key=" .. h.unique("out"))
    assert.equal(200, res.status)
    assert.equal("open", row("fb").breaker)
    assert.is_true(row("fb").degraded)
    -- A deploy meanwhile: the old workers leave (their probe timer with them), new ones start.
    local old = n.workers()
    assert.is_true(n.reload())
    assert.is_true(n.replaced(old, 2))
    assert.is_true(r.signal("CONT"))
    -- No guarded request from here on. The cool-down (1 s) and a probe (its timeouts 0.4 s) fit
    -- four times over in 6 s; the idle guard of guard_edges_spec closes within 2 s without a reload.
    local closed = h.eventually(6, function()
      ngx.sleep(0.1)
      return row("fb").breaker == "closed"
    end)
    local g = row("fb")
    local metrics = assert(h.http(n.port, "/dlock/metrics")).body
    assert.is_true(closed, "breaker " .. tostring(g.breaker) .. ", degraded " .. tostring(g.degraded) ..
      " 6 s after Redis came back (the new workers never probe until a request comes)")
    assert.is_false(g.degraded)
    assert.matches('dlock_guard_degraded{guard="fb"} 0', metrics, 1, true)
  end)
end)

-- The paused Redis: the one request's call times out, the breaker opens; the old workers' probe, if it ran.
h.check_error_logs({ { "lua tcp socket read timed out", max = 4 },
  { "dlock: guard fb: redis 127%.0%.0%.1:%d+: [^\n]*timeout", max = 4 },
  { "dlock: guard fb: Redis keeps failing", max = 4 } })
