-- Failures that must not stop the machinery that recovers from them: a
-- half-open breaker whose probe mark a full dict cannot take still lets one
-- request probe; a renewal whose light thread raised leaves its leases renewed
-- by the next rounds.
local h = require "helpers"
local breaker = require "resty.dlock.gateway.breaker"
local watchdog = require "resty.dlock.core.watchdog"

describe("a half-open breaker in a full dict", function()
  local dict = ngx.shared.dlock_tiny
  local fillers = 0
  local function fill()
    for _, size in ipairs({ 2000, 1000, 400, 150, 60, 20, 1 }) do
      local v = string.rep("x", size)
      while dict:safe_set("bfill:" .. (fillers + 1), v) do fillers = fillers + 1 end
    end
  end
  after_each(function()
    for i = 1, fillers do dict:delete("bfill:" .. i) end
    fillers = 0
    dict:delete("b:fail:full_guard")
    dict:delete("b:probe:full_guard")
  end)

  it("lets one request probe once the cool-down is over", function()
    dict:set("b:fail:full_guard", -1)   -- half open (stats.ts HALF, breaker.ts)
    fill()
    local probes = 0
    for _ = 1, 20 do
      if not breaker.skips(dict, "full_guard", 2) then probes = probes + 1 end
    end
    assert.equal(1, probes, "no request ever asks Redis: the guard stays on on_error for good")
  end)
end)

describe("watchdog renewals in light threads of their endpoints", function()
  it("keeps renewing a lease after one renewal's hook raised (two endpoints)", function()
    local a = h.locks({ redis = h.redis_opts({ db = 0 }) })
    local b = h.locks({ redis = h.redis_opts({ db = 1 }) })
    local la = assert(a:acquire("x", { ttl = 600 }))
    local lb = assert(b:acquire("x", { ttl = 600 }))
    local raised = false
    local hooks = {
      renewed = function(l) if not raised and l == la then raised = true error("boom from a hook") end end,
      lost = function() end,
      failed = function() end,
    }
    assert.is_nil(watchdog.watch(la, hooks))
    assert.is_nil(watchdog.watch(lb, hooks))
    ngx.sleep(1.5)
    watchdog.unwatch(la)
    watchdog.unwatch(lb)
    assert.is_true(raised)
    local okb, errb = lb:extend()
    assert.is_true(okb, errb)
    local oka, erra = la:extend()
    la:release() lb:release()
    assert.is_true(oka, "lease a was not renewed after its hook raised once: " .. tostring(erra))
  end)
end)

h.check_error_logs({
  -- The hook that raises on purpose, logged by the renewal's light thread.
  { "dlock: lease watchdog: .*boom from a hook", max = 1 },
})
