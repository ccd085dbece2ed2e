-- The core lock against the real test Redis: acquire, release, extend, waiting,
-- ownership, bookkeeping. Cross-process exclusion is in exclusion_spec.lua.
local h = require "helpers"
local dlock = require "resty.dlock"

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

    it("makes random tokens of 32 hex characters, different for every lease", function()
      local locks = h.locks()
      local seen = {}
      for i = 1, 50 do
        local lease = assert(locks:acquire("k" .. i))
        assert.matches("^%x+$", lease.token)
        assert.equal(32, #lease.token)
        assert.is_nil(seen[lease.token])
        seen[lease.token] = true
        lease:release()
      end
    end)

    it("makes one worker token (host:pid:random) shared by the worker's leases", function()
      local locks = h.locks({ owner = "worker" })
      local a = assert(locks:acquire("a"))
      local b = assert(locks:acquire("b"))
      assert.equal(a.token, b.token)
      assert.matches("^[%w%.%-_]+:" .. ngx.worker.pid() .. ":%x+$", a.token)
      a:release(); b:release()
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

    it("does not poll Redis while the holder is in this nginx", function()
      local locks = h.locks()
      local lease = assert(locks:acquire("quiet", { ttl = 10000 }))
      local function evalshas()
        return tonumber(h.cmd(nil, "info", "commandstats"):match("cmdstat_evalsha:calls=(%d+)"))
      end
      local before = evalshas()
      local _, err = locks:acquire("quiet", { wait = 500 })
      assert.equal("timeout", err)
      -- A Redis poller on a 2..64 ms backoff would have asked about 10 times.
      assert.is_true(evalshas() - before <= 1, (evalshas() - before) .. " EVALSHA while waiting")
      lease:release()
    end)

    it("returns \"timeout\" at the deadline when the holder keeps the lock", function()
      local locks = h.locks()
      local lease = assert(locks:acquire("a", { ttl = 10000 }))
      ngx.update_time()
      local t0 = ngx.now()
      local none, err, retry_after = locks:acquire("a", { wait = 300 })
      ngx.update_time()
      local waited = ngx.now() - t0
      assert.is_nil(none)
      assert.equal("timeout", err)
      assert.is_true(retry_after > 9000)
      assert.is_true(waited >= 0.29 and waited < 1, "waited " .. waited)
      lease:release()
    end)

    it("takes over as soon as the holder's lease expires, without sleeping past it", function()
      local locks = h.locks()
      assert(locks:acquire("a", { ttl = 150 }))
      local got, err = locks:acquire("a", { wait = 2000 })
      assert.is_nil(err)
      assert.is_table(got)
      got:release()
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
      assert.equal(old.token, new.token)
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

  describe("held", function()
    it("lists the leases this nginx holds and forgets released ones", function()
      local locks = h.locks()
      local a = assert(locks:acquire("a", { ttl = 5000 }))
      local b = assert(locks:acquire("b", { ttl = 7000 }))
      local mine = {}
      for _, l in ipairs(locks:held()) do mine[l.key] = l end
      assert.equal(a.token, mine.a.token)
      assert.equal(ngx.worker.pid(), mine.a.pid)
      assert.is_true(mine.b.ttl > 6000 and mine.b.ttl <= 7000)
      assert.is_true(mine.a.expires_at > ngx.now())
      a:release()
      mine = {}
      for _, l in ipairs(locks:held()) do mine[l.key] = l end
      assert.is_nil(mine.a)
      assert.is_table(mine.b)
      b:release()
    end)

    it("forgets a lease once it expires on its own", function()
      local locks = h.locks()
      assert(locks:acquire("gone", { ttl = 1000 }))
      ngx.sleep(1.1)
      for _, l in ipairs(locks:held()) do assert.are_not.equal("gone", l.key) end
    end)

    it("follows an extend", function()
      local locks = h.locks()
      local lease = assert(locks:acquire("a", { ttl = 1000 }))
      lease:extend(9000)
      local found
      for _, l in ipairs(locks:held()) do if l.key == "a" then found = l end end
      assert.is_true(found.ttl > 8000)
      lease:release()
    end)
  end)
end)
