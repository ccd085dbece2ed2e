-- Breakers of local fallbacks across reloads: a reload takes the old workers'
-- probe timer, and the new workers' own probe comes after what is left of the
-- cool-down, not a whole one (frequent reloads kept a guard degraded). And the
-- RateLimit fields of a guard of several limits on a 429: no window past its
-- Retry-After. nginx/spec-breaker-reloads.conf, two workers, a real redis-server.
local h = require "helpers"

local n, r

local function get(path, opts)
  return assert(h.http(n.port, path, opts))
end

local joined, items = h.joined, h.ratelimit_items

local function row(name) return h.guard_row(n.port, name) end

describe("breakers and fields across reloads", function()
  setup(function()
    r = h.start_redis()
    n = h.start_nginx("spec-breaker-reloads.conf", { REDIS_PORT = r.port, PREFIX_KEYS = h.unique("hday") })
  end)
  teardown(function()
    if r then r.signal("CONT") end
    if n then n.stop() end
    if r then r.stop() end
  end)

  it("a RateLimit item of a 429 says no effective window (t) past the 429's Retry-After, for every limit of the guard " ..
     "(README: 't ... rounded up; on a 429, at most its Retry-After')", function()
    local key = h.unique("duo")
    local res
    for _ = 1, 11 do
      res = get("/g/duo?key=" .. key)
      if res.status == 429 then break end
    end
    assert.equal(429, res.status)
    local retry = tonumber(res.headers["retry-after"])
    local what = "Retry-After: " .. tostring(res.headers["retry-after"]) .. ", RateLimit: " .. joined(res.headers["ratelimit"])
    for _, item in ipairs(items(res.headers["ratelimit"])) do
      assert.is_true(item.params.t <= retry, what)
    end
  end)

  -- Reloads nginx: keep these last.
  local function breaker_through_reloads(guard, path)
    assert.is_true(r.signal("STOP"))
    finally(function() r.signal("CONT") end)
    -- read_timeout 200 ms, then decided locally; the breaker opens (breaker_failures 1) for 3000 ms.
    local t0 = h.now()
    assert.equal(200, get(path).status)
    assert.equal("open", row(guard).breaker)
    -- Redis is back at once: the probe after the cool-down (3 s) finds it.
    assert.is_true(r.signal("CONT"))
    -- Deploys every 2 s (an ingress controller's cadence), a request now and then.
    local admitted = row(guard).local_admitted
    for i = 1, 3 do
      while h.now() < t0 + 2 * i - 0.5 do
        get(path)
        ngx.sleep(0.25)
      end
      local old = n.workers()
      assert.is_true(n.reload())
      assert.is_true(n.replaced(old, 2))
    end
    while h.now() < t0 + 7.5 do
      get(path)
      ngx.sleep(0.25)
    end
    local g = row(guard)
    assert.equal("closed", g.breaker, string.format("breaker %s, degraded %s %.1f s after Redis came back (cool-down 3 s): " ..
      "%d requests decided locally meanwhile", tostring(g.breaker), tostring(g.degraded), h.now() - t0,
      (g.local_admitted or 0) - (admitted or 0)))
  end

  it("on_error = local (rate): a breaker opened 3 s (its cool-down) before closes once Redis is back, whatever reloads " ..
     "came meanwhile (README: 'After breaker_cooldown a timer of each nginx asks Redis whether it is back')", function()
    breaker_through_reloads("fb", "/g/fb?key=" .. h.unique("fb"))
  end)

  it("on_error = local (mutex): a breaker opened 3 s (its cool-down) before closes once Redis is back, whatever reloads " ..
     "came meanwhile: the fleet's exclusion comes back from Redis", function()
    breaker_through_reloads("mx", "/g/mx?key=" .. h.unique("mx"))
  end)
end)

h.check_error_logs({ { "lua tcp socket read timed out", max = 8 },
  { "dlock: guard %w+: redis 127%.0%.0%.1:%d+: [^\n]*timeout", max = 8 },
  { "dlock: guard %w+: Redis keeps failing", max = 8 } })
