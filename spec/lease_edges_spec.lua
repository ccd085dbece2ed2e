-- Lock kinds and options where they meet on the Lua API: with() of a reentrant
-- factory whose release Redis did not confirm, extend() of a renewed set, and
-- an extend() beside the watchdog's renewal of the same lease. Real Redis.
local h = require "helpers"
local dlock = require "resty.dlock"

-- A Lua script that keeps Redis busy for `ms` (other clients' commands queue
-- behind it, in the order they were sent).
local BUSY = "local t = redis.call('TIME') local s = t[1] * 1000000 + t[2] " ..
  "while true do local n = redis.call('TIME') if n[1] * 1000000 + n[2] - s > tonumber(ARGV[1]) * 1000 then break end end return 1"

describe("reentrant locks and with()", function()
  it("with() of a reentrant factory whose release Redis did not confirm returns nil, err, and raises nothing", function()
    local r = h.start_redis()
    finally(function() r.signal("CONT"); r.stop() end)
    local locks = assert(dlock.new({ dict = "dlock", prefix = h.unique("kre"), reentrant = true,
      redis = { host = "127.0.0.1", port = r.port, connect_timeout = 200, read_timeout = 200 } }))
    -- fn returns; the release then meets a Redis that does not answer (stopped).
    local ok, a, b = pcall(locks.with, locks, "k", { ttl = 1500 }, function()
      r.signal("STOP")
      return "done"
    end)
    r.signal("CONT")
    -- (It raised: "attempt to index field '_store' (a nil value)", settle.orphan given the reentrant handle.)
    assert.is_true(ok, "with() raised: " .. tostring(a))
    assert.is_nil(a)
    assert.matches("^dlock: could not release k after the callback", b)
  end)
end)

describe("renewed leases and extend()", function()
  it("refuses an extend of a renewed set (acquire_all) below 100 ms, as it refuses a renewed single lease's", function()
    local locks = h.locks()
    local one = assert(locks:acquire("one", { ttl = 1000, renew = true }))
    local ok1, err1 = one:extend(50)
    assert.is_nil(ok1)
    assert.equal("dlock: renew = true needs a ttl of at least 100 ms (the watchdog renews a third of the way through it), got 50", err1)
    local set = assert(locks:acquire_all({ "s1", "s2" }, { ttl = 1000, renew = true }))
    local ok2, err2 = set:extend(50)
    local pttl = h.cmd(nil, "pttl", locks.prefix .. "s1")
    assert.is_true(one:release())
    set:release()
    -- (The set took it: true, its keys' PTTL 50, and the watchdog went on renewing 50 ms leases.)
    assert.is_nil(ok2, "extend(50) of a renewed set answered " .. tostring(ok2) .. ", PTTL " .. tostring(pttl))
    assert.equal(err1, err2)
  end)

  it("keeps the ttl extend() set when a watchdog renewal sent after it reaches Redis after it (no second holder)", function()
    local locks = h.locks()
    local lease = assert(locks:acquire("race", { ttl = 600, renew = true }))
    -- Redis busy for 350 ms: the extend, then the watchdog's renewal (due 180 ms after the acquire, at
    -- the old ttl 600) queue behind it, in the order they were sent.
    local busy = ngx.thread.spawn(h.cmd, nil, "eval", BUSY, 0, 350)
    ngx.sleep(0.01)
    local ok, err = lease:extend(10000)
    assert.is_true(ok, err)
    assert.equal(10000, lease.ttl)
    ngx.thread.wait(busy)
    ngx.sleep(0.9)
    -- extend: "Resets the lease to ttl ms from now"; valid(): true only while the key cannot have expired.
    local pttl = h.cmd(nil, "pttl", locks.prefix .. "race")
    local other, oerr = h.locks({ prefix = locks.prefix }):acquire("race", { ttl = 5000 })
    local still = lease:valid()
    if other then other:release() end
    lease:release()
    -- (Redis kept the renewal's 600 ms: the key was gone 0.9 s later (PTTL -2), another caller took it,
    -- and the first lease still said valid() = true, for 10 s: two holders.)
    assert.is_nil(other, "a second holder got the key (PTTL " .. tostring(pttl) .. ") while the first lease said valid() = " ..
      tostring(still))
    assert.equal("busy", oerr)
    assert.is_true(pttl > 5000, "PTTL " .. tostring(pttl) .. " after extend(10000)")
  end)
end)

h.check_error_logs({
  -- The release that met the stopped Redis, on purpose.
  { "lua tcp socket read timed out", max = 2 },
})
