-- Rate limits on Redis' clock (resty.dlock.rate, core/rate.ts' GCRA script):
-- burst at once from idle, then one per interval; refusals and dry runs
-- charge nothing; several limits pass or fail together; cost; give-back;
-- on a standalone Redis and on a Redis Cluster. Real Redis, real nginx.
local h = require "helpers"
local rate = require "resty.dlock.rate"
local core = require "resty.dlock.core.rate"

local function new(redis, opts)
  local o = { dict = "dlock", redis = redis, prefix = h.unique("rate") }
  for k, v in pairs(opts or {}) do o[k] = v end
  return assert(rate.new(o))
end

--- Every topology the harness offers rate limits on: a name and the redis options.
local topologies = {
  { "standalone", function() return h.redis_opts() end },
  { "cluster", function(ctx)
      ctx.c = ctx.c or h.start_cluster()
      return { cluster = { nodes = ctx.c.seeds }, connect_timeout = 300, read_timeout = 1000 }
    end },
}

for _, topo in ipairs(topologies) do
  local tname, redis_of = topo[1], topo[2]

  describe("rate limits on " .. tname, function()
    local ctx, redis = {}, nil
    setup(function() redis = redis_of(ctx) end)
    teardown(function() if ctx.c then ctx.c.stop() end end)

    it("admit burst requests at once from idle, each saying what remains, then refuse with the ms until the next fits", function()
      local lim = new(redis, { rate = 5, period = 1000, burst = 5 })
      for i = 1, 5 do
        local delay, remaining = lim:incoming("k", true)
        assert.equal(0, delay)
        assert.equal(5 - i, remaining)
      end
      local delay, why, retry_after = lim:incoming("k", true)
      assert.is_nil(delay)
      assert.equal("rejected", why)
      -- One interval (200 ms) at most, less the time the five took.
      assert.is_true(retry_after >= 1 and retry_after <= 200, tostring(retry_after))
    end)

    it("charge nothing for a refusal: the next request fits one interval later, however many were refused", function()
      local lim = new(redis, { rate = 2, period = 1000, burst = 1 })
      assert.equal(0, (lim:incoming("k", true)))
      local retry
      for _ = 1, 10 do
        local d, why, r = lim:incoming("k", true)
        assert.is_nil(d)
        assert.equal("rejected", why)
        retry = r
      end
      ngx.sleep((retry + 30) / 1000)
      assert.equal(0, (lim:incoming("k", true)))
    end)

    it("charge nothing when commit is false: the answer says whether it would pass, as if charged", function()
      local lim = new(redis, { rate = 3, period = 60000 })
      for _ = 1, 10 do
        local d, remaining = lim:incoming("k", false)
        assert.equal(0, d)
        assert.equal(2, remaining)
      end
      for i = 1, 3 do assert.equal(3 - i, select(2, lim:incoming("k", true))) end
      assert.equal("rejected", select(2, lim:incoming("k", false)))
    end)

    it("give back with uncommit what a committed incoming took (as combine() does when a later limiter refuses)", function()
      local lim = new(redis, { rate = 3, period = 60000 })
      for _ = 1, 3 do assert.equal(0, (lim:incoming("k", true))) end
      assert.equal("rejected", select(2, lim:incoming("k", true)))
      assert.equal(1, (lim:uncommit("k")))
      assert.equal(0, (lim:incoming("k", true)))
      -- Never more than burst: giving back to an idle key leaves it full, not fuller.
      assert.equal(3, (lim:uncommit("idle")))
      assert.equal(3, (lim:uncommit("idle")))
      for _ = 1, 3 do assert.equal(0, (lim:incoming("idle", true))) end
      assert.equal("rejected", select(2, lim:incoming("idle", true)))
    end)

    it("charge cost units per request, refuse one that does not fit whole, and refuse a cost above burst as bad input", function()
      local lim = new(redis, { rate = 10, period = 60000 })
      assert.equal(6, select(2, lim:incoming("k", true, 4)))
      assert.equal(2, select(2, lim:incoming("k", true, 4)))
      local d, why, retry = lim:incoming("k", true, 4)
      assert.is_nil(d)
      assert.equal("rejected", why)
      -- Two more units: two intervals of 6 s, less what passed.
      assert.is_true(retry > 11000 and retry <= 12000, tostring(retry))
      assert.equal(0, select(2, lim:incoming("k", true, 2)))
      local _, err = lim:incoming("k", true, 11)
      assert.equal("dlock: cost must be a positive integer, at most the smallest burst (10), got 11", err)
      _, err = lim:incoming("k", true, 0)
      assert.equal("dlock: cost must be a positive integer, at most the smallest burst (10), got 0", err)
    end)

    it("decide several limits in one call: all have room and each is charged, or none is", function()
      local lim = new(redis, { limits = { { rate = 5, period = 60000, name = "permin" }, { rate = 2, period = 60000, name = "few" } } })
      local conf, ls = lim.redis, lim.limits
      local key = lim.prefix .. "k"
      for i = 1, 2 do
        local reply = assert(core.decide(conf, key, ls, "1", 1))
        assert.equal(1, reply[1])
        assert.equal(5 - i, core.remaining(reply, 1))
        assert.equal(2 - i, core.remaining(reply, 2))
      end
      for _ = 1, 3 do
        local reply = assert(core.decide(conf, key, ls, "1", 1))
        assert.equal(0, reply[1])
        -- The limit with room was not charged by the refusals.
        assert.equal(3, core.remaining(reply, 1))
        assert.equal(0, core.remaining(reply, 2))
        assert.is_true(reply[2] > 29000 and reply[2] <= 30000, tostring(reply[2]))
      end
      assert.equal("rejected", select(2, lim:incoming("k", false)))
    end)

    it("never admit more than burst + rate x elapsed / period, with 40 threads of this nginx asking at once", function()
      local lim = new(redis, { rate = 20, period = 1000, burst = 5 })
      local admitted = 0
      local t0 = h.now()
      h.parallel(40, function()
        local stop = t0 + 1.2
        while h.now() < stop do
          local d, err = lim:incoming("hot", true)
          if d then admitted = admitted + 1 else assert(err == "rejected", err) end
          ngx.sleep(0.005)
        end
      end)
      local elapsed = h.now() - t0
      assert.is_true(admitted <= 5 + 20 * elapsed, admitted .. " admitted in " .. elapsed .. " s")
      -- And the limit is not starved either: at least the steady rate over most of the time.
      assert.is_true(admitted >= 5 + 20 * 0.8, admitted .. " admitted in " .. elapsed .. " s")
    end)

    it("keep a key's state no longer than it matters: its hash expires when every limit is full again", function()
      local lim = new(redis, { rate = 10, period = 1000 })
      assert.equal(0, (lim:incoming("k", true, 3)))
      local port
      if ctx.c then port = ctx.c.slot_owner(lim.prefix .. "k") end
      local pttl = tonumber(h.cmd(port, "pttl", lim.prefix .. "k"))
      assert.is_true(pttl > 0 and pttl <= 300, tostring(pttl))
    end)
  end)
