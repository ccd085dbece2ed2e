-- The watchdog: acquire(key, { renew = true, on_lost = fn }) keeps a lease
-- alive from one sweep per worker until it is released; a lease found gone,
-- or not renewable before it expires, is lost: lease:valid() turns false and
-- on_lost runs once. Against the real test Redis (and one that gets paused).
local h = require "helpers"
local dlock = require "resty.dlock"
local semaphore = require "resty.dlock.semaphore"

local now, eventually = h.now, h.eventually

describe("watchdog", function()
  it("keeps a renewed lease alive well past its ttl, until it is released", function()
    local locks = h.locks()
    local lease = assert(locks:acquire("long", { ttl = 300, renew = true }))
    ngx.sleep(1.2)  -- four ttls
    assert.equal(lease.token, h.cmd(nil, "get", locks.prefix .. "long"))
    assert.is_true(lease:valid())
    local _, err = h.locks({ prefix = locks.prefix }):acquire("long", { ttl = 300 })
    assert.equal("busy", err)
    assert.is_true(lease:release())
    assert.equal(ngx.null, h.cmd(nil, "get", locks.prefix .. "long"))
    assert.is_false(lease:valid())
  end)

  it("keeps renewing a lease its holder extended to a shorter ttl", function()
    local locks = h.locks()
    local lease = assert(locks:acquire("shortened", { ttl = 30000, renew = true }))
    assert.is_true(lease:extend(300))
    ngx.sleep(1)  -- three of the new ttls
    assert.is_true(lease:valid())
    assert.equal(lease.token, h.cmd(nil, "get", locks.prefix .. "shortened"))
    assert.is_true(lease:release())
  end)

  it("renews a short lease taken while the sweep sleeps for a long one", function()
    local locks = h.locks()
    local long = assert(locks:acquire("long-first", { ttl = 30000, renew = true }))
    ngx.sleep(0.05)  -- the sweep asleep for the long lease's tick
    local short = assert(locks:acquire("short-later", { ttl = 200, renew = true }))
    ngx.sleep(1)  -- five of its ttls
    assert.is_true(short:valid())
    assert.equal(short.token, h.cmd(nil, "get", locks.prefix .. "short-later"))
    assert.is_true(short:release())
    assert.is_true(long:release())
  end)

  it("renews a set's keys (acquire_all) extended to a shorter ttl", function()
    local locks = h.locks()
    local set = assert(locks:acquire_all({ "set-a", "set-b" }, { ttl = 30000, renew = true }))
    assert.is_true(set:extend(300))
    ngx.sleep(1)
    assert.is_true(set:valid())
    assert.equal(set.token, h.cmd(nil, "get", locks.prefix .. "set-b"))
    assert.is_true(set:release())
  end)

  it("does not renew a lease taken without renew: it expires at its ttl", function()
    local locks = h.locks()
    local lease = assert(locks:acquire("short", { ttl = 200 }))
    assert.is_true(lease:valid())
    ngx.sleep(0.35)
    assert.equal(ngx.null, h.cmd(nil, "get", locks.prefix .. "short"))
    -- valid() knows it from the local clock alone, without asking Redis.
    assert.is_false(lease:valid())
  end)

  it("tells the holder once when the key is deleted under it: on_lost(lease, why), valid() false, an error log line", function()
    local locks = h.locks()
    local calls = {}
    local lease = assert(locks:acquire("stolen", { ttl = 300, renew = true, on_lost = function(l, why)
      calls[#calls + 1] = { l, why }
    end }))
    assert.equal(1, h.cmd(nil, "del", locks.prefix .. "stolen"))
    assert.is_true(eventually(1, function() return #calls > 0 end), "on_lost was not called")
    ngx.sleep(0.3)  -- more sweeps: still only once
    assert.equal(1, #calls)
    assert.equal(lease, calls[1][1])
    assert.matches("gone from Redis", calls[1][2])
    assert.is_false(lease:valid())
    assert.is_true(lease._lost)
    local _, err = lease:release()
    assert.equal("not_owner", err)
  end)

  it("reports a lease lost when Redis cannot renew it before it expires (Redis paused)", function()
    local r = h.start_redis()
    finally(function() r.signal("CONT"); r.stop() end)
    local locks = assert(dlock.new({ dict = "dlock", prefix = h.unique("wd"),
      redis = { port = r.port, read_timeout = 100, connect_timeout = 100 } }))
    local why
    local lease = assert(locks:acquire("paused", { ttl = 300, renew = true, on_lost = function(_, w) why = w end }))
    r.signal("STOP")
    local t0 = now()
    assert.is_true(eventually(1.5, function() return why ~= nil end), "on_lost was not called")
    -- Not before the lease could have expired, and soon after.
    assert.is_true(now() - t0 >= 0.2)
    assert.matches("could not renew it before it expired", why)
    assert.is_false(lease:valid())
  end)

  it("does not call on_lost for a lease its holder released", function()
    local locks = h.locks()
    local called = false
    local lease = assert(locks:acquire("mine", { ttl = 150, renew = true, on_lost = function() called = true end }))
    ngx.sleep(0.2)
    assert.is_true(lease:release())
    ngx.sleep(0.3)
    assert.is_false(called)
  end)

  it("renews semaphore permits too", function()
    local sem = assert(semaphore.new({ dict = "dlock", redis = h.redis_opts(), prefix = h.unique("wdsem"), permits = 1 }))
    local permit = assert(sem:acquire("p", { ttl = 200, renew = true }))
    ngx.sleep(0.7)
    local _, err = sem:acquire("p", { ttl = 200 })
    assert.equal("busy", err)
    assert.is_true(permit:valid())
    assert.is_true(permit:release())
  end)

  it("releases a renewed lease whose timer returned without releasing it, instead of renewing it forever", function()
    local locks = h.locks()
    local token, returned
    assert(ngx.timer.at(0, function()
      local lease = assert(locks:acquire("forgotten", { ttl = 300, renew = true }))
      token = lease.token
      ngx.sleep(0.5)  -- renewed while the timer runs
      returned = now()
    end))
    ngx.sleep(0.45)
    assert.is_string(token)
    assert.equal(token, h.cmd(nil, "get", locks.prefix .. "forgotten"))
    assert.is_true(eventually(1, function() return returned ~= nil end))
    -- Released by the watchdog soon after, well before the ttl would have run out.
    assert.is_true(eventually(0.25, function() return h.cmd(nil, "get", locks.prefix .. "forgotten") == ngx.null end))
  end)

  it("refuses bad renew and on_lost options, naming them", function()
    local locks = h.locks()
    local _, err = locks:acquire("x", { renew = "yes" })
    assert.equal('dlock: renew must be a boolean, got "yes"', err)
    _, err = locks:acquire("x", { on_lost = function() end })
    assert.equal("dlock: on_lost needs renew = true", err)
    _, err = locks:acquire("x", { renew = true, on_lost = 5 })
    assert.equal("dlock: on_lost must be a function, got 5", err)
  end)
end)

--- Is `lease` still valid and still its key's holder in the Redis on `port` (nil: the runner's)?
local function still_held(locks, lease, port)
  return lease:valid() and h.cmd(port, "get", locks.prefix .. lease.key) == lease.token
end

--- Watch `lease` for `seconds`: the first moment (s from now) it was not held, or nil.
local function first_gap(locks, lease, seconds, port)
  local t0 = h.now()
  while h.now() - t0 < seconds do
    if not still_held(locks, lease, port) then return h.now() - t0 end
    ngx.sleep(0.05)
  end
  return nil
end

describe("the watchdog beside a lease that is in trouble", function()
  it("keeps renewing other leases while one lease's on_lost waits (on_lost runs apart from the sweep)", function()
    local locks = h.locks()
    local called, done
    -- A lease whose holder, told it lost the key, tries to take it back (cosockets are allowed in on_lost).
    local a = assert(locks:acquire("a", { ttl = 600, renew = true, on_lost = function(l)
      called = true
      locks:acquire(l.key, { wait = 1500 })
      done = true
    end }))
    local b = assert(locks:acquire("b", { ttl = 600, renew = true }))
    -- Someone else's lock takes a's key (as an evicted or expired key would let them): a is lost.
    h.cmd(nil, "set", locks.prefix .. "a", "intruder", "px", 5000)
    assert.is_true(h.eventually(1, function() return called end), "a's on_lost never ran")
    -- While a's on_lost waits, b (ttl 600 ms) must go on being renewed.
    local gap = first_gap(locks, b, 1.2)
    assert.is_nil(gap, "b, a healthy renewed lease, was lost " .. tostring(gap) .. " s after a's on_lost began waiting")
    assert.is_true(h.eventually(2, function() return done end))
    assert.is_true(b:release())
    assert.is_false(a:valid())
  end)

  it("keeps renewing the leases of a healthy Redis while another Redis of the worker is paused", function()
    local r = h.start_redis()
    finally(function() r.signal("CONT"); r.stop() end)
    local slow = assert(dlock.new({ dict = "dlock", prefix = h.unique("paused"), redis = { port = r.port, read_timeout = 1000 } }))
    local fine = h.locks()
    local a = assert(slow:acquire("a", { ttl = 900, renew = true }))
    local b = assert(fine:acquire("b", { ttl = 900, renew = true }))
    r.signal("STOP")
    -- a cannot be renewed (its Redis is paused); b's Redis answers at once.
    local gap = first_gap(fine, b, 2.5)
    r.signal("CONT")
    assert.is_nil(gap, "b, on the healthy Redis, was lost " .. tostring(gap) .. " s after the other Redis paused")
    assert.is_true(b:release())
    assert.is_false(a:valid())
  end)
end)


describe("renew = true and short leases", function()
  it("refuses a renewed lease shorter than 100 ms, which two sweeps 10 ms apart would lose", function()
    local locks = h.locks()
    local l, err = locks:acquire("tiny", { ttl = 5, renew = true })
    assert.is_nil(l)
    assert.equal("dlock: renew = true needs a ttl of at least 100 ms (the watchdog renews a third of the way through it), got 5", err)
    l, err = locks:acquire_all({ "tiny1", "tiny2" }, { ttl = 99, renew = true })
    assert.is_nil(l)
    assert.matches("renew = true needs a ttl of at least 100 ms", err, 1, true)
    local short = h.locks({ ttl = 50 })
    l, err = short:acquire("tiny", { renew = true })
    assert.is_nil(l)
    assert.matches("got 50$", err)
    l = assert(locks:acquire("tiny", { ttl = 100, renew = true }))
    local gap = first_gap(locks, l, 0.5)
    assert.is_nil(gap, "the renewed 100 ms lease was lost after " .. tostring(gap) .. " s")
    assert.is_true(l:release())
  end)
end)

h.check_error_logs({
  -- Leases lost on purpose: their key deleted, their Redis paused past their ttl.
  "dlock: lease on %w+ lost: ",
  { "lua tcp socket read timed out", max = 4 },
})
