-- redis.cluster: how the nodes are reached when the Cluster does not name
-- them (cluster-preferred-endpoint-type unknown-endpoint: CLUSTER SLOTS gives
-- no host, MOVED ":port") and when a seed node is down (wake-ups subscribe on
-- any node that answers: a PUBLISH reaches every node of a Cluster).
local h = require "helpers"
local suite = require "topology.suite"

describe("redis.cluster nodes", function()
  local t = suite.topology("cluster")
  local c

  setup(function()
    t.start()
    c = t.handle
  end)

  teardown(function()
    t.stop()
  end)

  local key_on, other_master = t.key_on, t.other_master

  it("works with cluster-preferred-endpoint-type unknown-endpoint (CLUSTER SLOTS names no host, MOVED says \":port\"): " ..
     "takes, follows MOVED, releases", function()
    for _, n in ipairs(c.alive()) do
      assert.equal("OK", h.cmd(n.port, "config", "set", "cluster-preferred-endpoint-type", "unknown-endpoint"))
    end
    finally(function()
      for _, n in ipairs(c.alive()) do h.cmd(n.port, "config", "set", "cluster-preferred-endpoint-type", "ip") end
    end)
    -- A seed list of its own: a slot map of its own, read under the setting.
    local redis = c.redis()
    redis.cluster.nodes = { "127.0.0.1:" .. c.nodes[3].port, "127.0.0.1:" .. c.nodes[4].port }
    local l = assert(require("resty.dlock").new({ dict = "dlock", prefix = h.unique("unknown"), redis = redis }))
    local key, slot, from = key_on(l, nil, "ue")
    local to = other_master(from)
    local rkey = l.prefix .. key
    local slots = assert(h.cmd(from, "cluster", "slots"))
    assert.equal(ngx.null, slots[1][3][1])   -- no host: "the one you asked"
    local lease, err = l:acquire(key, { ttl = 5000 })
    assert.is_nil(err)
    assert.equal(lease.token, h.cmd(from, "get", rkey))
    assert.is_true(lease:release())
    h.migrate_slot(c, slot, from, to, "all")
    local _, moved = h.cmd(from, "get", rkey)
    assert.equal("MOVED " .. slot .. " :" .. to, moved)
    local again, aerr = l:acquire(key, { ttl = 5000 })
    assert.is_nil(aerr)
    assert.equal(again.token, h.cmd(to, "get", rkey))
    assert.is_true(again:release())
    assert.equal(0, h.cmd(to, "exists", rkey))
  end)

  it("wakes waiters through a live node when the first seed node is down (the Cluster serves every slot): subscribed somewhere", function()
    local dead = h.free_port()   -- a seed listed first that is down (nothing listens there)
    local redis = c.redis()
    redis.cluster.nodes = { "127.0.0.1:" .. dead, c.seeds[1], c.seeds[2] }
    local prefix = h.unique("seed")
    local holder_side = assert(require("resty.dlock").new({ dict = "dlock_other", prefix = prefix, redis = c.redis() }))
    local l = assert(require("resty.dlock").new({ dict = "dlock", prefix = prefix, redis = redis }))
    local holder = assert(holder_side:acquire("w", { ttl = 10000 }))
    local waiter = ngx.thread.spawn(function() return l:acquire("w", { ttl = 5000, wait = 6000 }) end)
    local channel = "dlock:released:" .. prefix .. "w"
    local function subscribers()
      local n = 0
      for _, node in ipairs(c.alive()) do n = n + h.cmd(node.port, "pubsub", "numsub", channel)[2] end
      return n
    end
    local subscribed = h.eventually(3, function() ngx.sleep(0.05) return subscribers() >= 1 end)
    assert.is_true(holder:release())
    local ok, lease, err = ngx.thread.wait(waiter)
    assert.is_true(ok)
    assert(lease, err)
    assert.is_true(lease:release())
    assert.is_true(subscribed, "no node of the Cluster has a subscriber to " .. channel .. " after 3 s of waiting")
  end)
end)

h.check_error_logs({
  { "connect%(%) failed %(111: Connection refused%), context: ngx%.timer", max = 1 },  -- the seed down on purpose
})
