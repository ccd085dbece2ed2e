-- redis.redlock: one lock on a majority of independent masters (three
-- redis-servers on loopback, no replication): the core behaviours of
-- spec/topology/suite.lua (taken and released on all, exclusive, no fencing, no
-- semaphores), and what is Redlock's own: a majority enough, less than a
-- majority never a lease.
local h = require "helpers"
local suite = require "topology.suite"
local status = require "resty.dlock.status"

local elapsed = h.elapsed

describe("redis.redlock", function()
  local t = suite.topology("redlock")
  local r

  setup(function()
    t.start()
    r = t.handle
  end)

  teardown(function()
    t.stop()
  end)

  local locks = t.locks

  --- The value of key on each master, in order (ngx.null where absent).
  local function values(key)
    local out = {}
    for i, port in ipairs(r.ports) do out[i] = h.cmd(port, "get", key) end
    return out
  end

  -- Every master runs again after each test, whatever the test paused.
  after_each(function()
    for _, n in ipairs(r.nodes) do n.signal("CONT") end
  end)

  suite.run(t)

  --- Pause master i (SIGSTOP) until the test ends.
  local function pause(i)
    r.nodes[i].signal("STOP")
  end

  it("takes the lock on a majority when one master is paused, within the timeouts", function()
    local l = locks()
    assert(l:acquire("warm")):release()   -- pooled connections to all three
    pause(1)
    local took, lease, err = elapsed(function() return l:acquire("m", { ttl = 5000 }) end)
    assert.is_nil(err)
    assert.is_table(lease)
    assert.is_true(took < 0.3, "took " .. took .. " s with 50 ms timeouts")
    assert.equal(lease.token, h.cmd(r.ports[2], "get", l.prefix .. "m"))
    assert.equal(lease.token, h.cmd(r.ports[3], "get", l.prefix .. "m"))
    assert.is_true(lease:release())
    assert.equal(0, h.cmd(r.ports[2], "exists", l.prefix .. "m"))
    assert.equal(0, h.cmd(r.ports[3], "exists", l.prefix .. "m"))
  end)

  it("gives no lease without a majority, and leaves no key behind on the master that answered", function()
    local l = locks()
    assert(l:acquire("warm")):release()
    pause(1)
    pause(2)
    local took, lease, err = elapsed(function() return l:acquire("n", { ttl = 5000, wait = 0 }) end)
    assert.is_nil(lease)
    assert.is_string(err)
    assert.matches("^dlock: ", err)
    assert.are_not.equal("busy", err)
    assert.is_true(took < 0.5, "took " .. took .. " s with 50 ms timeouts")
    -- Given back where it was taken before acquire returned: the key does not block the live master for its ttl.
    assert.equal(0, h.cmd(r.ports[3], "exists", l.prefix .. "n"), "the key is still on 127.0.0.1:" .. r.ports[3])
  end)

  it("says busy (not an error) when the key is held on the masters that answer and one master is paused", function()
    local holder = locks()
    local other = locks({ prefix = holder.prefix })
    local lease = assert(holder:acquire("held", { ttl = 5000 }))
    pause(1)
    local none, err, retry_after = other:acquire("held", { wait = 0 })
    assert.is_nil(none)
    assert.equal("busy", err)
    assert.is_true(retry_after > 4000 and retry_after <= 5000, "retry_after " .. tostring(retry_after))
    -- A waiter keeps waiting through the pause instead of failing at once.
    local took, l2, werr = elapsed(function() return other:acquire("held", { wait = 300 }) end)
    assert.is_nil(l2)
    assert.equal("timeout", werr)
    assert.is_true(took >= 0.29, "gave up after " .. took .. " s")
    r.nodes[1].signal("CONT")
    assert.is_true(lease:release())
  end)

  it("says busy when someone else holds the key on 2 of 3 masters, and takes it when they hold 1", function()
    local l = locks()
    local k2, k1 = l.prefix .. "two", l.prefix .. "one"
    assert.equal("OK", h.cmd(r.ports[1], "set", k2, "someone", "px", 5000))
    assert.equal("OK", h.cmd(r.ports[2], "set", k2, "someone", "px", 5000))
    local none, err, retry_after = l:acquire("two", { wait = 0 })
    assert.is_nil(none)
    assert.equal("busy", err)
    assert.is_number(retry_after)
    assert.same({ "someone", "someone", ngx.null }, values(k2))

    assert.equal("OK", h.cmd(r.ports[1], "set", k1, "someone", "px", 5000))
    local lease, lerr = l:acquire("one", { ttl = 5000, wait = 0 })
    assert.is_nil(lerr)
    assert.same({ "someone", lease.token, lease.token }, values(k1))
    -- The release is owner-checked on every master: the other holder's key stays.
    assert.is_true(lease:release())
    assert.same({ "someone", ngx.null, ngx.null }, values(k1))
  end)

  it("extends on a majority, puts the key back where a master lost it, and says not_owner once someone else holds 2", function()
    local l = locks()
    local key = l.prefix .. "e"
    local lease = assert(l:acquire("e", { ttl = 1000 }))
    assert.is_true(lease:extend(8000))
    for _, port in ipairs(r.ports) do assert.is_true(h.cmd(port, "pttl", key) > 7000) end
    assert.equal(1, h.cmd(r.ports[1], "del", key))
    assert.is_true(lease:extend(9000))
    assert.same({ lease.token, lease.token, lease.token }, values(key))
    for _, port in ipairs(r.ports) do assert.is_true(h.cmd(port, "pttl", key) > 8000) end
    assert.equal("OK", h.cmd(r.ports[1], "set", key, "someone", "px", 5000))
    assert.equal("OK", h.cmd(r.ports[2], "set", key, "someone", "px", 5000))
    assert.same({ nil, "not_owner" }, { lease:extend(9000) })
    assert.same({ "someone", "someone", lease.token }, values(key))
  end)

  it("keeps the record of a successor holding a majority when a lease released late still held one master", function()
    local l = locks()
    local key = l.prefix .. "late"
    local first = assert(l:acquire("late", { ttl = 10000 }))
    -- The first lease's key ran out on two masters (deleted here); a successor in this nginx takes those two,
    -- a majority, and its record replaces the first lease's.
    assert.equal(1, h.cmd(r.ports[1], "del", key))
    assert.equal(1, h.cmd(r.ports[2], "del", key))
    local second = assert(l:acquire("late", { ttl = 10000 }))
    assert.same({ second.token, second.token, first.token }, values(key))
    -- The late release deletes its token on the third master: a quorum answers 1 for that, which says nothing
    -- of who holds a majority, so the successor's record stays.
    assert.is_true(first:release())
    assert.same({ second.token, second.token, ngx.null }, values(key))
    local held = {}
    for _, lease in ipairs(l:held()) do held[lease.token] = lease end
    assert.is_table(held[second.token], "the successor's record was deleted by the late release")
    assert.is_true(second:release())
    held = {}
    for _, lease in ipairs(l:held()) do held[lease.token] = lease end
    assert.is_nil(held[second.token])
  end)

  it("shows the endpoint as redlock on the status page, with each master's health", function()
    local l = locks()
    assert(l:acquire("s1")):release()
    local function row()
      return assert(status.report({ limit = 0 })).topology[l._store.redis.endpoint]
    end
    local function by_endpoint(ep)
      local out = {}
      for _, m in ipairs(ep.masters) do out[m.endpoint] = m end
      return out
    end
    local ep = row()
    assert.equal("redlock", ep.kind)
    assert.equal(2, ep.majority)
    assert.equal(3, #ep.masters)
    local before = by_endpoint(ep)
    for _, addr in ipairs(r.addrs) do assert.is_table(before[addr], addr .. " is not listed") end
    pause(1)
    assert(l:acquire("s2")):release()
    local after = by_endpoint(row())
    local down = r.addrs[1]
    assert.is_true(after[down].failed > (before[down].failed or 0))
    assert.is_string(after[down].last_error)
    for i = 2, 3 do
      local up = r.addrs[i]
      assert.equal(before[up].failed or 0, after[up].failed or 0)
      assert.is_true(after[up].ok > before[up].ok)
    end
  end)

  it("wakes waiters through another master when the first is down: subscribed on a master that answers", function()
    -- A release publishes on every master: any one of them will do for the subscription.
    local redis = { redlock = { "127.0.0.1:" .. h.free_port(), r.addrs[2], r.addrs[3] }, connect_timeout = 50, read_timeout = 50 }
    local prefix = h.unique("rlseed")
    local holder_side = assert(require("resty.dlock").new({ dict = "dlock_other", prefix = prefix, redis = redis }))
    local l = assert(require("resty.dlock").new({ dict = "dlock", prefix = prefix, redis = redis }))
    local holder = assert(holder_side:acquire("w", { ttl = 10000 }))
    local waiter = ngx.thread.spawn(function() return l:acquire("w", { ttl = 5000, wait = 6000 }) end)
    local channel = "dlock:released:" .. prefix .. "w"
    local function subscribers()
      return h.cmd(r.ports[2], "pubsub", "numsub", channel)[2] + h.cmd(r.ports[3], "pubsub", "numsub", channel)[2]
    end
    local subscribed = h.eventually(3, function() ngx.sleep(0.05) return subscribers() >= 1 end)
    assert.is_true(holder:release())
    local ok, lease, err = ngx.thread.wait(waiter)
    assert.is_true(ok)
    assert(lease, err)
    assert.is_true(lease:release())
    assert.is_true(subscribed, "neither master that answers has a subscriber to " .. channel .. " after 3 s of waiting")
  end)
end)

h.check_error_logs({
  "lua tcp socket read timed out",  -- the master paused on purpose
  { "connect%(%) failed %(111: Connection refused%), context: ngx%.timer", max = 6 },  -- the master down on purpose
})
