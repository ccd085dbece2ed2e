-- The core lock against the real test Redis: acquire, release, extend, waiting,
-- ownership, bookkeeping. Cross-process exclusion is in exclusion_spec.lua.
local h = require "helpers"
local dlock = require "resty.dlock"
local batch = require "resty.dlock.core.batch"
local ledger = require "resty.dlock.core.ledger"

--- held() as a table by token: leases of other specs may share a key name.
local function held_by_token(locks)
  local out = {}
  for _, l in ipairs(locks:held()) do out[l.token] = l end
  return out
end

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

  describe("held", function()
    it("lists the leases this nginx holds and forgets released ones", function()
      local locks = h.locks()
      local a = assert(locks:acquire("a", { ttl = 5000 }))
      local b = assert(locks:acquire("b", { ttl = 7000 }))
      local mine = held_by_token(locks)
      assert.is_table(mine[a.token], "a is not listed")
      assert.is_table(mine[b.token], "b is not listed")
      assert.equal("a", mine[a.token].key)
      assert.equal("b", mine[b.token].key)
      assert.equal(ngx.worker.pid(), mine[a.token].pid)
      assert.is_true(mine[b.token].ttl > 6000 and mine[b.token].ttl <= 7000)
      assert.is_true(mine[a.token].expires_at > ngx.now() and mine[a.token].expires_at <= ngx.now() + 5)
      assert.is_true(a:release())
      mine = held_by_token(locks)
      assert.is_nil(mine[a.token])
      assert.equal("b", mine[b.token].key)
      assert.is_true(b:release())
      assert.is_nil(held_by_token(locks)[b.token])
    end)

    it("forgets a lease once it expires on its own", function()
      local locks = h.locks()
      local lease = assert(locks:acquire("gone", { ttl = 1000 }))
      local listed = held_by_token(locks)[lease.token]
      assert.is_table(listed, "not listed while held")
      assert.equal("gone", listed.key)
      ngx.sleep(1.1)
      assert.is_nil(held_by_token(locks)[lease.token])
    end)

    it("follows each extend, one after another, and forgets the lease at its release", function()
      local locks = h.locks()
      local lease = assert(locks:acquire("a", { ttl = 1000 }))
      assert.is_true(lease:extend(9000))
      local found = held_by_token(locks)[lease.token]
      assert.is_table(found, "not listed")
      assert.is_true(found.ttl > 8000 and found.ttl <= 9000)
      assert.is_true(lease:extend(20000))
      found = held_by_token(locks)[lease.token]
      assert.is_table(found, "not listed")
      assert.is_true(found.ttl > 19000 and found.ttl <= 20000, tostring(found.ttl))
      assert.is_true(lease:release())
      assert.is_nil(held_by_token(locks)[lease.token])
    end)

    it("keeps the record of a key's next holder when an expired lease of it is released late", function()
      local locks = h.locks()
      local old = assert(locks:acquire("late", { ttl = 100 }))
      ngx.sleep(0.15)
      local new = assert(locks:acquire("late", { ttl = 5000 }))
      assert.same({ nil, "not_owner" }, { old:release() })
      local found = held_by_token(locks)[new.token]
      assert.is_table(found, "the next holder's record is gone")
      assert.equal("late", found.key)
      assert.is_nil(held_by_token(locks)[old.token])
      assert.is_true(new:release())
      assert.is_nil(held_by_token(locks)[new.token])
    end)
  end)

  describe("with a full shared dict", function()
    -- dlock_tiny (12k in nginx/spec.conf) filled up with other data: records
    -- cannot be stored, as in a busy nginx whose dict is shared with a cache.
    local dict = ngx.shared.dlock_tiny
    local fillers = 0

    local function fill()
      for _, size in ipairs({ 2000, 1000, 400, 150, 60, 20, 1 }) do
        local v = string.rep("x", size)
        while dict:safe_set("filler:" .. (fillers + 1), v) do fillers = fillers + 1 end
      end
      assert.is_falsy(dict:safe_set("probe", "x"))
    end

    local function empty()
      for i = 1, fillers do dict:delete("filler:" .. i) end
      fillers = 0
    end

    --- This worker's "dict full" warnings in the error log: { count, epoch seconds } each.
    local function warnings()
      local out = {}
      local log = h.read_file(h.prefix .. "/logs/error.log") or ""
      local line = "(%d+)/(%d+)/(%d+) (%d+):(%d+):(%d+) %[warn%] " .. ngx.worker.pid() ..
        "#[^\n]-dlock: shared dict full: (%d+) lease%(s%) not recorded since the last warning"
      for y, mo, d, hh, mi, ss, n in log:gmatch(line) do
        local t = os.time({ year = y, month = mo, day = d, hour = hh, min = mi, sec = ss })
        out[#out + 1] = { tonumber(n), t }
      end
      return out
    end

    it("keeps leases exclusive, counts every lease it could not record and warns once, not per acquire", function()
      local locks = h.locks({ dict = "dlock_tiny" })   -- made while there was room: the counter exists
      fill()
      finally(empty)
      local before, logged = ledger.unrecorded(dict), #warnings()
      local leases = {}
      for i = 1, 50 do
        leases[i] = assert(locks:acquire("k" .. i, { ttl = 5000 }))
        local none, err = locks:acquire("k" .. i)
        assert.is_nil(none)
        assert.equal("busy", err)
      end
      assert.equal(before + 50, ledger.unrecorded(dict))
      -- Counting took no room: nothing the dict held was evicted for it.
      for i = 1, fillers do assert.is_string(dict:get("filler:" .. i), "filler " .. i .. " evicted") end
      -- At most one line for 50 failures: one per worker and 10 s, whether that
      -- line is this spec's first failure or came from an earlier one.
      local all = warnings()
      local lines = { select(logged + 1, unpack(all)) }
      assert.is_true(#lines <= 1, #lines .. " warnings for 50 acquires")
      local last = all[#all]
      assert.is_table(last, "no warning at all")
      assert.is_true(last[2] >= ngx.time() - 11, "no warning in the last 10 s")
      if #lines == 1 then assert.equal(1, lines[1][1]) end
      local mine = held_by_token(locks)
      for i, l in ipairs(leases) do
        assert.is_nil(mine[l.token])
        assert.is_true(l:release())
        assert.equal(ngx.null, h.cmd(nil, "get", locks.prefix .. "k" .. i))
      end
    end)

    it("keeps a stale worker-token lease from releasing or extending its successor, which is not recorded", function()
      local locks = h.locks({ owner = "worker", dict = "dlock_tiny" })
      fill()
      finally(empty)
      local old = assert(locks:acquire("a", { ttl = 100 }))
      ngx.sleep(0.15)
      local new = assert(locks:acquire("a", { ttl = 5000 }))
      assert.same({}, locks:held())   -- neither lease is in the dict: only Redis can tell them apart
      assert.same({ nil, "not_owner" }, { old:release() })
      assert.same({ nil, "not_owner" }, { old:extend(60000) })
      assert.equal(new.token, h.cmd(nil, "get", locks.prefix .. "a"))
      assert.is_true(h.cmd(nil, "pttl", locks.prefix .. "a") <= 5000)
      assert.is_true(new:extend(6000))
      assert.is_true(new:release())
      assert.equal(ngx.null, h.cmd(nil, "get", locks.prefix .. "a"))
    end)
  end)

  describe("many leases at once", function()
    local r, locks, info

    setup(function()
      -- A Redis of our own: its counters see nothing but this describe.
      r = h.start_redis()
      info = h.redis:new()
      info:set_timeout(2000)
      assert(info:connect("127.0.0.1", r.port))
    end)

    teardown(function()
      info:close()
      r.stop()
    end)

    before_each(function()
      locks = assert(dlock.new({ dict = "dlock", prefix = h.unique("many"), redis = { port = r.port } }))
    end)

    --- Socket reads Redis made so far (a pipelined batch arrives in one; this
    --- INFO is one more), and EVALSHA and EVAL calls.
    local function counters()
      local text = assert(info:info("stats", "commandstats"))
      return tonumber(text:match("total_reads_processed:(%d+)")),
        tonumber(text:match("cmdstat_evalsha:calls=(%d+)") or "0"),
        tonumber(text:match("cmdstat_eval:calls=(%d+)") or "0")
    end

    local function pttl(key)
      return assert(info:pttl(locks.prefix .. key))
    end

    it("extendAll extends every lease to its ttl in one round trip and says not_owner for one whose key is gone", function()
      local list = {}
      for i = 1, 20 do list[i] = assert(locks:acquire("k" .. i, { ttl = i == 5 and 3000 or 2000 })) end
      assert.equal(1, info:del(locks.prefix .. "k7"))
      assert.is_true(list[1]:extend())   -- the script is cached in Redis from now on
      ngx.sleep(0.5)
      local reads, evalshas = counters()
      local res = batch.extendAll(list)
      local reads2, evalshas2 = counters()
      -- One read for the pipeline, one for the INFO that counts it; one by one would be 21.
      assert.is_true(reads2 - reads <= 2, (reads2 - reads) .. " reads for 20 extends")
      assert.equal(evalshas + 20, evalshas2)
      assert.equal(20, #res)
      for i = 1, 20 do
        if i == 7 then
          assert.equal("not_owner", res[i])
        else
          assert.is_true(res[i], "lease " .. i .. ": " .. tostring(res[i]))
        end
      end
      assert.is_true(pttl("k5") > 2900)   -- each to its own ttl
      for i = 1, 20 do
        if i ~= 5 and i ~= 7 then assert.is_true(pttl("k" .. i) > 1900, "k" .. i .. " not extended") end
      end
      -- The lost lease is over, as after extend(): forgotten, and not_owner from now on.
      assert.is_nil(held_by_token(locks)[list[7].token])
      assert.same({ nil, "not_owner" }, { list[7]:release() })
      assert.same({ "not_owner" }, batch.extendAll({ list[7] }))
      for i = 1, 20 do
        if i ~= 7 then assert.is_true(list[i]:release()) end
      end
    end)

    it("extendAll and releaseAll recover from SCRIPT FLUSH with EVAL for the replies that say NOSCRIPT", function()
      local list = {}
      for i = 1, 5 do list[i] = assert(locks:acquire("k" .. i, { ttl = 1000 })) end
      assert.equal("OK", info:script("flush"))
      local _, _, evals = counters()
      local res = batch.extendAll(list)
      assert.same({ true, true, true, true, true }, res)
      for i = 1, 5 do assert.is_true(pttl("k" .. i) > 900) end
      local _, _, evals2 = counters()
      assert.equal(evals + 5, evals2)
      assert.equal("OK", info:script("flush"))
      assert.same({ 0, nil }, { batch.releaseAll(list) })
      for i = 1, 5 do
        assert.equal(0, info:exists(locks.prefix .. "k" .. i))
        assert.is_true(list[i]._released)
      end
    end)

    it("releaseAll releases many leases in one round trip; one whose key is gone is over too", function()
      local list = {}
      for i = 1, 20 do list[i] = assert(locks:acquire("k" .. i, { ttl = 5000 })) end
      assert.equal(1, info:del(locks.prefix .. "k3"))
      assert.is_true(assert(locks:acquire("warm")):release())   -- the script is cached in Redis
      local reads = counters()
      assert.same({ 0, nil }, { batch.releaseAll(list) })
      local reads2 = counters()
      assert.is_true(reads2 - reads <= 2, (reads2 - reads) .. " reads for 20 releases")
      local mine = held_by_token(locks)
      for i = 1, 20 do
        assert.equal(0, info:exists(locks.prefix .. "k" .. i))
        assert.is_nil(mine[list[i].token])
        assert.same({ nil, "not_owner" }, { list[i]:release() })
      end
    end)
  end)
end)

h.check_error_logs()
