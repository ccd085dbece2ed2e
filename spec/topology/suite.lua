-- One suite of the lock's core behaviours, run against each Redis topology
-- (spec/standalone_topology_spec.lua, spec/sentinel_topology_spec.lua,
-- spec/cluster_spec.lua, spec/redlock_spec.lua), instead of a copy per topology.
--   local suite = require "topology.suite"
--   local t = suite.topology("cluster")        -- inside a describe block:
--   setup(t.start) teardown(t.stop)            -- brought up by spec/harness/
--   suite.run(t)                               -- the shared tests
-- A topology answers:
--   t.kind            its name on the status page (standalone, unix, sentinel, cluster, redlock)
--   t.redis(extra)    dlock's `redis` option for it (extra: more fields of redis.cluster)
--   t.where(rkey)     the ports of the servers a lock key must be on
--   t.fence_key(rkey) the fence counter's key beside it
--   t.apart(l, tag)   two key names stored apart (on different Cluster masters)
--   t.fencing, t.semaphores: whether the lock offers them there (Redlock refuses both at new())
--   t.handle          what spec/harness/ started (cluster c, redlock r, sentinel: start_sentinel_set's { master, replicas, sentinels, ... })
local h = require "helpers"
local dlock = require "resty.dlock"
local semaphore = require "resty.dlock.semaphore"
local status = require "resty.dlock.status"
local leases = require "resty.dlock.core.lease"

local _M = {}

local TOPOLOGIES = {}

-- The runner's own redis-server.
function TOPOLOGIES.standalone(t)
  t.redis = function() return h.redis_opts() end
  t.where = function() return { h.redis_port } end
  t.fence_key = function(rkey) return rkey .. ":fence" end
end

-- A redis-server reached by its unix socket, as an operator runs one beside
-- nginx: a password, and an ACL user with only what the locks need (the
-- README's rule), which the locks log in as.
function TOPOLOGIES.unix(t)
  function t.start()
    local dir = h.env.prefix .. "/" .. h.unique("unix")
    os.execute("mkdir -p " .. dir)
    local args = { "--unixsocket " .. dir .. "/redis.sock --unixsocketperm 700 --requirepass spec-default",
      "--user locker on '>spec-locker' " .. h.least_privilege_rules({ "unix" }) }
    t.handle = h.start_redis(nil, unpack(args))
    t.handle.sock, t.handle.args = dir .. "/redis.sock", args
  end
  function t.stop() if t.handle then t.handle.stop() end end
  t.redis = function()
    return { path = "unix:" .. t.handle.sock, username = "locker", password = "spec-locker" }
  end
  t.where = function() return { t.handle.port } end
  t.fence_key = function(rkey) return rkey .. ":fence" end
end

-- A master, a replica and three sentinels (quorum 2) naming it "locks" (spec/harness/servers.lua start_sentinel_set).
function TOPOLOGIES.sentinel(t)
  local s
  function t.start()
    s = h.start_sentinel_set()
    t.handle = s
  end
  function t.stop()
    if s then s.stop() end
  end
  t.redis = function()
    return { sentinel = { master = "locks", nodes = s.nodes() }, connect_timeout = 300, read_timeout = 500 }
  end
  t.where = function() return { s.master_port() } end
  t.fence_key = function(rkey) return rkey .. ":fence" end
end

-- 3 masters with a replica each (spec/harness/cluster.lua start_cluster).
function TOPOLOGIES.cluster(t)
  function t.start() t.handle = h.start_cluster() end
  function t.stop() if t.handle then t.handle.stop() end end
  t.redis = function(extra) return t.handle.redis(extra) end
  t.where = function(rkey) return { t.handle.slot_owner(rkey) } end
  t.fence_key = function(rkey) return "{" .. rkey .. "}:fence" end
  --- A key name whose lock key hashes to a slot of the master on `port` (any master
  --- when port is nil); its name, its slot and that master.
  function t.key_on(l, port, tag)
    for i = 1, 1000 do
      local name = (tag or "k") .. i
      local owner = t.handle.slot_owner(l.prefix .. name)
      if port == nil or owner == port then return name, t.handle.keyslot(l.prefix .. name), owner end
    end
    error("no key name hashes to a slot of 127.0.0.1:" .. tostring(port))
  end
  --- A master other than the one on `port`.
  function t.other_master(port)
    for _, m in ipairs(t.handle.masters()) do
      if m ~= port then return m end
    end
  end
  t.apart = function(l, tag)
    local k1, _, m1 = t.key_on(l, nil, tag)
    local k2 = t.key_on(l, t.other_master(m1), tag)
    return k1, k2
  end
end

-- Three independent masters, short timeouts as Redlock wants (spec/harness/servers.lua start_redlock).
function TOPOLOGIES.redlock(t)
  function t.start() t.handle = h.start_redlock(3) end
  function t.stop() if t.handle then t.handle.stop() end end
  t.redis = function() return { redlock = t.handle.addrs, connect_timeout = 50, read_timeout = 50 } end
  t.where = function() return t.handle.ports end
  t.fence_key = function(rkey) return rkey .. ":fence" end
  t.fencing, t.semaphores = false, false
end

--- The topology `kind`, not started yet (t.start() in setup, t.stop() in teardown).
function _M.topology(kind)
  local t = { kind = kind, fencing = true, semaphores = true, start = function() end, stop = function() end }
  assert(TOPOLOGIES[kind], "no topology " .. tostring(kind))(t)
  t.apart = t.apart or function(_, tag) return tag .. "1", tag .. "2" end
  --- dlock.new on this topology with a fresh prefix; opts override, extra goes to redis.cluster.
  function t.locks(opts, extra)
    local o = { dict = "dlock", prefix = h.unique(kind), redis = t.redis(extra) }
    for k, v in pairs(opts or {}) do o[k] = v end
    return assert(dlock.new(o))
  end
  --- The value of rkey on each server it must be on.
  function t.values(rkey)
    local out = {}
    for i, port in ipairs(t.where(rkey)) do out[i] = h.cmd(port, "get", rkey) end
    return out
  end
  return t
end

local rep = h.rep

--- The shared tests, in the caller's describe block, on topology t.
function _M.run(t)
  -- Busted's describe, it and assert live in the spec file's environment, not in _G.
  local busted = getfenv(2)
  local describe, it, assert = busted.describe, busted.it, busted.assert
  describe("(core, on " .. t.kind .. ")", function()
    it("takes the lock where its key lives, with the ttl asked, deletes it there at release; a second release says not_owner", function()
      local l = t.locks()
      local rkey = l.prefix .. "a"
      local lease, err = l:acquire("a", { ttl = 5000 })
      assert.is_nil(err)
      local where = t.where(rkey)
      assert.same(rep(lease.token, #where), t.values(rkey))
      for _, port in ipairs(where) do
        local pttl = h.cmd(port, "pttl", rkey)
        assert.is_true(pttl > 4000 and pttl <= 5000, "pttl " .. pttl .. " on " .. port)
      end
      assert.same({ true, nil }, { lease:release() })
      assert.same(rep(ngx.null, #where), t.values(rkey))
      assert.same({ nil, "not_owner" }, { lease:release() })
    end)

    it("keeps a held key exclusive: another nginx gets \"busy\" with the holder's remaining ttl, the holder's key untouched, until the release", function()
      local l = t.locks()
      -- Another dict: nothing of this lease in it, only Redis knows (like another nginx).
      local elsewhere = t.locks({ dict = "dlock_other", prefix = l.prefix })
      local rkey = l.prefix .. "x"
      local lease = assert(l:acquire("x", { ttl = 3000 }))
      local none, err, retry_after = elsewhere:acquire("x", { wait = 0 })
      assert.is_nil(none)
      assert.equal("busy", err)
      assert.is_true(retry_after > 2000 and retry_after <= 3000, "retry_after " .. tostring(retry_after))
      assert.same(rep(lease.token, #t.where(rkey)), t.values(rkey))
      assert.is_true(lease:release())
      local next_holder, nerr = elsewhere:acquire("x", { wait = 0 })
      assert.is_nil(nerr)
      assert.same(rep(next_holder.token, #t.where(rkey)), t.values(rkey))
      assert.is_true(next_holder:release())
    end)

    it("does not let a lease whose key was taken over release or extend its successor (not_owner)", function()
      local l = t.locks()
      local rkey = l.prefix .. "y"
      local old = assert(l:acquire("y", { ttl = 100 }))
      ngx.sleep(0.15)
      local new = assert(l:acquire("y", { ttl = 5000 }))
      assert.same({ nil, "not_owner" }, { old:release() })
      assert.same({ nil, "not_owner" }, { old:extend(5000) })
      assert.same(rep(new.token, #t.where(rkey)), t.values(rkey))
      assert.is_true(new:release())
    end)

    it("wakes a waiter within milliseconds of a release in another nginx, long before the holder's ttl, then lets go of the key's channel", function()
      local l = t.locks()
      local elsewhere = t.locks({ dict = "dlock_other", prefix = l.prefix })
      local lease = assert(elsewhere:acquire("w", { ttl = 10000 }))
      local got, err, got_at
      local th = ngx.thread.spawn(function()
        got, err = l:acquire("w", { wait = 8000 })
        got_at = h.now()
      end)
      -- The waiter now sleeps until the holder's ttl runs out, unless woken.
      ngx.sleep(0.3)
      local released_at = h.now()
      assert.is_true(lease:release())
      ngx.thread.wait(th)
      assert.is_nil(err)
      local ms = (got_at - released_at) * 1000
      assert.is_true(ms < 100, "woken " .. ms .. " ms after the release")
      assert.same(rep(got.token, #t.where(l.prefix .. "w")), t.values(l.prefix .. "w"))
      assert.is_true(got:release())
      -- Its last waiter gone, the worker lets go of the key's channel (2 s later).
      local channel = "dlock:released:" .. l.prefix .. "w"
      assert.is_true(h.eventually(4, function()
        for _, port in ipairs(t.where(l.prefix .. "w")) do
          if h.cmd(port, "pubsub", "numsub", channel)[2] ~= 0 then return false end
        end
        return true
      end), "still subscribed to " .. channel)
    end)

    -- The gateway ends a request's lease in its log phase, which has no cosockets.
    it("sends a release without waiting into the next pipeline to where the key lives, settling the lease from the reply (Redlock: refused, for a timer to call)", function()
      local l = t.locks()
      local rkey = l.prefix .. "posted"
      local lease = assert(l:acquire("posted", { ttl = 5000 }))
      local job = leases.post(lease)
      if t.kind == "redlock" then
        assert.is_nil(job)
        assert.same(rep(lease.token, #t.where(rkey)), t.values(rkey))
        assert.is_true(lease:release())
        return
      end
      assert.is_truthy(job, "nothing posted")
      local outcome
      job.post = { answered = function(j) outcome = { leases.posted(lease, j) } end }
      local t0 = ngx.now()
      while outcome == nil and ngx.now() - t0 < 2 do
        ngx.sleep(0.01)
        ngx.update_time()
      end
      assert.same({ true }, outcome)
      assert.same(rep(ngx.null, #t.where(rkey)), t.values(rkey))
      assert.is_false(lease:valid())
      assert.same({ nil, "not_owner" }, { lease:release() })
    end)

    it("extends a held lease where its key lives", function()
      local l = t.locks()
      local rkey = l.prefix .. "e"
      local lease = assert(l:acquire("e", { ttl = 1000 }))
      assert.is_true(lease:extend(8000))
      for _, port in ipairs(t.where(rkey)) do
        local pttl = h.cmd(port, "pttl", rkey)
        assert.is_true(pttl > 7000 and pttl <= 8000, "pttl " .. pttl .. " on " .. port)
      end
      assert.is_true(lease:release())
    end)

    if t.fencing then
      it("gives growing fences from one counter per key, which outlives every lease", function()
        local l = t.locks({ fencing = true })
        local rkey = l.prefix .. "f"
        local last = 0
        for _ = 1, 5 do
          local lease, err = l:acquire("f", { ttl = 5000 })
          assert.is_nil(err)
          assert.is_true(lease.fence > last)
          last = lease.fence
          assert.is_true(lease:release())
        end
        local fence_key = t.fence_key(rkey)
        local port = t.where(fence_key)[1]
        assert.equal(tostring(last), h.cmd(port, "get", fence_key))
        assert.equal(-1, h.cmd(port, "pttl", fence_key))
      end)
    else
      it("refuses fencing at new(), naming the option (fence counters on independent masters do not grow together)", function()
        local locks_, err = dlock.new({ dict = "dlock", redis = t.redis(), fencing = true })
        assert.equal("nil", type(locks_), "new() made fenced locks over redis." .. t.kind)
        assert.matches("^dlock: fencing", err)
        assert.matches("redis." .. t.kind, err, 1, true)
      end)
    end

    if t.semaphores then
      it("counts semaphore permits per key where the key lives, for keys stored apart", function()
        local s = assert(semaphore.new({ dict = "dlock", prefix = h.unique(t.kind .. "sem"), redis = t.redis(), permits = 2 }))
        local k1, k2 = t.apart(s, "sem")
        for _, key in ipairs({ k1, k2 }) do
          local rkey = s.prefix .. key
          local owner = t.where(rkey)[1]
          local a = assert(s:acquire(key, { ttl = 5000 }))
          local b = assert(s:acquire(key, { ttl = 5000 }))
          local none, err, retry_after = s:acquire(key, { ttl = 5000, wait = 0 })
          assert.is_nil(none)
          assert.equal("busy", err)
          assert.is_true(retry_after > 4000 and retry_after <= 5000)
          assert.equal(2, h.cmd(owner, "zcard", rkey))
          assert.is_true(a:release())
          local again = assert(s:acquire(key, { ttl = 5000, wait = 0 }))
          assert.is_true(b:release())
          assert.is_true(again:release())
          assert.equal(0, h.cmd(owner, "exists", rkey))
        end
      end)
    else
      it("refuses semaphores at new() (a quorum of counting semaphores does not bound the holders)", function()
        local sem, serr = semaphore.new({ dict = "dlock", redis = t.redis(), permits = 2 })
        assert.equal("nil", type(sem), "semaphore.new() made a semaphore over redis." .. t.kind)
        assert.matches("^dlock: semaphore", serr)
        assert.matches("redis." .. t.kind, serr, 1, true)
      end)
    end

    it("shows its endpoint on the status page as " .. t.kind, function()
      local l = t.locks()
      assert(l:acquire("st")):release()
      local row = assert(status.report({ limit = 0 })).topology[l._store.redis.endpoint]
      assert.is_table(row, "no status row for " .. tostring(l._store.redis.endpoint))
      assert.equal(t.kind, row.kind)
    end)
  end)
end

return _M
