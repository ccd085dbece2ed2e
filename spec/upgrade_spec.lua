-- A library upgrade as operators deploy one: new files, nginx -s reload, the
-- shared dict kept with what the release before wrote there. Here the release
-- before 8f40746 (its breaker's keys were a string and a key with a ttl)
-- opened a guard's breaker; after the reload the new release's breaker still
-- opens (nginx/spec-upgrade.conf, the dist of 381b5e2 from git, real Redis paused).
local h = require "helpers"

describe("an upgrade from the release before 8f40746 by nginx -s reload while Redis is paused and the breaker open", function()
  local r, n, dir

  local function row(name) return h.guard_row(n.port, name) end

  setup(function()
    r = h.start_redis()
    dir = h.prefix .. "/upgrade-" .. h.next_seq()
    -- The release before 8f40746 (dist of 381b5e2) at dir/old, this one at dir/new; dir/lib points at the one running.
    assert(h.sh("mkdir -p " .. dir .. "/old && chmod 755 " .. dir .. " && git -C " .. h.root .. " archive 381b5e2 dist | tar -x -C " ..
      dir .. "/old && mkdir -p " .. dir .. "/new && cp -r " .. h.root .. "/dist " .. dir .. "/new/ && chmod -R a+rX " .. dir ..
      " && ln -sfn " .. dir .. "/old/dist " .. dir .. "/lib"))
    n = h.start_nginx("spec-upgrade.conf", { REDIS_PORT = r.port, LIB = dir .. "/lib" })
  end)

  teardown(function()
    if r then r.signal("CONT") end
    if n then n.stop() end
    if r then r.stop() end
  end)

  it("the new release's breaker opens again after breaker_failures (3) timeouts: requests are then refused at once", function()
    r.signal("STOP")
    finally(function() r.signal("CONT") end)
    for _ = 1, 4 do assert.equal(503, assert(h.http(n.port, "/jobs?job=" .. h.unique("j"))).status) end
    assert.equal("open", row("jobs").breaker)
    -- The deploy: the new library, nginx -s reload (the dict, with the breaker's keys, stays).
    assert(h.sh("ln -sfn " .. dir .. "/new/dist " .. dir .. "/lib"))
    assert.is_true(n.reload())
    assert(h.eventually(5, function()
      if not n.error_log():find("reconfiguring", 1, true) then ngx.sleep(0.05) return false end
      return true
    end), "nginx did not reload")
    -- The old workers may linger (lost replies swept up to 60 s); the new ones take the new connections.
    ngx.sleep(1.5)
    -- Redis is still paused: three more failures at most, then the breaker answers at once.
    for _ = 1, 3 do assert.equal(503, assert(h.http(n.port, "/jobs?job=" .. h.unique("j"))).status) end
    local slow = 0
    for _ = 1, 5 do
      local t0 = h.now()
      assert.equal(503, assert(h.http(n.port, "/jobs?job=" .. h.unique("j"))).status)
      if h.now() - t0 > 0.2 then slow = slow + 1 end
    end
    local now = row("jobs")
    assert.equal(0, slow, slow .. " of 5 requests waited the paused Redis' read timeout after the upgrade (breaker " ..
      now.breaker .. ", redis_errors " .. now.redis_errors .. ", breaker_opened " .. now.breaker_opened .. ")")
    assert.equal("open", now.breaker)
  end)
end)

h.check_error_logs({
  -- Redis paused on purpose: the guard and nginx say so.
  "lua tcp socket read timed out",
  "dlock: guard jobs: redis 127%.0%.0%.1:%d+: timeout during acquire",
  "dlock: guard jobs: redis 127%.0%.0%.1:%d+: timeout during the eviction check",
  "dlock: guard jobs: Redis keeps failing",
})
