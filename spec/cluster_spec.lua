-- redis.cluster: locks on a real Redis Cluster (3 masters, 1 replica each, on
-- loopback): the core behaviours of spec/topology/suite.lua, and what is the
-- Cluster's own: locks spread over the masters, fences beside their locks in the
-- same slot, MOVED and ASK followed while a slot moves, a master's death survived.
local h = require "helpers"
local suite = require "topology.suite"
local status = require "resty.dlock.status"

--- Seconds since t0 (ngx.now() scale), with a fresh clock.
local function since(t0)
  ngx.update_time()
  return ngx.now() - t0
end

describe("redis.cluster", function()
  local t = suite.topology("cluster")
  local c

  setup(function()
    t.start()
    c = t.handle
  end)

  teardown(function()
    t.stop()
  end)

  suite.run(t)

  local locks, key_on, other_master = t.locks, t.key_on, t.other_master

  --- This endpoint's topology row on the status page.
  local function topology(l)
    return assert(status.report({ limit = 0 })).topology[l._store.redis.endpoint]
  end

  --- Commands refused by the server on `port` (MOVED, ASK, ...), all commands together (INFO commandstats).
  local function rejected(port)
    local n = 0
    for calls in (h.cmd(port, "info", "commandstats") or ""):gmatch("rejected_calls=(%d+)") do
      n = n + tonumber(calls)
    end
    return n
  end

  it("starts a cluster of 3 masters with a replica each (the harness)", function()
    assert.equal(3, #c.masters())
    assert.equal(3, #c.replicas())
    assert.is_true(c.started_in < 10, "the cluster took " .. c.started_in .. " s to start")
  end)

  it("takes each lock on the master that owns its key's slot, spread over all masters", function()
    local l = locks()
    local leases, owners = {}, {}
    for i = 1, 30 do
      local lease, err = l:acquire("spread" .. i, { ttl = 5000 })
      assert.is_nil(err)
      leases[i] = lease
      local owner = c.slot_owner(l.prefix .. lease.key)
      owners[owner] = true
      assert.equal(lease.token, h.cmd(owner, "get", l.prefix .. lease.key))
      local pttl = h.cmd(owner, "pttl", l.prefix .. lease.key)
      assert.is_true(pttl > 4000 and pttl <= 5000)
    end
    local masters = {}
    for port in pairs(owners) do masters[#masters + 1] = port end
    table.sort(masters)
    assert.same(c.masters(), masters)
    for _, lease in ipairs(leases) do
      assert.is_true(lease:release())
      assert.equal(0, h.cmd(c.slot_owner(l.prefix .. lease.key), "exists", l.prefix .. lease.key))
    end
  end)

  it("takes a key with a \"}\" and no hash tag of its own as {<prefix>}<key>, in the prefix's slot with its queue and fence, " ..
     "and waits for it, reads it shared, takes it in a set", function()
    for _, key in ipairs({ "a}b", "x{}y", "}" }) do
      local l = locks({ fencing = true })
      local rkey = "{" .. l.prefix .. "}" .. key
      local lease = assert(l:acquire(key, { ttl = 5000 }))
      assert.equal(key, lease.key)
      local owner = c.slot_owner(l.prefix)
      assert.equal(c.keyslot(l.prefix), c.keyslot(rkey))
      assert.equal(lease.token, h.cmd(owner, "get", rkey))
      assert.equal(tostring(lease.fence), h.cmd(owner, "get", rkey .. ":fence"))
      -- Another waits in line for it (the queue in the same slot) and gets it at the release.
      local waiter = ngx.thread.spawn(function() return l:acquire(key, { ttl = 5000, wait = 3000 }) end)
      ngx.sleep(0.1)
      assert.is_true(lease:release())
      local _, next_lease = ngx.thread.wait(waiter)
      assert.is_truthy(next_lease, key)
      assert.is_true(next_lease:release())
      local set = assert(l:acquire_all({ key, "plain" }, { ttl = 5000 }))
      assert.equal(set.token, h.cmd(owner, "get", rkey))
      assert.is_true(set:release())
      local reader = assert(l:acquire(key, { ttl = 5000, shared = true }))
      assert.is_true(reader:release())
      assert.equal(0, h.cmd(owner, "exists", rkey))
    end
    -- With no prefix (or one with braces) there is no tag to give it: refused, naming the key.
    local bare = assert(require("resty.dlock").new({ dict = "dlock", prefix = "", redis = c.redis() }))
    local none, err = bare:acquire("a}b")
    assert.is_nil(none)
    assert.equal('dlock: key must not hold "}" outside a {hash tag} on a Redis Cluster with a prefix that is empty or ' ..
      'holds braces (its queue could not share its slot), got "a}b"', err)
  end)

  describe("fencing", function()
    -- (fences grow, and their counter outlives every lease: the suite's fencing test)
    it("keeps the fence counter {<prefix><key>}:fence in the lock key's slot, on its master", function()
      local l = locks({ fencing = true })
      local rkey = l.prefix .. "f"
      local lease = assert(l:acquire("f", { ttl = 5000 }))
      assert.is_true(lease:release())
      local fence_key = "{" .. rkey .. "}:fence"
      assert.equal(c.keyslot(rkey), c.keyslot(fence_key))
      local owner = c.slot_owner(rkey)
      assert.equal(tostring(lease.fence), h.cmd(owner, "get", fence_key))
    end)

    it("keeps <prefix><key>:fence for a key with a hash tag of its own (same slot already)", function()
      local l = locks({ fencing = true })
      local rkey = l.prefix .. "user{42}:x"
      local a = assert(l:acquire("user{42}:x", { ttl = 5000 }))
      assert.is_true(a:release())
      local b = assert(l:acquire("user{42}:x", { ttl = 5000 }))
      assert.is_true(b.fence > a.fence)
      local owner = c.slot_owner(rkey)
      assert.equal(c.keyslot("42"), c.keyslot(rkey))
      assert.equal(c.keyslot(rkey), c.keyslot(rkey .. ":fence"))
      assert.equal(tostring(b.fence), h.cmd(owner, "get", rkey .. ":fence"))
      local wrapped = "{" .. rkey .. "}:fence"   -- what wrapping the whole key would have made
      assert.equal(0, h.cmd(c.slot_owner(wrapped), "exists", wrapped))
      assert.is_true(b:release())
    end)
  end)

  it("follows MOVED to the new master of a slot that moved, once, and counts the redirect", function()
    local l = locks()
    local key, slot, from = key_on(l)
    local to = other_master(from)
    local rkey = l.prefix .. key
    assert(l:acquire(key)):release()   -- this worker's slot map now says `from`
    h.migrate_slot(c, slot, from, to, "begin")
    h.migrate_slot(c, slot, from, to, "keys")
    h.migrate_slot(c, slot, from, to, "finish")
    local _, moved = h.cmd(from, "get", rkey)
    assert.equal("MOVED " .. slot .. " 127.0.0.1:" .. to, moved)
    local before = topology(l)
    assert.equal("cluster", before.kind)
    assert.is_number(before.redirects)
    local lease, err = l:acquire(key, { ttl = 5000 })
    assert.is_nil(err)
    assert.equal(lease.token, h.cmd(to, "get", rkey))
    assert.is_true(lease:release())
    assert.equal(0, h.cmd(to, "exists", rkey))
    local after = topology(l)
    assert.is_true(after.redirects > before.redirects, "redirects " .. before.redirects .. " -> " .. after.redirects)
    -- The map learned where the slot went: the next calls go straight there.
    assert.is_true(assert(l:acquire(key)):release())
    assert.equal(after.redirects, topology(l).redirects)
  end)

  it("sends a guard's release again through the queue, to the new master, when its slot moved while the release rode a pipeline", function()
    local releases = require "resty.dlock.gateway.releases"
    local l = locks()
    local key, slot, from = key_on(l)
    local to = other_master(from)
    local rkey = l.prefix .. key
    local lease = assert(l:acquire(key, { ttl = 10000 }))   -- this worker's slot map says `from`
    h.migrate_slot(c, slot, from, to, "begin")
    h.migrate_slot(c, slot, from, to, "keys")
    h.migrate_slot(c, slot, from, to, "finish")
    assert.equal(lease.token, h.cmd(to, "get", rkey))
    local owner = { name = "cluster-spec", _dict = ngx.shared.dlock, _ttl = 10000, _renew = false, _release = true, _hold = 0 }
    local stats = require "resty.dlock.gateway.stats"
    local before = stats.count(ngx.shared.dlock, "cluster-spec", "redis_errors")
    -- The gateway's log phase: the release goes to `from`, which answers MOVED.
    releases.done({ owner = owner, lease = lease, done = false, answered = releases.answered }, 0)
    local t0 = ngx.now()
    -- Redis deletes the key before the reply is read and the lease settled.
    while (h.cmd(to, "exists", rkey) == 1 or lease:valid()) and since(t0) < 3 do ngx.sleep(0.02) end
    assert.equal(0, h.cmd(to, "exists", rkey))
    assert.is_false(lease:valid())
    -- Redirected, not failed.
    assert.equal(before, stats.count(ngx.shared.dlock, "cluster-spec", "redis_errors"))
  end)

  it("follows ASK to the importing master while a slot migrates: the new lock lives there, stays exclusive, extends and releases", function()
    local l = locks()
    local elsewhere = locks({ dict = "dlock_other", prefix = l.prefix })
    local key, slot, from = key_on(l)
    local to = other_master(from)
    local rkey = l.prefix .. key
    assert(l:acquire(key)):release()   -- this worker's slot map says `from`
    h.migrate_slot(c, slot, from, to, "begin")
    finally(function()
      h.migrate_slot(c, slot, from, to, "keys")
      h.migrate_slot(c, slot, from, to, "finish")
    end)
    -- The target has no scripts cached: EVALSHA meets NOSCRIPT there, and the EVAL after it needs ASKING too.
    assert.equal("OK", h.cmd(to, "script", "flush"))
    local lease, err = l:acquire(key, { ttl = 5000 })
    assert.is_nil(err)
    -- Not on the source (it answers ASK for keys it does not have), on the target (read with ASKING).
    local _, ask = h.cmd(from, "get", rkey)
    assert.equal("ASK " .. slot .. " 127.0.0.1:" .. to, ask)
    assert.equal(lease.token, h.cmd_asking(to, "get", rkey))
    local none, berr = elsewhere:acquire(key, { wait = 0 })
    assert.is_nil(none)
    assert.equal("busy", berr)
    assert.is_true(lease:extend(8000))
    assert.is_true(h.cmd_asking(to, "pttl", rkey) > 7000)
    assert.is_true(lease:release())
    assert.equal(0, h.cmd_asking(to, "exists", rkey))
    -- ASK is for one request only: the slot still belongs to the source.
    assert.equal(from, c.slot_owner(rkey))
  end)

  it("gives up after max_redirects redirections when two masters send a key back and forth", function()
    local l1 = locks(nil, { max_redirects = 1 })
    local l3 = locks({ prefix = l1.prefix }, { max_redirects = 3 })
    local key, slot, a = key_on(l1)
    local b = other_master(a)
    assert(l1:acquire(key)):release()   -- this worker's slot map says `a`
    -- `a` now says `b` owns the slot; `b` (like every other node) still says `a` does.
    assert.equal("OK", h.cmd(a, "cluster", "setslot", slot, "node", c.node_id(b)))
    finally(function() h.cmd(a, "cluster", "setslot", slot, "node", c.node_id(a)) end)
    local _, ma = h.cmd(a, "get", l1.prefix .. key)
    local _, mb = h.cmd(b, "get", l1.prefix .. key)
    assert.equal("MOVED " .. slot .. " 127.0.0.1:" .. b, ma)
    assert.equal("MOVED " .. slot .. " 127.0.0.1:" .. a, mb)
    for _, case in ipairs({ { l1, 1 }, { l3, 3 } }) do
      local l, max = case[1], case[2]
      local r0 = rejected(a) + rejected(b)
      ngx.update_time()
      local t0 = ngx.now()
      local lease, err = l:acquire(key, { ttl = 5000, wait = 0 })
      assert.is_nil(lease)
      assert.matches("redirect", err)
      -- The first try and `max` redirections followed, each refused with MOVED; then it stops.
      assert.equal(max + 1, rejected(a) + rejected(b) - r0)
      assert.is_true(since(t0) < 1, "gave up after " .. since(t0) .. " s")
    end
  end)

  it("finds the new master after a master dies (its replica promoted), without a new factory", function()
    -- A cluster of its own: the slot moves and the MOVED ping-pong above leave
    -- config epochs that can keep the masters from electing a replica.
    local shared = c
    c = h.start_cluster()
    t.handle = c
    finally(function() c.stop(); c = shared; t.handle = shared end)
    local l = locks()
    -- The first seed, if it is a master: the factory must then find the cluster through the other seed.
    local victim_port = tonumber(c.seeds[1]:match(":(%d+)$"))
    local masters = c.masters()
    local seed_is_master = false
    for _, m in ipairs(masters) do
      if m == victim_port then seed_is_master = true end
    end
    if not seed_is_master then victim_port = masters[1] end
    local victim
    for _, n in ipairs(c.nodes) do
      if n.port == victim_port then victim = n end
    end
    local key = key_on(l, victim.port)
    local rkey = l.prefix .. key
    local elsewhere = key_on(l, other_master(victim.port), "alive")
    assert(l:acquire(key)):release()   -- this worker's slot map says `victim`
    c.kill(victim)
    ngx.update_time()
    local t0 = ngx.now()
    assert.is_true(c.wait_failover(victim.port, 20), "no replica took over within 20 s")
    local failover = since(t0)
    local new = c.slot_owner(rkey)
    assert.are_not.equal(victim.port, new)
    ngx.update_time()
    local t1 = ngx.now()
    local lease
    for _ = 1, 60 do
      lease = l:acquire(key, { ttl = 5000, wait = 100 })
      if lease then break end
      ngx.sleep(0.05)
    end
    assert.is_truthy(lease, "no lock within 3 s of the failover (which took " .. failover .. " s)")
    assert.is_true(since(t1) < 3, "the lock came " .. since(t1) .. " s after the failover")
    assert.equal(lease.token, h.cmd(new, "get", rkey))
    assert.is_true(lease:release())
    assert.equal(0, h.cmd(new, "exists", rkey))
    -- Keys of the other masters never stopped working.
    assert.is_true(assert(l:acquire(elsewhere, { wait = 0 })):release())
  end)
end)

h.check_error_logs({
  "connect%(%) failed %(111: Connection refused%), context: ngx%.timer",  -- the nodes killed on purpose
})