end

describe("resty.dlock.rate", function()
  it("answer nil and the error when Redis is unreachable", function()
    local lim = new({ host = "127.0.0.1", port = h.free_port(), connect_timeout = 200 }, { rate = 1 })
    local d, err = lim:incoming("k", true)
    assert.is_nil(d)
    assert.matches("connection refused", err)
  end)

  it("refuse bad options with messages naming the option and the value", function()
    local cases = {
      { { dict = "dlock", rate = 0 }, "dlock: rate must be a positive integer, got 0" },
      { { dict = "dlock", rate = 1.5 }, "dlock: rate must be a positive integer, got 1.5" },
      { { dict = "dlock", rate = 5, period = -1 }, "dlock: period must be a positive integer of ms, got -1" },
      { { dict = "dlock", rate = 5, burst = "x" }, 'dlock: burst must be a positive integer, got "x"' },
      { { dict = "dlock" }, "dlock: rate must be a positive integer (requests per period), or limits a list of { rate =, period = }, got nil" },
      { { dict = "dlock", rate = 5, limit = 3 }, 'dlock: unknown option in rate.new options, got "limit"' },
      { { dict = "nope", rate = 5 }, 'dlock: no lua_shared_dict named nope (declare it in nginx.conf), got "nope"' },
      { { dict = "dlock", rate = 5, limits = { { rate = 1 } } }, "dlock: rate and limits exclude each other: give each limit its own rate, got 5" },
      { { dict = "dlock", limits = {} }, "dlock: limits must be a list of 1 to 8 tables { rate =, period =, burst =, name = }, got a table" },
      { { dict = "dlock", limits = { { rate = 1 }, { rate = 0 } } }, "dlock: limits[2].rate must be a positive integer, got 0" },
      { { dict = "dlock", limits = { { rate = 1, per = 5 } } }, 'dlock: unknown option in limits[1], got "per"' },
      { { dict = "dlock", limits = { { rate = 1 }, { rate = 1 } } }, 'dlock: two limits share the policy name 1-per-1s (give each a name), got "1-per-1s"' },
      { { dict = "dlock", limits = { { rate = 1, name = "a b" } } }, 'dlock: limits[1].name must be letters, digits and -_.:/, got "a b"' },
      { { dict = "dlock", rate = 5, redis = { redlock = { "127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3" } } }, core.REDLOCK },
    }
    for _, c in ipairs(cases) do
      local lim, err = rate.new(c[1])
      assert.is_nil(lim)
      assert.equal(c[2], err)
    end
    assert.equal("dlock: rate.new needs an options table with dict and rate", select(2, rate.new()))
  end)

  it("refuse a key that is not a non-empty string", function()
    local lim = new(h.redis_opts(), { rate = 5 })
    for _, k in ipairs({ 42, "", string.rep("x", 1025) }) do
      local d, err = lim:incoming(k, true)
      assert.is_nil(d)
      assert.matches("^dlock: key must be a non%-empty string of at most 1024 bytes, got ", err)
    end
  end)
end)

-- The unreachable Redis of one test: its connect failure, logged by the cosocket.
h.check_error_logs({ { "connect%(%) failed %(111: Connection refused%)", max = 1 } })
