-- The core lock against the real test Redis: acquire, release, extend, waiting,
-- ownership, fencing. Cross-process exclusion is in exclusion_spec.lua; what
-- this nginx keeps of its leases (held(), a full shared dict) in ledger_spec.lua.
local h = require "helpers"
local dlock = require "resty.dlock"

--- Elapsed seconds since t0 (ngx.now() scale), with a fresh clock.
local function since(t0)
  ngx.update_time()
  return ngx.now() - t0
end

--- A waiter that began at t0 got the key (got, err: its acquire's answer) once
--- the holder's 150 ms ran out, and within 200 ms of it: it did not sleep past it.
local function took_over(t0, got, err)
  local took = since(t0)
  assert.is_nil(err)
  assert.is_table(got)
  assert.is_true(took >= 0.145, "taken over after " .. took .. " s, before the holder's 150 ms ran out")
  assert.is_true(took < 0.35, "taken over after " .. took .. " s, more than 200 ms after the holder's 150 ms")
  got:release()
end

describe("resty.dlock", function()
  it("is a plain Lua module with a version", function()
    assert.is_string(dlock._VERSION)
    assert.is_function(dlock.new)
  end)

  describe("acquire", function()
    it("returns a lease holding the key in Redis under the prefix, with the token as value", function()
      local locks = h.locks()
      local lease, err = locks:acquire("a", { ttl = 5000 })
      assert.is_nil(err)
      assert.equal("a", lease.key)
      assert.equal(5000, lease.ttl)
      assert.equal(lease.token, h.cmd(nil, "get", locks.prefix .. "a"))
      local pttl = h.cmd(nil, "pttl", locks.prefix .. "a")
      assert.is_true(pttl > 4000 and pttl <= 5000)
      assert.is_true(lease:release())
    end)

    it("takes the key under its own name with prefix = \"\" (shared with other clients' locks)", function()
      local locks = h.locks({ prefix = "" })
      local key = h.unique("bare")
      local lease = assert(locks:acquire(key, { ttl = 5000 }))
      assert.equal(lease.token, h.cmd(nil, "get", key))
      -- Another client's lock on that name (SET NX PX by hand, as node-redlock does) keeps it busy.
      assert.is_true(lease:release())
      assert.equal("OK", h.cmd(nil, "set", key, "theirs", "NX", "PX", 5000))
      local _, err = locks:acquire(key, { ttl = 5000 })
      assert.equal("busy", err)
      h.cmd(nil, "del", key)
    end)

    it("makes random tokens of 32 hex characters, different for every lease", function()
      local locks = h.locks()
      local seen = {}
      -- More than two pools of the kernel's random bytes (256 tokens each).
      for i = 1, 600 do
        local lease = assert(locks:acquire("k" .. i))
        assert.matches("^[0-9a-f]+$", lease.token)
        assert.equal(32, #lease.token)
        assert.is_nil(seen[lease.token])
        seen[lease.token] = true
        lease:release()
      end
    end)

    it("makes worker tokens (host:pid:random:n) that name the worker and differ for every lease", function()
      local locks = h.locks({ owner = "worker" })
      local a = assert(locks:acquire("a"))
      local b = assert(locks:acquire("b"))
      local shape = "^[%w%.%-_]+:" .. ngx.worker.pid() .. ":%x+:%d+$"
      assert.matches(shape, a.token)
      assert.matches(shape, b.token)
      assert.are_not.equal(a.token, b.token)
      -- One worker identity, a lease counter after it.
      assert.equal(a.token:match("^(.*:)%d+$"), b.token:match("^(.*:)%d+$"))
      assert.equal(a.token, h.cmd(nil, "get", locks.prefix .. "a"))
      assert.is_true(a:release())
      assert.is_true(b:release())
    end)

    it("gives a second acquirer exactly \"busy\" with the holder's remaining ttl", function()
      local locks = h.locks()
      local lease = assert(locks:acquire("a", { ttl = 3000 }))
      local none, err, retry_after = locks:acquire("a", { wait = 0 })
      assert.is_nil(none)
      assert.equal("busy", err)
      assert.is_true(retry_after > 2000 and retry_after <= 3000)
      lease:release()
    end)

    it("keeps worker-token leases exclusive inside one worker", function()
      local locks = h.locks({ owner = "worker" })
      local lease = assert(locks:acquire("a"))
      local none, err = locks:acquire("a")
      assert.is_nil(none)
      assert.equal("busy", err)
      lease:release()
    end)

    it("lets a waiting acquirer in right after the release", function()
      local locks = h.locks()
      local lease = assert(locks:acquire("a", { ttl = 10000 }))
      local releaser = ngx.thread.spawn(function()
        ngx.sleep(0.2)
        ngx.update_time()
        local t = ngx.now()
        lease:release()
        return t
      end)
      local got, err = locks:acquire("a", { wait = 3000 })
      ngx.update_time()
      local acquired_at = ngx.now()
      local _, released_at = ngx.thread.wait(releaser)
      assert.is_nil(err)
      assert.is_table(got)
      -- Same worker: the release wakes the waiter, no backoff nap in between.
      assert.is_true(acquired_at - released_at < 0.05, "hand-off took " .. (acquired_at - released_at))
      got:release()
    end)

    it("serves waiters of one worker first come, first served", function()
      local locks = h.locks()
      local lease = assert(locks:acquire("q", { ttl = 10000 }))
      local order = {}
      local threads = {}
      for i = 1, 5 do
        threads[i] = ngx.thread.spawn(function()
          local l = assert(locks:acquire("q", { wait = 5000 }))
          order[#order + 1] = i
          ngx.sleep(0.01)
          l:release()
        end)
        ngx.sleep(0.005)
      end
      lease:release()
      for i = 1, 5 do assert(ngx.thread.wait(threads[i])) end
      assert.same({ 1, 2, 3, 4, 5 }, order)
    end)

    it("waits without polling Redis: it takes a ticket, and looks once more when its wake-up subscription is live", function()
      local locks = h.locks()
      local lease = assert(locks:acquire("quiet", { ttl = 10000 }))
      local function evalshas()
        return tonumber(h.cmd(nil, "info", "commandstats"):match("cmdstat_evalsha:calls=(%d+)"))
      end
      local before = evalshas()
      local _, err = locks:acquire("quiet", { wait = 500 })
      assert.equal("timeout", err)
      -- A Redis poller on a 2..64 ms backoff would have asked about 10 times.
      assert.is_true(evalshas() - before <= 2, (evalshas() - before) .. " EVALSHA while waiting")
      lease:release()
    end)

    it("returns \"timeout\" at the deadline when the holder keeps the lock", function()
      local locks = h.locks()
      local lease = assert(locks:acquire("a", { ttl = 10000 }))
      ngx.update_time()
      local t0 = ngx.now()
      local none, err, retry_after = locks:acquire("a", { wait = 300 })
      local waited = since(t0)
      assert.is_nil(none)
      assert.equal("timeout", err)
      assert.is_true(retry_after > 9000)
      assert.is_true(waited >= 0.29 and waited < 1, "waited " .. waited)
      lease:release()
    end)

    it("takes over as soon as the holder's lease expires, without sleeping past it", function()
      local locks = h.locks()
      ngx.update_time()
      local t0 = ngx.now()
      assert(locks:acquire("a", { ttl = 150 }))
      local got, err = locks:acquire("a", { wait = 2000 })
      took_over(t0, got, err)
    end)

    it("takes over as soon as the lease of a holder elsewhere expires, without sleeping past it", function()
      local locks = h.locks()
      ngx.update_time()
      local t0 = ngx.now()
      -- Another nginx holds it: nothing in this dict, only Redis knows.
      assert.equal("OK", h.cmd(nil, "set", locks.prefix .. "a", "elsewhere", "px", 150))
      local got, err = locks:acquire("a", { wait = 2000 })
      took_over(t0, got, err)
    end)

    it("uses the defaults given to new()", function()
      local locks = h.locks({ ttl = 2500, wait = 200 })
      local lease = assert(locks:acquire("a"))
      assert.equal(2500, lease.ttl)
      local _, err = locks:acquire("a")
      assert.equal("timeout", err)
      lease:release()
    end)
  end)

  describe("release", function()
    it("deletes the key and lets the next acquirer in", function()
      local locks = h.locks()
      local lease = assert(locks:acquire("a"))
      assert.same({ true, nil }, { lease:release() })
      assert.equal(ngx.null, h.cmd(nil, "get", locks.prefix .. "a"))
      local again = assert(locks:acquire("a"))
      again:release()
    end)

    it("says not_owner when released twice", function()
      local locks = h.locks()
      local lease = assert(locks:acquire("a"))
      assert.is_true(lease:release())
      local ok, err = lease:release()
      assert.is_nil(ok)
      assert.equal("not_owner", err)
    end)

    it("of an expired lease cannot release the next holder's lock", function()
      local locks = h.locks()
      local old = assert(locks:acquire("a", { ttl = 100 }))
      ngx.sleep(0.15)
      local new = assert(locks:acquire("a", { ttl = 5000 }))
      local ok, err = old:release()
      assert.is_nil(ok)
      assert.equal("not_owner", err)
      assert.equal(new.token, h.cmd(nil, "get", locks.prefix .. "a"))
      assert.is_true(new:release())
    end)

    it("of an expired worker-token lease cannot release its successor in the same worker", function()
      local locks = h.locks({ owner = "worker" })
      local old = assert(locks:acquire("a", { ttl = 100 }))
      ngx.sleep(0.15)
      local new = assert(locks:acquire("a", { ttl = 5000 }))
      local ok, err = old:release()
      assert.is_nil(ok)
      assert.equal("not_owner", err)
      ok, err = old:extend(1000)
      assert.is_nil(ok)
      assert.equal("not_owner", err)
      assert.equal(new.token, h.cmd(nil, "get", locks.prefix .. "a"))
      assert.is_true(new:release())
    end)
  end)

  describe("extend", function()
    it("resets the lease's ttl in Redis", function()
      local locks = h.locks()
      local lease = assert(locks:acquire("a", { ttl = 1000 }))
      assert.is_true(lease:extend(8000))
      assert.equal(8000, lease.ttl)
      assert.is_true(h.cmd(nil, "pttl", locks.prefix .. "a") > 7000)
      assert.is_true(lease:extend())
      lease:release()
    end)

    it("of an expired lease cannot extend the next holder's lock", function()
      local locks = h.locks()
      local old = assert(locks:acquire("a", { ttl = 100 }))
      ngx.sleep(0.15)
      local new = assert(locks:acquire("a", { ttl = 1000 }))
      local ok, err = old:extend(60000)
      assert.is_nil(ok)
      assert.equal("not_owner", err)
      assert.is_true(h.cmd(nil, "pttl", locks.prefix .. "a") <= 1000)
      new:release()
    end)

    it("says not_owner when the key is gone", function()
      local locks = h.locks()
      local lease = assert(locks:acquire("a", { ttl = 100 }))
      ngx.sleep(0.15)
      local ok, err = lease:extend()
      assert.is_nil(ok)
      assert.equal("not_owner", err)
    end)
  end)

  describe("with", function()
    it("runs the function holding the lock, returns its results and releases", function()
      local locks = h.locks()
      local a, b, c = locks:with("a", { ttl = 5000 }, function(x, y)
        local _, err = locks:acquire("a")
        return x + y, err, "done"
      end, 2, 3)
      assert.equal(5, a)
      assert.equal("busy", b)
      assert.equal("done", c)
      assert.equal(ngx.null, h.cmd(nil, "get", locks.prefix .. "a"))
    end)

    it("releases when the function raises and returns nil, err", function()
      local locks = h.locks()
      local res, err = locks:with("a", nil, function() error("boom") end)
      assert.is_nil(res)
      assert.matches("dlock: callback failed while holding a: .*boom", err)
      assert.equal(ngx.null, h.cmd(nil, "get", locks.prefix .. "a"))
    end)

    it("does not run the function when the key is busy", function()
      local locks = h.locks()
      local lease = assert(locks:acquire("a"))
      local ran = false
      local res, err, retry_after = locks:with("a", { wait = 0 }, function() ran = true end)
      assert.is_nil(res)
      assert.equal("busy", err)
      assert.is_number(retry_after)
      assert.is_false(ran)
      lease:release()
    end)
  end)

  describe("fencing", function()
    it("gives every lease of a key a fence larger than all before it", function()
      local locks = h.locks({ fencing = true })
      local last = 0
      for _ = 1, 5 do
        local lease = assert(locks:acquire("f"))
        assert.is_true(lease.fence > last)
        last = lease.fence
        lease:release()
      end
      local other = assert(locks:acquire("g"))
      assert.equal(1, other.fence)   -- counted per key
      other:release()
      -- The counter outlives every lease: it has no ttl.
      assert.equal(-1, h.cmd(nil, "pttl", locks.prefix .. "f:fence"))
    end)

    it("lets a resource turn away a holder whose lease ran out", function()
      local locks = h.locks({ fencing = true })
      local resource = { max_fence = 0, writes = {} }
      local function write(lease, value)
        if lease.fence < resource.max_fence then return nil, "stale fence" end
        resource.max_fence = lease.fence
        resource.writes[#resource.writes + 1] = value
        return true
      end
      local paused = assert(locks:acquire("r", { ttl = 100 }))
      ngx.sleep(0.15)   -- the holder stalls past its ttl
      local next_holder = assert(locks:acquire("r", { ttl = 5000 }))
      assert.is_true(write(next_holder, "new"))
      local ok, err = write(paused, "old")   -- it wakes up and tries to write
      assert.is_nil(ok)
      assert.equal("stale fence", err)
      assert.same({ "new" }, resource.writes)
      next_holder:release()
    end)

    it("is off by default, and fencing must be a boolean", function()
      local lease = assert(h.locks():acquire("n"))
      assert.is_nil(lease.fence)
      lease:release()
      local _, err = dlock.new({ dict = "dlock", fencing = "yes" })
      assert.equal('dlock: fencing must be a boolean, got "yes"', err)
    end)
  end)
end)

h.check_error_logs()
