-- What the metrics say about the lock kinds beyond one key: sets (acquire_all),
-- readers and permits. A lease lost counts once, a set that was never whole
-- counts no hold and no loss, and a set's wait is its whole wait.
local h = require "helpers"
local status = require "resty.dlock.status"

local function get(k) return h.cmd(nil, "get", k) end

--- A lock factory (or a semaphore) with a metrics name of its own, on the test Redis.
local function named(kind, extra) return h.named("kinds", kind, extra) end

--- The factory's counters in status.report (its worker's counts flushed first).
local function factory(name)
  local r = assert(status.report({ limit = 0 }))
  return assert(r.factories[name], "no factory " .. name .. " in the report")
end

--- The value of the sample `family{factory="name"}` in the scrape (nil when absent).
local function sample(family, name)
  local want = family .. '{factory="' .. name .. '"} '
  for line in (assert(status.metrics_text()) .. "\n"):gmatch("([^\n]*)\n") do
    if line:sub(1, #want) == want then return tonumber(line:sub(#want + 1)) end
  end
end

describe("acquire_all's metrics", function()
  it("counts no lost lease when a set that waited took a key again after it ran out, and got the set", function()
    -- As multikey_spec's "sends a set back to waiting": the set holds a (ttl 200) while it waits for b;
    -- a runs out, someone takes it a while; then the set gets both. Nothing was lost by anyone:
    -- the caller was never given a lease that went away.
    local locks, name = named("lock")
    local p = locks.prefix
    local holder = assert(locks:acquire("b", { ttl = 5000 }))
    local t = h.spawn(function()
      ngx.sleep(0.35)
      local other = assert(locks:acquire("a", { ttl = 5000 }))
      assert(holder:release())
      ngx.sleep(0.2)
      assert(other:release())
    end)
    local set, err = locks:acquire_all({ "a", "b" }, { ttl = 200, wait = 3000 })
    assert.is_truthy(set, err)
    t()
    assert.equal(set.token, get(p .. "a"))
    assert.equal(set.token, get(p .. "b"))
    local lost = factory(name).lost
    assert(set:release())
    assert.equal(0, lost)
  end)

  it("adds no lease hold sample for a key a set that timed out held while it waited, and gave back", function()
    -- {a, b} waits 200 ms for b, holding a meanwhile, then times out and gives a back: no lease was
    -- handed out (dlock_acquires_total has no "acquired"), so lease_hold_seconds has nothing to count.
    local locks, name = named("lock")
    local holder = assert(locks:acquire("b", { ttl = 5000 }))
    local set, err = locks:acquire_all({ "a", "b" }, { wait = 200 })
    assert.is_nil(set)
    assert.equal("timeout", err)
    local holds = sample("dlock_lease_hold_seconds_count", name) or 0
    assert(holder:release())
    assert.equal(0, holds)
  end)

  it("counts the whole wait of a set that waited in the wait histogram", function()
    -- {a, b} with b held 300 ms: acquire_all returns after ~300 ms, and dlock_acquire_wait_seconds
    -- (call to lease) must say so, as it does for acquire.
    local locks, name = named("lock")
    local holder = assert(locks:acquire("b", { ttl = 5000 }))
    local t = h.spawn(function() ngx.sleep(0.3) assert(holder:release()) end)
    local t0 = h.now()
    local set, err = locks:acquire_all({ "a", "b" }, { ttl = 5000, wait = 3000 })
    local waited = h.now() - t0
    assert.is_truthy(set, err)
    t()
    local sum = sample("dlock_acquire_wait_seconds_sum", name)
    assert(set:release())
    assert.is_true(waited >= 0.29, tostring(waited))
    -- The holder's own acquire waited ~0: the sum is the set's wait, give or take a few ms.
    assert.is_true(sum >= waited - 0.02, "wait histogram sum " .. tostring(sum) .. " s for a set that waited " ..
      waited .. " s")
  end)
end)

describe("the watchdog's lost count, for permits, readers and sets", function()
  it("counts a renewed permit the watchdog found gone as one lost lease", function()
    local sem, name = named("semaphore", { permits = 2 })
    local p = assert(sem:acquire("k", { ttl = 300, renew = true }))
    h.cmd(nil, "zrem", sem.prefix .. "k", p.token)   -- taken away
    assert.is_true(h.eventually(2, function() return not p:valid() end))
    ngx.sleep(0.1)
    assert.equal(1, factory(name).lost)
  end)

  it("counts a renewed reader the watchdog found gone as one lost lease", function()
    local locks, name = named("lock")
    local r = assert(locks:acquire("doc", { shared = true, ttl = 300, renew = true }))
    h.cmd(nil, "zrem", locks.prefix .. "doc:readers", r.token)   -- taken away (another reader keeps the key shared)
    local other = assert(locks:acquire("doc", { shared = true, ttl = 5000 }))
    assert.is_true(h.eventually(2, function() return not r:valid() end))
    ngx.sleep(0.1)
    local lost = factory(name).lost
    assert(other:release())
    assert.equal(1, lost)
  end)

  it("counts a renewed set one of whose keys the watchdog found gone as one lost lease", function()
    local locks, name = named("lock")
    local set = assert(locks:acquire_all({ "a", "b" }, { ttl = 300, renew = true }))
    h.cmd(nil, "set", locks.prefix .. "b", "thief", "PX", 5000)
    assert.is_true(h.eventually(2, function() return not set:valid() end))
    ngx.sleep(0.1)
    local lost = factory(name).lost
    set:release()
    assert.equal(1, lost)
  end)
end)

h.check_error_logs({
  -- the leases taken away on purpose above
  { "dlock: lease on k lost: the key is gone from Redis, or someone else's", max = 1 },
  { "dlock: lease on doc lost: the key is gone from Redis, or someone else's", max = 1 },
  { "dlock: lease on b lost: the key is gone from Redis, or someone else's", max = 1 },
})
