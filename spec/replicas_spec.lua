-- redis.replicas: WAIT after writes that must survive a failover. A real master
-- and a real replica; the replica is paused (SIGSTOP) to fall behind.
local h = require "helpers"
local dlock = require "resty.dlock"
local rate = require "resty.dlock.rate"

local function replication(port)
  return h.cmd(port, "info", "replication") or ""
end

describe("redis.replicas", function()
  local master, replica

  setup(function()
    master = h.start_redis(nil, "--repl-diskless-sync-delay 0")
    replica = h.start_redis(nil, "--replicaof 127.0.0.1 " .. master.port, "--repl-diskless-sync-delay 0")
    -- Online on both sides, and acknowledging: WAIT counts a replica only once it is.
    for _ = 1, 200 do
      if replication(replica.port):find("master_link_status:up", 1, true)
        and replication(master.port):find("state=online", 1, true) then break end
      ngx.sleep(0.05)
    end
    assert.matches("master_link_status:up", replication(replica.port))
    assert.matches("state=online", replication(master.port))
    assert.equal("OK", h.cmd(master.port, "set", "warm-up", "1"))
    assert.equal(1, h.cmd(master.port, "wait", 1, 5000))
  end)

  teardown(function()
    if replica then replica.signal("CONT") replica.stop() end
    if master then master.stop() end
  end)

  local function locks(extra)
    -- Generous: a loaded CI machine must not turn a healthy replica into a shortfall.
    local o = { port = master.port, replicas = 1, replicas_timeout = 1000, read_timeout = 3000 }
    for k, v in pairs(extra or {}) do o[k] = v end
    return assert(dlock.new({ dict = "dlock", prefix = h.unique("repl"), redis = o }))
  end

  local function shortfalls()
    return ngx.shared.dlock:get("c:redis:replica_shortfalls") or 0
  end

  it("hands out a lock only once a replica has it", function()
    local l = locks()
    local lease = assert(l:acquire("a", { ttl = 5000 }))
    -- Read from the replica right away: WAIT made sure it is there.
    assert.equal(lease.token, h.cmd(replica.port, "get", l.prefix .. "a"))
    assert.is_true(lease:release())
  end)

  it("gives back a lock that no replica acknowledged in time, and says so", function()
    local l = locks({ replicas_timeout = 100 })
    local before = shortfalls()
    replica.signal("STOP")
    local lease, err = l:acquire("b", { ttl = 5000 })
    replica.signal("CONT")
    assert.is_nil(lease)
    assert.equal("dlock: redis 127.0.0.1:" .. master.port ..
      ": only 0 of 1 replica(s) acknowledged the acquire within 100 ms; released", err)
    assert.equal(0, h.cmd(master.port, "exists", l.prefix .. "b"))
    assert.equal(before + 1, shortfalls())
    -- Once the replica catches up, the key can be taken again.
    assert.is_true(assert(l:acquire("b")):release())
  end)

  it("gives back a lock whose batch's connection broke before WAIT could follow it (a later call timed out)", function()
    local pipeline = require "resty.dlock.redis.pipeline"
    local l = locks({ read_timeout = 300 })
    local c = l._store.redis
    assert.equal(h.SLOW.sha, h.cmd(master.port, "script", "load", h.SLOW.src))
    assert.is_true(assert(l:acquire("warm")):release())   -- the acquire's script loaded
    -- As many calls on their way as go out on their own: the next ones form a batch.
    local busy = {}
    for i = 1, pipeline.DIRECT do busy[i] = ngx.thread.spawn(pipeline.call, c, h.SLOW, l.prefix .. "o" .. i, 30, "busy") end
    local acquire = ngx.thread.spawn(function() return { l:acquire("c", { ttl = 5000 }) } end)
    -- Long enough for Redis to read it in pieces: it answers the acquire before this one is whole.
    local slow = ngx.thread.spawn(pipeline.call, c, h.SLOW, l.prefix .. "s", 800, "r", string.rep("x", 64 * 1024))
    local _, got = ngx.thread.wait(acquire)
    local _, _, _, fault = ngx.thread.wait(slow)
    for i = 1, #busy do ngx.thread.wait(busy[i]) end
    ngx.sleep(0.8)   -- the slow script ends
    assert.equal("lost", fault)
    assert.is_nil(got[1])
    assert.matches("the connection broke before WAIT for replicas after the acquire", got[2], 1, true)
    assert.is_true(h.eventually(2, function() return h.cmd(master.port, "exists", l.prefix .. "c") == 0 end))
  end)

  it("answers a charged rate decision once a replica has the key's state, and an error when none acknowledged it in time",
    function()
    local lim = assert(rate.new({ dict = "dlock", prefix = h.unique("replrate"), rate = 3, period = 60000,
      redis = { port = master.port, replicas = 1, replicas_timeout = 100, read_timeout = 3000 } }))
    assert.same({ 0, 2 }, { lim:incoming("k", true) })
    -- Read from the replica right away: WAIT made sure the TAT is there.
    local state = h.rate_state(master.port, lim.prefix .. "k")
    assert.is_string(state["1"])
    assert.same(state, h.rate_state(replica.port, lim.prefix .. "k"))
    local before = shortfalls()
    replica.signal("STOP")
    local delay, err = lim:incoming("k", true)
    -- A dry run writes nothing: no WAIT, answered while the replica is still stopped.
    local dry, left = lim:incoming("k", false)
    replica.signal("CONT")
    assert.is_nil(delay)
    assert.equal("dlock: redis 127.0.0.1:" .. master.port .. ": only 0 of 1 replica(s) acknowledged the rate within 100 ms", err)
    assert.equal(before + 1, shortfalls())
    assert.equal(0, dry)
    -- The charge no replica acknowledged stays on the master (it counts against the client, as it may have passed):
    -- of 3, one taken and acknowledged, one taken unacknowledged, and the dry run's as if charged leave 0.
    assert.equal(0, left)
  end)

  it("reports an extend that no replica acknowledged; the lease is still held", function()
    local l = locks()
    local lease = assert(l:acquire("c", { ttl = 2000 }))
    replica.signal("STOP")
    local ok, err = lease:extend(9000)
    replica.signal("CONT")
    assert.is_nil(ok)
    assert.matches("only 0 of 1 replica%(s%) acknowledged the extend within 1000 ms$", err)
    assert.is_true(h.cmd(master.port, "pttl", l.prefix .. "c") > 5000)
    assert.is_true(lease:release())
  end)

  it("waits once for a whole pipeline of renewals", function()
    local l = locks()
    local leases = {}
    for i = 1, 5 do leases[i] = assert(l:acquire("d" .. i, { ttl = 3000 })) end
    local batch = require "resty.dlock.core.batch"
    local results = batch.extendAll(leases)
    for i = 1, 5 do assert.is_true(results[i]) end
    replica.signal("STOP")
    results = batch.extendAll(leases)
    replica.signal("CONT")
    for i = 1, 5 do assert.matches("only 0 of 1 replica%(s%) acknowledged the extend", results[i]) end
    for i = 1, 5 do assert.is_true(leases[i]:release()) end
  end)

  it("refuses bad replica options, naming them", function()
    local _, err = dlock.new({ dict = "dlock", redis = { replicas = -1 } })
    assert.equal("dlock: redis.replicas must be a non-negative integer, got -1", err)
    _, err = dlock.new({ dict = "dlock", redis = { replicas_timeout = 50 } })
    assert.equal("dlock: redis.replicas_timeout needs redis.replicas > 0, got 50", err)
    _, err = dlock.new({ dict = "dlock", redis = { replicas = 1, replicas_timeout = 0 } })
    assert.equal("dlock: redis.replicas_timeout must be a positive integer of ms, got 0", err)
  end)
end)

-- The batch whose slow call the read timeout cut, on purpose.
h.check_error_logs({ { "lua tcp socket read timed out", max = 2 } })
