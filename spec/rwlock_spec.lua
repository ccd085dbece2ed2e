-- Shared and exclusive locks: acquire(key, { shared = true }) takes a key as
-- one of its readers. Readers share; a writer (a plain acquire) excludes
-- everyone; a waiting writer holds back readers that come after it; each
-- reader's lease is owner-checked, renewed, fenced and recovered like a lock.
-- The same on a Redis Cluster; readers and writers in several nginx at once,
-- through a reload and a SIGKILL, are in rwlock_fleet_spec.lua.
local h = require "helpers"
local dlock = require "resty.dlock"
local semaphore = require "resty.dlock.semaphore"

local now = h.now
local MARK = "dlock!shared"

--- The tests of behaviour, against a factory made by make(opts) (standalone or Cluster).
local function behaves(make, cmd, readers_key)
  it("lets two readers hold a key at once, each with a lease of its own that says shared", function()
    local locks = make()
    local a = assert(locks:acquire("doc", { shared = true, wait = 0 }))
    local b = assert(locks:acquire("doc", { shared = true, wait = 0 }))
    assert.is_true(a.shared)
    assert.is_true(b.shared)
    assert.is_true(a:valid() and b:valid())
    assert.are_not.equal(a.token, b.token)
    -- The key says readers hold it; the readers are listed beside it.
    assert.equal(MARK, cmd("get", locks.prefix .. "doc"))
    local r = cmd("zrange", readers_key(a._rkey), 0, -1)
    table.sort(r)
    local want = { a.token, b.token }
    table.sort(want)
    assert.same(want, r)
    assert.is_true(a:release())
    -- One reader left: still held.
    assert.equal(MARK, cmd("get", locks.prefix .. "doc"))
    assert.is_true(b:release())
    assert.equal(ngx.null, cmd("get", locks.prefix .. "doc"))
    assert.equal(0, cmd("exists", readers_key(a._rkey)))
  end)

  it("keeps readers and other writers out while a writer holds the key", function()
    local locks = make()
    local w = assert(locks:acquire("doc", { ttl = 3000, wait = 0 }))
    assert.is_false(w.shared)
    local r, err, retry = locks:acquire("doc", { shared = true, wait = 0 })
    assert.is_nil(r)
    assert.equal("busy", err)
    assert.is_true(retry > 2000 and retry <= 3000, tostring(retry))
    local w2, err2 = locks:acquire("doc", { wait = 0 })
    assert.is_nil(w2)
    assert.equal("busy", err2)
    assert.is_true(w:release())
    assert(assert(locks:acquire("doc", { shared = true, wait = 0 })):release())
  end)

  it("keeps a writer out while readers hold the key, and lets it in when the last reader leaves", function()
    local locks = make()
    local a = assert(locks:acquire("doc", { shared = true, ttl = 5000 }))
    local b = assert(locks:acquire("doc", { shared = true, ttl = 5000 }))
    local w, err, retry = locks:acquire("doc", { wait = 0 })
    assert.is_nil(w)
    assert.equal("busy", err)
    assert.is_true(retry > 4000, tostring(retry))
    local writer = h.spawn(function()
      local l, e = locks:acquire("doc", { wait = 3000 })
      return l, e, now()
    end)
    ngx.sleep(0.1)
    assert(a:release())
    ngx.sleep(0.1)
    local released = now()
    assert(b:release())
    local l, e, at = writer()
    assert.is_truthy(l, e)
    assert.is_true(at >= released, "the writer got in while a reader held the key")
    assert.is_true(at - released < 0.2, "the writer came " .. (at - released) .. " s after the last reader left")
    assert.equal(l.token, cmd("get", locks.prefix .. "doc"))
    assert(l:release())
  end)

  it("holds back a reader that comes while a writer waits, and lets it in after that writer", function()
    local locks = make()
    local first = assert(locks:acquire("doc", { shared = true, ttl = 5000 }))
    local order = {}
    local writer = h.spawn(function()
      local l = assert(locks:acquire("doc", { wait = 3000 }))
      order[#order + 1] = "writer"
      ngx.sleep(0.05)
      order[#order + 1] = "writer done"
      assert(l:release())
    end)
    ngx.sleep(0.05)
    -- A writer waits: a new reader does not overtake it, though only readers hold the key.
    local r, err = locks:acquire("doc", { shared = true, wait = 0 })
    assert.is_nil(r)
    assert.equal("busy", err)
    local reader = h.spawn(function()
      local l = assert(locks:acquire("doc", { shared = true, wait = 3000 }))
      order[#order + 1] = "reader"
      assert(l:release())
    end)
    ngx.sleep(0.1)
    assert.same({}, order)
    assert(first:release())
    writer()
    reader()
    assert.same({ "writer", "writer done", "reader" }, order)
  end)

  it("lets every reader waiting behind a writer in together when it releases", function()
    local locks = make()
    local w = assert(locks:acquire("doc", { ttl = 5000 }))
    local inside, most = 0, 0
    local waiting = {}
    for i = 1, 4 do
      waiting[i] = h.spawn(function()
        local l, e = locks:acquire("doc", { shared = true, wait = 3000 })
        assert(l, e)
        inside = inside + 1
        most = math.max(most, inside)
        ngx.sleep(0.1)
        inside = inside - 1
        return l:release()
      end)
    end
    ngx.sleep(0.1)
    local t0 = now()
    assert(w:release())
    for i = 1, 4 do assert.is_true(waiting[i]()) end
    assert.equal(4, most)
    assert.is_true(now() - t0 < 0.4, "the readers took " .. (now() - t0) .. " s to pass")
  end)

  it("lets a writer in within a bound while readers keep coming (no writer starvation)", function()
    local locks = make()
    local stop = false
    local readers_done = 0
    local function reader_stream()
      -- A reader every 20 ms, each holding 50 ms: readers always overlap.
      local mine = {}
      while not stop do
        mine[#mine + 1] = h.spawn(function()
          local l = locks:acquire("doc", { shared = true, ttl = 5000, wait = 5000 })
          if l then
            ngx.sleep(0.05)
            l:release()
            readers_done = readers_done + 1
          end
        end)
        ngx.sleep(0.02)
      end
      for _, wait in ipairs(mine) do wait() end
    end
    local stream = h.spawn(reader_stream)
    ngx.sleep(0.2)
    local t0 = now()
    local w, err = locks:acquire("doc", { ttl = 5000, wait = 3000 })
    local waited = now() - t0
    assert.is_truthy(w, err)
    -- It waited for the readers inside when it came (50 ms) and a few round trips, not for the stream to end
    -- (which only ends once it got in: a writer that starved would wait its full 3 s).
    assert.is_true(waited < 0.5, "the writer waited " .. waited .. " s")
    io.stdout:write(string.format("rwlock: a writer among readers every 20 ms waited %.3f s\n", waited))
    assert(w:release())
    ngx.sleep(0.1)
    stop = true
    stream()
    assert.is_true(readers_done > 10, tostring(readers_done))
  end)

  it("frees a writer when a reader's lease runs out unreleased", function()
    local locks = make()
    local r = assert(locks:acquire("doc", { shared = true, ttl = 300 }))
    local t0 = now()
    local w, err = locks:acquire("doc", { wait = 2000 })
    assert.is_truthy(w, err)
    local waited = now() - t0
    assert.is_true(waited >= 0.25 and waited < 0.8, "the writer waited " .. waited .. " s")
    assert.is_false(r:valid())
    assert.same({ nil, "not_owner" }, { r:release() })
    assert(w:release())
  end)

  it("frees the key at once when a reader whose lease runs out as it goes releases it (ttl = 1, 1000 times)", function()
    -- A reader's lease of 1 ms ends within the ms Redis's clock crosses while
    -- the acquire sets the expiries: the key must never outlive its readers.
    local locks = make()
    local held = {}
    for i = 1, 1000 do
      local key = "brief" .. i
      local r = locks:acquire(key, { shared = true, ttl = 1 })
      if r then r:release() end
      local w, err = locks:acquire(key, { wait = 0 })
      if w then w:release() elseif #held < 3 then
        local rkey = locks.prefix .. key
        held[#held + 1] = key .. ": " .. tostring(err) .. ", the key holds " .. tostring(cmd("get", rkey)) ..
          " for " .. tostring(cmd("pttl", rkey)) .. " ms, readers " .. tostring(cmd("zcard", readers_key(rkey)))
      end
    end
    assert.same({}, held)
  end)

  it("frees a key left shared with no reader (its readers' set evicted) at the next reader's release", function()
    local locks = make()
    local r = assert(locks:acquire("doc", { shared = true, ttl = 5000 }))
    local key = locks.prefix .. "doc"
    cmd("del", readers_key(r._rkey))
    assert.equal(MARK, cmd("get", key))
    assert.same({ nil, "not_owner" }, { r:release() })
    assert.equal(ngx.null, cmd("get", key))
    local w = assert(locks:acquire("doc", { wait = 0 }))
    assert(w:release())
  end)

  it("refuses a plain SET NX of another client (node-redlock) while readers hold, and readers while it holds", function()
    local locks = make()
    local r = assert(locks:acquire("doc", { shared = true, ttl = 5000 }))
    local key = locks.prefix .. "doc"
    assert.equal(ngx.null, cmd("set", key, "foreign", "nx", "px", 5000))
    assert(r:release())
    assert.equal("OK", cmd("set", key, "foreign", "nx", "px", 2000))
    local r2, err = locks:acquire("doc", { shared = true, wait = 0 })
    assert.is_nil(r2)
    assert.equal("busy", err)
    cmd("del", key)
  end)

  it("owner-checks a reader's release and extend, and moves the key's expiry with its latest reader", function()
    local locks = make()
    local a = assert(locks:acquire("doc", { shared = true, ttl = 1000 }))
    local b = assert(locks:acquire("doc", { shared = true, ttl = 2000 }))
    local key = locks.prefix .. "doc"
    assert.is_true(cmd("pttl", key) > 1500)
    assert.is_true(a:extend(5000))
    assert.is_true(cmd("pttl", key) > 4500)
    assert.is_true(b:release())
    assert.same({ nil, "not_owner" }, { b:release() })
    assert.same({ nil, "not_owner" }, { b:extend() })
    -- A reader whose place is gone cannot extend its way back in.
    cmd("zrem", readers_key(a._rkey), a.token)
    assert.same({ nil, "not_owner" }, { a:extend() })
    cmd("del", key)
  end)

  it("renews a reader's lease with the watchdog (renew = true)", function()
    local locks = make()
    local r = assert(locks:acquire("doc", { shared = true, ttl = 300, renew = true }))
    ngx.sleep(0.8)
    assert.is_true(r:valid())
    local w, err = locks:acquire("doc", { wait = 0 })
    assert.is_nil(w)
    assert.equal("busy", err)
    assert.is_true(r:release())
    assert(assert(locks:acquire("doc", { wait = 0 })):release())
  end)

  it("gives readers and writers of a fenced factory fences that only grow", function()
    local locks = make({ fencing = true })
    local last = 0
    for _ = 1, 3 do
      local a = assert(locks:acquire("doc", { shared = true }))
      local b = assert(locks:acquire("doc", { shared = true }))
      assert.is_true(a.fence > last and b.fence > a.fence)
      assert(a:release())
      assert(b:release())
      local w = assert(locks:acquire("doc"))
      assert.is_true(w.fence > b.fence)
      last = w.fence
      assert(w:release())
    end
  end)
end

describe("shared locks", function()
  behaves(function(opts) return h.locks(opts) end, function(...) return h.cmd(nil, ...) end,
    function(rkey) return rkey .. ":readers" end)

  it("refuses shared for semaphores and reentrant factories, and a shared that is not a boolean", function()
    local sem = assert(semaphore.new({ dict = "dlock", permits = 2, redis = h.redis_opts(), prefix = h.unique("sem") }))
    local p, err = sem:acquire("k", { shared = true })
    assert.is_nil(p)
    assert.equal("dlock: shared is an option of locks (resty.dlock), not of semaphores, whose permits are all alike, got true", err)
    local re = h.locks({ reentrant = true })
    local l, rerr = re:acquire("k", { shared = true })
    assert.is_nil(l)
    assert.matches("shared = true is refused by reentrant factories", rerr, 1, true)
    -- shared = false is a plain lock, reentrant or not.
    assert(assert(re:acquire("k", { shared = false })):release())
    local _, berr = h.locks():acquire("k", { shared = "yes" })
    assert.matches("^dlock: shared must be a boolean", berr)
  end)

  it("refuses shared under redis.redlock, saying why", function()
    local locks = assert(dlock.new({ dict = "dlock", prefix = h.unique("rl"),
      redis = { redlock = { "127.0.0.1:" .. h.redis_port, "127.0.0.1:1", "127.0.0.1:2" } } }))
    local l, err = locks:acquire("k", { shared = true })
    assert.is_nil(l)
    assert.equal("dlock: shared = true is refused with redis.redlock: holding back readers while a writer waits takes " ..
      "one line of waiters, which independent masters do not have (writers would starve)", err)
  end)

  it("gives back what a reader whose wait ended left in line", function()
    local locks = h.locks()
    local w = assert(locks:acquire("doc", { ttl = 5000 }))
    local r, err = locks:acquire("doc", { shared = true, wait = 200 })
    assert.is_nil(r)
    assert.equal("timeout", err)
    assert(w:release())
    -- The key is free: the reader's ticket, past its deadline, is skipped.
    assert(assert(locks:acquire("doc", { wait = 0 })):release())
  end)
end)

describe("shared locks on redis.cluster", function()
  local c
  setup(function() c = h.start_cluster() end)
  teardown(function() if c then c.stop() end end)

  local function make(opts) return c.locks("rwc", opts) end

  behaves(make, function(name, key, ...) return h.cmd(c.slot_owner(key), name, key, ...) end,
    function(rkey) return "{" .. rkey .. "}:readers" end)

  it("keeps a key, its readers and its queue in one slot", function()
    local locks = make()
    local w = assert(locks:acquire("doc", { ttl = 5000 }))
    local r = h.spawn(function() return locks:acquire("doc", { shared = true, wait = 3000 }) end)
    ngx.sleep(0.05)
    local rkey = locks.prefix .. "doc"
    local slot = c.keyslot(rkey)
    assert.equal(slot, c.keyslot("{" .. rkey .. "}:readers"))
    assert.equal(slot, c.keyslot("{" .. rkey .. "}:queue"))
    assert.equal(1, h.cmd(c.slot_owner(rkey), "zcard", "{" .. rkey .. "}:queue"))
    assert(w:release())
    local l = assert(r())
    assert.same({ l.token }, h.cmd(c.slot_owner(rkey), "zrange", "{" .. rkey .. "}:readers", 0, -1))
    assert(l:release())
  end)
end)

h.check_error_logs()
