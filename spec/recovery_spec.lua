-- Crash recovery: the leases of a worker that died without running its Lua
-- (SIGKILL) are released, owner-checked, by the worker nginx starts in its
-- place, from the shared-dict records; leases of live workers are untouched.
local h = require "helpers"

--- GET /crash-hold?key=K on a connection kept open: { pid, lock token, permit token, sock }.
local function hold(port, key)
  local pid, lt, pt, sock = h.hold_open(port, "/crash-hold?key=" .. key, "^(%d+) (%S+) (%S+)$")
  return { pid = tonumber(pid), lock = lt, permit = pt, sock = sock }
end

local now = h.now

describe("crash recovery", function()
  local peer
  setup(function() peer = h.start_nginx("spec-peer.conf", { WORKERS = 2 }) end)
  teardown(function() if peer then peer.stop() end end)

  it("releases the leases of a SIGKILLed worker within a second, and not those of the worker still alive", function()
    local prefix = h.unique("k")
    -- Two holders in two different workers.
    local a = hold(peer.port, prefix .. "a")
    local b
    for i = 1, 20 do
      b = hold(peer.port, prefix .. "b" .. i)
      if b.pid ~= a.pid then break end
      b.sock:close()
      b = nil
    end
    assert.is_truthy(b, "both requests landed in one worker")
    assert.equal(a.lock, h.cmd(nil, "get", "crash:" .. prefix .. "a"))
    assert.is_truthy(h.cmd(nil, "zscore", "crash:sem:" .. prefix .. "a", a.permit) ~= ngx.null)

    local t0 = now()
    assert(h.sh("kill -KILL " .. a.pid))
    -- The ttl is 60 s: only recovery frees these keys this soon.
    local freed
    while now() - t0 < 3 do
      if h.cmd(nil, "get", "crash:" .. prefix .. "a") == ngx.null
        and h.cmd(nil, "zscore", "crash:sem:" .. prefix .. "a", a.permit) == ngx.null then
        freed = now() - t0
        break
      end
      ngx.sleep(0.02)
    end
    assert.is_truthy(freed, "the dead worker's lock and permit are still taken after 3 s")
    assert.is_true(freed < 1, "freed after " .. tostring(freed) .. " s")
    -- The live worker's lease is untouched.
    a.sock:close()
    local held = h.cmd(nil, "keys", "crash:" .. prefix .. "b*")
    assert.equal(1, #held)
    assert.equal(b.lock, h.cmd(nil, "get", held[1]))
    b.sock:close()
  end)

  it("never releases a key a successor took after the dead worker's lease", function()
    local prefix = h.unique("s")
    local a = hold(peer.port, prefix)
    -- The lock is deleted and taken by someone else before the worker dies.
    h.cmd(nil, "set", "crash:" .. prefix, "successor", "px", 10000)
    assert(h.sh("kill -KILL " .. a.pid))
    a.sock:close()
    ngx.sleep(1)
    assert.equal("successor", h.cmd(nil, "get", "crash:" .. prefix))
    h.cmd(nil, "del", "crash:" .. prefix)
  end)
end)

describe("crash recovery while Redis does not answer", function()
  local redis, peer
  setup(function()
    redis = h.start_redis()
    peer = h.start_nginx("spec-peer.conf", { WORKERS = 1, REDIS_PORT = redis.port })
  end)
  teardown(function()
    if peer then peer.stop() end
    if redis then redis.stop() end
  end)

  it("gives a SIGKILLed worker's leases back once Redis answers again, not at their ttl", function()
    local key = h.unique("p")
    local a = hold(peer.port, key)
    -- The replacement's sweep meets a Redis that does not answer (its give-back times out).
    assert(redis.signal("STOP"))
    assert(h.sh("kill -KILL " .. a.pid))
    a.sock:close()
    ngx.sleep(3)
    assert(redis.signal("CONT"))
    local t0, freed = now(), nil
    while now() - t0 < 8 do
      if h.cmd(redis.port, "get", "crash:" .. key) == ngx.null
        and h.cmd(redis.port, "zscore", "crash:sem:" .. key, a.permit) == ngx.null then
        freed = now() - t0
        break
      end
      ngx.sleep(0.05)
    end
    assert.is_truthy(freed, "the dead worker's lock and permit are still taken 8 s after Redis came back (ttl 60 s)")
    assert.is_true(freed < 5, "freed " .. tostring(freed) .. " s after Redis came back")
  end)
end)

describe("the API in phases without cosockets", function()
  local n
  setup(function() n = h.start_nginx("spec-phases.conf", {}) end)
  teardown(function() if n then n.stop() end end)

  local function result(phase, call)
    return (assert(h.http(n.port, "/result?k=" .. ngx.escape_uri(phase .. " " .. call))).body:gsub("\n$", ""))
  end

  it("answers nil and an error naming the phase, and raises nothing, in init, init_worker, set, filters and log", function()
    assert.equal(200, h.http(n.port, "/phases").status)
    ngx.sleep(0.1)
    for _, phase in ipairs({ "init", "init_worker", "set", "header_filter", "body_filter", "log" }) do
      for _, call in ipairs({ "acquire", "sem_acquire", "with" }) do
        assert.equal("false nil dlock: acquire needs cosockets, which nginx does not allow in the " .. phase ..
          " phase (use it in access/content, or from ngx.timer.at)", result(phase, call), phase .. " " .. call)
      end
      for _, call in ipairs({ "serve", "metrics" }) do
        assert.equal("false nil dlock: status." .. call .. " answers a request: call it from content_by_lua, not the " ..
          phase .. " phase", result(phase, call), phase .. " " .. call)
      end
      assert.equal("false 0 nil", result(phase, "held"))
      assert.equal("false report nil", result(phase, "report"))
      assert.equal("false text nil", result(phase, "metrics_text"))
      -- A guard has nothing to refuse there: it says so (once per guard) and returns.
      assert.equal("false nil nil", result(phase, "guard_access"), phase .. " guard_access")
      assert.equal("false nil nil", result(phase, "idem_access"), phase .. " idem_access")
    end
    local log = n.error_log()
    for _, g in ipairs({ "phase-dedup", "phase-idem" }) do
      assert.matches("dlock: guard " .. g:gsub("%-", "%%-") .. ": access%(%) called in the %w+ phase, where it can refuse nothing", log)
    end
    assert.equal("false nil dlock: init_worker is not available in the init phase (no timers): call it from init_worker_by_lua",
      result("init", "init_worker"))
    assert.equal("false true nil", result("init_worker", "init_worker"))
    assert.equal("false true nil", result("log", "init_worker"))
  end)

  it("still releases the leases of a SIGKILLed worker after an acquire in init_by_lua", function()
    local key = h.unique("p")
    local a = hold(n.port, key)
    assert.equal(a.lock, h.cmd(nil, "get", "phase:" .. key))
    local t0 = now()
    assert(h.sh("kill -KILL " .. a.pid))
    local freed
    while now() - t0 < 3 do
      if h.cmd(nil, "get", "phase:" .. key) == ngx.null
        and h.cmd(nil, "zscore", "phase:sem:" .. key, a.permit) == ngx.null then
        freed = now() - t0
        break
      end
      ngx.sleep(0.02)
    end
    a.sock:close()
    assert.is_truthy(freed, "the dead worker's lock and permit are still taken after 3 s (ttl 60 s)")
    assert.is_true(freed < 1, "freed after " .. tostring(freed) .. " s")
  end)
end)

h.check_error_logs({
  "worker process %d+ exited on signal 9",  -- the SIGKILLed peer workers
  -- The replacement's give-backs while its Redis is stopped: the first and the retries before it came back.
  { "lua tcp socket read timed out,[^\n]* context: ngx%.timer", max = 4 },
  -- Guards called on purpose where they can refuse nothing (once per guard and worker).
  "dlock: guard phase%-%a+: access%(%) called in the %w+ phase, where it can refuse nothing",
})
