-- resty.dlock.rate inside lua-resty-limit-traffic's resty.limit.traffic.combine(),
-- next to resty.limit.req and resty.limit.count: what combine() relies on
-- (a dry run charges nothing, uncommit gives back exactly what a committed
-- incoming took, delay and state come back as the others'), and combine() run
-- with them. Real nginx, real Redis.
--
-- lua-resty-limit-traffic is bundled with OpenResty, not packaged by Debian:
-- on Debian's nginx the combine() cases are skipped (one line says so). To run
-- them on an OpenResty build that lacks it (OpenResty 1.29.2.3 bundles v0.09):
--   git --git-dir=<clone of openresty/lua-resty-limit-traffic> archive v0.09 lib/resty/limit \
--     | tar -x -C /opt/openresty/lualib --strip-components=1 --wildcards 'lib/resty/limit/*.lua'
--   DLOCK_NGINX=/opt/openresty/nginx/sbin/nginx bash spec/runner/run spec/rate_combine_spec.lua
local h = require "helpers"
local rate = require "resty.dlock.rate"

local has_traffic, traffic = pcall(require, "resty.limit.traffic")

local function dlock_rate(opts)
  local o = { dict = "dlock", redis = h.redis_opts(), prefix = h.unique("combine") }
  for k, v in pairs(opts) do o[k] = v end
  return assert(rate.new(o))
end

--- The TATs key holds in Redis, as { ["1"] = TAT, ... } (empty when there is none).
local function stored(lim, key)
  return h.rate_state(nil, lim.prefix .. key)
end

describe("resty.dlock.rate keeps the contract resty.limit.traffic.combine() relies on", function()
  -- 3 per minute: one request every 20 s, a whole number of us, so a charge
  -- and its give-back are the same double and the state reads back identical.
  it("a dry run writes nothing in Redis, and answers as if charged", function()
    local lim = dlock_rate({ rate = 3, period = 60000 })
    assert.same({ 0, 2 }, { lim:incoming("fresh", false) })
    assert.same({}, stored(lim, "fresh"))
    assert.same({ 0, 2 }, { lim:incoming("used", true) })
    local before = stored(lim, "used")
    assert.same({ 0, 1 }, { lim:incoming("used", false) })
    assert.same(before, stored(lim, "used"))
  end)

  it("uncommit gives back exactly what a committed incoming took: the state in Redis is as it was", function()
    local lim = dlock_rate({ limits = { { rate = 3, period = 60000 }, { rate = 10, period = 3600000, name = "hourly" } } })
    assert.equal(0, (lim:incoming("k", true)))
    local before = stored(lim, "k")
    assert.is_string(before["1"])
    assert.is_string(before["2"])
    assert.same({ 0, 1 }, { lim:incoming("k", true) })
    assert.are_not.same(before, stored(lim, "k"))
    assert.equal(2, (lim:uncommit("k")))
    assert.same(before, stored(lim, "k"))
  end)

  it("a refusal is nil and \"rejected\" (then the ms to wait), as limit.req's and limit.count's, and charges nothing", function()
    local lim = dlock_rate({ rate = 1, period = 60000 })
    assert.same({ 0, 0 }, { lim:incoming("k", true) })
    local before = stored(lim, "k")
    local delay, err, retry_after = lim:incoming("k", true)
    assert.is_nil(delay)
    assert.equal("rejected", err)
    assert.is_true(retry_after > 59000 and retry_after <= 60000, tostring(retry_after))
    assert.same(before, stored(lim, "k"))
  end)
end)

if not has_traffic then
  io.stdout:write("rate_combine_spec: this nginx has no resty.limit.traffic (lua-resty-limit-traffic, bundled with " ..
    "OpenResty, not packaged by Debian): the combine() cases were not run\n")
else
  local limit_req = require "resty.limit.req"
  local limit_count = require "resty.limit.count"

  -- combine() dry-runs every limiter but the last, commits the last, then
  -- commits the others in order. So a limiter refuses after others were
  -- charged only when its state changed in between: another request of the
  -- fleet took the last room. racing(lim, take) is lim, except that its
  -- committed incoming() first runs take(): that other request, at that
  -- very moment, every time.
  local function racing(lim, take)
    return setmetatable({
      incoming = function(_, key, commit)
        if commit then take() end
        return lim:incoming(key, commit)
      end,
    }, { __index = lim })
  end

  --- What limit.req would make of one more request of key (nothing charged): its excess.
  local function excess(lim, key)
    return select(2, assert(lim:incoming(key, false)))
  end

  --- What limit.count leaves of key's limit (nothing charged): its remaining before this request.
  local function left(lim, key)
    local _, remaining = lim:incoming(key, false)
    return remaining and remaining + 1 or 0
  end

  describe("resty.limit.traffic.combine() with a resty.dlock.rate limiter", function()
    local d, req, count, keys

    -- One key per limiter, fresh for each case: the dlock limiter's in Redis,
    -- limit.req's and limit.count's in the runner's dlock_other dict.
    before_each(function()
      local k = h.unique("combine")
      d = dlock_rate({ rate = 5, period = 60000 })
      -- 1 per second (a second of delay per request queued), up to 10 queued.
      req = assert(limit_req.new("dlock_other", 1, 10))
      count = assert(limit_count.new("dlock_other", 5, 60))
      keys = { d = "k", req = k .. "req", count = k .. "count" }
    end)

    it("admit while every limiter has room, returning the largest delay and each limiter's state", function()
      for i = 1, 3 do
        local states = {}
        local delay = assert(traffic.combine({ d, req, count }, { keys.d, keys.req, keys.count }, states))
        -- limit.req's: the requests queued before this one, a second each; the others never delay.
        assert.near(i - 1, delay, 0.1)
        assert.equal(5 - i, states[1])
        assert.near(i - 1, states[2], 0.1)
        assert.equal(5 - i, states[3])
      end
      assert.same({ 0, 1 }, { d:incoming(keys.d, false) })
      assert.equal(2, left(count, keys.count))
      assert.near(3, excess(req, keys.req), 0.1)
    end)

    it("refuse when the dlock limiter (last) is full: the local limiters were only dry-run and are charged nothing", function()
      for _ = 1, 5 do assert(d:incoming(keys.d, true)) end
      assert(traffic.combine({ req, count }, { keys.req, keys.count }))
      assert.same({ nil, "rejected" }, { traffic.combine({ req, count, d }, { keys.req, keys.count, keys.d }) })
      assert.equal(4, left(count, keys.count))
      assert.near(1, excess(req, keys.req), 0.1)
    end)

    it("refuse when the dlock limiter (first) is full at its dry run: nothing is charged", function()
      for _ = 1, 5 do assert(d:incoming(keys.d, true)) end
      assert(traffic.combine({ req, count }, { keys.req, keys.count }))
      assert.same({ nil, "rejected" }, { traffic.combine({ d, req, count }, { keys.d, keys.req, keys.count }) })
      assert.equal(4, left(count, keys.count))
      assert.near(1, excess(req, keys.req), 0.1)
    end)

    it("refuse when the dlock limiter (first) fills between its dry run and its commit: the local limiter charged is given back", function()
      for _ = 1, 4 do assert(d:incoming(keys.d, true)) end
      assert(traffic.combine({ req, count }, { keys.req, keys.count }))
      local rival = racing(count, function() assert(d:incoming(keys.d, true)) end)
      assert.same({ nil, "rejected" }, { traffic.combine({ d, req, rival }, { keys.d, keys.req, keys.count }) })
      -- limit.count (last) was charged first, then given back; limit.req was only dry-run.
      assert.equal(4, left(count, keys.count))
      assert.near(1, excess(req, keys.req), 0.1)
    end)

    it("refuse when the dlock limiter (between) fills before its commit: every local limiter charged is given back", function()
      for _ = 1, 4 do assert(d:incoming(keys.d, true)) end
      assert(traffic.combine({ req, count }, { keys.req, keys.count }))
      local rival = racing(count, function() assert(d:incoming(keys.d, true)) end)
      assert.same({ nil, "rejected" }, { traffic.combine({ req, d, rival }, { keys.req, keys.d, keys.count }) })
      -- limit.req was committed before the dlock limiter refused, limit.count (last) before either: both given back.
      assert.equal(4, left(count, keys.count))
      assert.near(1, excess(req, keys.req), 0.1)
    end)

    it("give the dlock limiter's charge back in Redis when a local limiter after it refuses", function()
      -- limit.req with no room to queue: one request, then none until a second has passed.
      local strict = assert(limit_req.new("dlock_other", 1, 0))
      assert(d:incoming(keys.d, true))
      local before = stored(d, keys.d)
      local rival = racing(count, function() assert(strict:incoming(keys.req, true)) end)
      -- combine() commits the dlock limiter, then limit.req refuses: the dlock charge and limit.count's are given back.
      assert.same({ nil, "rejected" }, { traffic.combine({ d, strict, rival }, { keys.d, keys.req, keys.count }) })
      assert.same(before, stored(d, keys.d))
      assert.same({ 0, 3 }, { d:incoming(keys.d, false) })
      assert.equal(5, left(count, keys.count))
    end)

    it("give the dlock limiter's charge back in Redis when it was last (charged first) and a local limiter refuses", function()
      assert(d:incoming(keys.d, true))
      -- limit.req's give-back restores its excess, not a key it never saw: one request it knows first.
      assert(req:incoming(keys.req, true))
      local before = stored(d, keys.d)
      local one = assert(limit_count.new("dlock_other", 1, 60))
      local rival = racing(d, function() assert(one:incoming(keys.count, true)) end)
      -- combine() commits the dlock limiter (last) first; limit.req commits, limit.count refuses:
      -- limit.req and the dlock limiter are given back.
      assert.same({ nil, "rejected" }, { traffic.combine({ req, one, rival }, { keys.req, keys.count, keys.d }) })
      assert.same(before, stored(d, keys.d))
      assert.same({ 0, 3 }, { d:incoming(keys.d, false) })
      assert.near(1, excess(req, keys.req), 0.1)
    end)

    it("charge nothing in Redis for the dlock limiter's dry run when a later limiter refuses at its own", function()
      for _ = 1, 5 do assert(count:incoming(keys.count, true)) end
      assert.same({ nil, "rejected" }, { traffic.combine({ d, req, count }, { keys.d, keys.req, keys.count }) })
      assert.same({}, stored(d, keys.d))
      assert.same({ 0, 4 }, { d:incoming(keys.d, false) })
      assert.near(0, excess(req, keys.req), 0.1)
    end)
  end)

  describe("resty.limit.traffic.combine() across a fleet (nginx/spec-combine.conf: 2 nginx of 2 workers)", function()
    local nodes = {}
    local FLEET, LOCAL = 10, 20

    setup(function()
      local vars = { PREFIX_KEYS = h.unique("fleet"), FLEET_RATE = FLEET, LOCAL_LIMIT = LOCAL }
      for i = 1, 2 do nodes[i] = h.start_nginx("spec-combine.conf", vars) end
    end)

    teardown(function()
      -- Both at once: a worker that made rate checks may take seconds to quit (redis/pipeline.ts: its
      -- sender timer waits up to 10 s for work, and a graceful quit waits for running timers).
      h.parallel(#nodes, function(i) return nodes[i].stop() end)
    end)

    it("admit exactly the fleet's limit over both nginx, each keeping in its own limit only what it admitted", function()
      local key = "k" .. h.unique("")
      local admitted = { 0, 0 }
      h.parallel(40, function(i)
        local node = i % 2 + 1
        local res = assert(h.http(nodes[node].port, "/combine?key=" .. key))
        assert.equal(200, res.status)
        if res.body:find("^ok ") then
          admitted[node] = admitted[node] + 1
        else
          assert.equal("refused rejected\n", res.body)
        end
      end)
      -- The fleet limit binds (20 asked of each nginx, whose own limit is 20): exactly 10 pass, wherever.
      assert.equal(FLEET, admitted[1] + admitted[2])
      -- Each refusal by the fleet gave back what the nginx's own limit.count had taken, if anything.
      for i = 1, 2 do
        assert.equal(tostring(LOCAL - admitted[i]) .. "\n", assert(h.http(nodes[i].port, "/node?key=" .. key)).body)
      end
    end)
  end)
end

h.check_error_logs()
