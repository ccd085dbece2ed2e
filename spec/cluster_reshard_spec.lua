-- redis.cluster while a slot migrates under held locks: the scripts that
-- declare the waiters' queue (a shared lock's readers, acquire_all's sets, a
-- guard's posted release) get TRYAGAIN while the lock key and its queue sit on
-- two nodes, and run on the lock key alone (README, Key layout under Cluster).
local h = require "helpers"
local suite = require "topology.suite"

describe("redis.cluster while a slot migrates", function()
  local t = suite.topology("cluster")
  local c

  setup(function()
    t.start()
    c = t.handle
  end)

  teardown(function()
    t.stop()
  end)

  local locks, key_on, other_master = t.locks, t.key_on, t.other_master

  --- A key of l on some master, held (hold(key), when given) before its slot starts MIGRATING to another
  --- master; the migration is finished when the test ends. Returns key, rkey, slot, from, to, what hold returned.
  local function migrating(l, tag, hold)
    local key, slot, from = key_on(l, nil, tag)
    local to = other_master(from)
    local held = hold and hold(key)
    h.migrate_slot(c, slot, from, to, "begin")
    finally(function()
      h.migrate_slot(c, slot, from, to, "keys")
      h.migrate_slot(c, slot, from, to, "finish")
    end)
    return key, l.prefix .. key, slot, from, to, held
  end

  --- Is rkey on neither side of a migrating slot (the source answers ASK for a key it no longer has)?
  local function nowhere(from, to, rkey)
    local n, err = h.cmd(from, "exists", rkey)
    if n == 1 then return false end
    if n == nil and not tostring(err):match("^ASK ") then return false end
    return h.cmd_asking(to, "exists", rkey) == 0
  end

  it("releases a shared lock's reader while its slot is MIGRATING (the readers still on the source): true, the key freed", function()
    local l = locks()
    local _, rkey, _, from, to, reader = migrating(l, "rr", function(k) return assert(l:acquire(k, { ttl = 10000, shared = true })) end)
    assert.equal("dlock!shared", h.cmd(from, "get", rkey))
    local ok, err = reader:release()
    assert.is_nil(err)
    assert.is_true(ok)
    assert.is_true(nowhere(from, to, rkey))
  end)

  --- A key of a factory taken (take(l, key) returns the lease) and a waiter of another dict in its queue
  --- before the slot starts to MIGRATING (every key on the source): the release hands it the key.
  local function hands_on(tag, take)
    local l = locks()
    -- Another dict: the holder is not this waiter's nginx's, so it waits in Redis' queue.
    local w = locks({ dict = "dlock_other", prefix = l.prefix })
    local script = require "resty.dlock.redis.script"
    local _, rkey, _, from, to, held = migrating(l, tag, function(k)
      local holder = take(l, k)
      local waiter = ngx.thread.spawn(function() return w:acquire(k, { ttl = 5000, wait = 6000 }) end)
      -- Time for the waiter to take its ticket in the queue, before the slot starts to move.
      ngx.sleep(0.3)
      return { holder = holder, waiter = waiter, queue = script.queueKey(l.prefix .. k, true) }
    end)
    -- The ticket on the source, with the lock key (and the readers).
    assert.equal(1, h.cmd(from, "zcard", held.queue))
    local ok, err = held.holder:release()
    assert.is_nil(err)
    assert.is_true(ok)
    local _, lease, werr = ngx.thread.wait(held.waiter)
    assert(lease, werr)
    assert.is_true(lease:release())
    assert.is_true(nowhere(from, to, rkey))
  end

  it("releases the last reader while its slot is MIGRATING and a writer waits in the queue (every key on the source): the writer gets it", function()
    hands_on("rq", function(l, k) return assert(l:acquire(k, { ttl = 10000, shared = true })) end)
  end)

  it("releases a lock while its slot is MIGRATING and a waiter is in the queue (every key on the source): the waiter gets it", function()
    hands_on("lq", function(l, k) return assert(l:acquire(k, { ttl = 10000 })) end)
  end)

  it("releases a set of keys in one slot (acquire_all) while it is MIGRATING and each key has a waiter in its queue: the waiters get them", function()
    local l = locks()
    local w = locks({ dict = "dlock_other", prefix = l.prefix })
    local script = require "resty.dlock.redis.script"
    local tag = key_on(l, nil, "mq")
    local k1, k2 = "a{" .. tag .. "}", "b{" .. tag .. "}"
    local slot = c.keyslot(l.prefix .. k1)
    local from = c.slot_port(slot)
    local to = other_master(from)
    local set = assert(l:acquire_all({ k1, k2 }, { ttl = 10000 }))
    local waiter = ngx.thread.spawn(function() return w:acquire(k1, { ttl = 5000, wait = 6000 }) end)
    local waiter2 = ngx.thread.spawn(function() return w:acquire(k2, { ttl = 5000, wait = 6000 }) end)
    ngx.sleep(0.3)
    -- Both keys and their waiters' tickets on the source when the slot starts to move.
    assert.equal(1, h.cmd(from, "zcard", script.queueKey(l.prefix .. k1, true)))
    assert.equal(1, h.cmd(from, "zcard", script.queueKey(l.prefix .. k2, true)))
    h.migrate_slot(c, slot, from, to, "begin")
    finally(function()
      h.migrate_slot(c, slot, from, to, "keys")
      h.migrate_slot(c, slot, from, to, "finish")
    end)
    local ok, err = set:release()
    assert.is_nil(err)
    assert.is_true(ok)
    for _, th in ipairs({ waiter, waiter2 }) do
      local _, lease, werr = ngx.thread.wait(th)
      assert(lease, werr)
      assert.is_true(lease:release())
    end
    assert.is_true(nowhere(from, to, l.prefix .. k1) and nowhere(from, to, l.prefix .. k2))
  end)

  it("extends a shared lock's reader while its slot is MIGRATING: true, the key's ttl moved", function()
    local l = locks()
    local _, rkey, _, from, _, reader = migrating(l, "re", function(k) return assert(l:acquire(k, { ttl = 5000, shared = true })) end)
    local ok, err = reader:extend(20000)
    assert.is_nil(err)
    assert.is_true(ok)
    assert.is_true(h.cmd(from, "pttl", rkey) > 15000)
    assert.is_true(reader:release())
  end)

  it("releases a set of keys on several masters (acquire_all) while one key's slot is MIGRATING: true, every key deleted", function()
    local l = locks()
    local k1, slot, from = key_on(l, nil, "s1")
    local to = other_master(from)
    local k2 = key_on(l, to, "s2")
    local set = assert(l:acquire_all({ k1, k2 }, { ttl = 10000 }))
    h.migrate_slot(c, slot, from, to, "begin")
    finally(function()
      h.migrate_slot(c, slot, from, to, "keys")
      h.migrate_slot(c, slot, from, to, "finish")
    end)
    local ok, err = set:release()
    assert.is_nil(err)
    assert.is_true(ok)
    assert.is_true(nowhere(from, to, l.prefix .. k1))
    assert.equal(0, h.cmd(to, "exists", l.prefix .. k2))
  end)

  it("releases a set of hash-tagged keys in one slot (acquire_all) while that slot is MIGRATING: true, the keys deleted", function()
    local l = locks()
    local tag = key_on(l, nil, "tag")
    local k1, k2 = "a{" .. tag .. "}", "b{" .. tag .. "}"
    local slot = c.keyslot(l.prefix .. k1)
    assert.equal(slot, c.keyslot(l.prefix .. k2))
    local from = c.slot_port(slot)
    local to = other_master(from)
    local set = assert(l:acquire_all({ k1, k2 }, { ttl = 10000 }))
    h.migrate_slot(c, slot, from, to, "begin")
    finally(function()
      h.migrate_slot(c, slot, from, to, "keys")
      h.migrate_slot(c, slot, from, to, "finish")
    end)
    local ok, err = set:release()
    assert.is_nil(err)
    assert.is_true(ok)
    assert.is_true(nowhere(from, to, l.prefix .. k1))
    assert.is_true(nowhere(from, to, l.prefix .. k2))
  end)

  it("releases a guard's lease posted from the log phase while its slot is MIGRATING without counting a Redis error", function()
    local releases = require "resty.dlock.gateway.releases"
    local stats = require "resty.dlock.gateway.stats"
    local l = locks()
    local _, rkey, _, from, to, lease = migrating(l, "gp", function(k) return assert(l:acquire(k, { ttl = 10000 })) end)
    assert.equal(lease.token, h.cmd(from, "get", rkey))
    local name = h.unique("reshard-guard")
    local owner = { name = name, _dict = ngx.shared.dlock, _ttl = 10000, _renew = false, _release = true, _hold = 0 }
    local before = stats.count(ngx.shared.dlock, name, "redis_errors")
    releases.done({ owner = owner, lease = lease, done = false, answered = releases.answered }, 0)
    assert.is_true(h.eventually(3, function()
      ngx.sleep(0.02)
      return nowhere(from, to, rkey) and not lease:valid()
    end), "the key stayed")
    -- The slot on the move is normal operation, as a MOVED is: not a failure of Redis.
    assert.equal(before, stats.count(ngx.shared.dlock, name, "redis_errors"))
  end)
end)

h.check_error_logs({})
