-- Rate limits on Redis' clock (resty.dlock.rate, core/rate.ts' GCRA script):
-- burst at once from idle, then one per interval; refusals and dry runs
-- charge nothing; several limits pass or fail together; cost; give-back;
-- on a standalone Redis and on a Redis Cluster. Real Redis, real nginx.
-- (With Redis gone, on_error = "local": rate_fallback_spec.lua; bad options:
-- rate_options_spec.lua; the GCRA scripts alone: rate_scripts_spec.lua.)
local h = require "helpers"
local core = require "resty.dlock.core.rate"

local new = h.rate_limiter

local note = h.rate_note

-- One Redis Cluster for the whole file, started when first needed.
local cluster

--- Every topology the harness offers rate limits on: a name and the redis options.
local topologies = {
  { "standalone", function() return h.redis_opts() end },
  { "cluster", function(ctx)
      cluster = cluster or h.start_cluster()
      ctx.c = cluster
      ctx.port_of = function(key) return cluster.slot_owner(key) end
      return cluster.redis()
    end },
  -- The Lua API only (the gateway's config names a standalone Redis or a cluster).
  { "sentinel", function(ctx)
      local master = h.start_redis()
      local sentinel = h.start_sentinel("rate", master.port)
      ctx.stop = function() sentinel.stop() master.stop() end
      ctx.port_of = function() return master.port end
      return { sentinel = { master = "rate", nodes = { "127.0.0.1:" .. sentinel.port } }, connect_timeout = 300, read_timeout = 1000 }
    end, api_only = true },
}

for _, topo in ipairs(topologies) do
  local tname, redis_of = topo[1], topo[2]

  describe("rate limits on " .. tname, function()
    local ctx, redis = {}, nil
    setup(function() redis = redis_of(ctx) end)
    teardown(function() if ctx.stop then ctx.stop() end end)

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

    it("say exactly what remains when the interval is no whole number of us (3 per second; 15 per second and 1000 per hour)", function()
      local lim = new(redis, { rate = 3, period = 1000 })
      local _, remaining = lim:incoming("k", true)
      assert.equal(2, remaining)
      for _ = 1, 2 do assert.equal(0, (lim:incoming("k", true))) end
      assert.is_nil((lim:incoming("k", true)))
      local many = new(redis, { limits = { { rate = 15, period = 1000 }, { rate = 1000, period = 3600000 } } })
      _, remaining = many:incoming("k", true)
      assert.equal(14, remaining)
      for _ = 1, 14 do assert.equal(0, (many:incoming("k", true))) end
      assert.is_nil((many:incoming("k", true)))
    end)

    if tname == "standalone" then
      it("admit the rate of a lone limit whose burst is less than 1 ms of it (3000 per second, burst 1), as with several limits", function()
        local function run(lim)
          local admitted, refused = 0, 0
          h.under_load(0.5, 40, function()
            local d, err = lim:incoming("hot", true)
            if d then admitted = admitted + 1 else assert.equal("rejected", err) refused = refused + 1 end
          end)
          return admitted, refused
        end
        -- The same limit beside one that never binds: decided by the general script, on Redis' TIME in us.
        local many, many_refused = run(new(redis, { limits = { { rate = 3000, period = 1000, burst = 1 }, { rate = 1000000, period = 1000 } } }))
        local one, one_refused = run(new(redis, { rate = 3000, period = 1000, burst = 1 }))
        local what = string.format("alone: %d admitted, %d refused; beside another: %d admitted, %d refused", one, one_refused, many, many_refused)
        -- Offered more than the limit both times; a lone limit read at 1 ms had admitted one a ms (a third).
        assert.is_true(many_refused > many and one_refused > one, what)
        assert.is_true(one >= 0.75 * many, what)
      end)
    end

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
      local conf, ls = lim._redis, lim._limits
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
      note("one nginx", admitted, nil, elapsed, 5 + 20 * elapsed)
      assert.is_true(admitted <= 5 + 20 * elapsed, admitted .. " admitted in " .. elapsed .. " s")
      -- And the limit is not starved either: at least the steady rate over most of the time.
      assert.is_true(admitted >= 5 + 20 * 0.8, admitted .. " admitted in " .. elapsed .. " s")
    end)

    it("keep a key's state no longer than it matters: it expires when every limit is full again", function()
      local lim = new(redis, { rate = 10, period = 1000 })
      assert.equal(0, (lim:incoming("k", true, 3)))
      local port
      if ctx.port_of then port = ctx.port_of(lim.prefix .. "k") end
      local pttl = tonumber(h.cmd(port, "pttl", lim.prefix .. "k"))
      assert.is_true(pttl > 0 and pttl <= 300, tostring(pttl))
    end)
  end)
end

--- Two nginx of one fleet (nginx/spec-rate.conf, 2 workers each) on the topology's Redis.
local function fleet(seeds)
  local vars = { CLUSTER_SEEDS = seeds or "", DOWN_PORT = h.free_port(), PREFIX_KEYS = h.unique("gw") }
  local out = {}
  for i = 1, 2 do
    local v = { BACKEND_PORT = h.free_port() }
    for k, x in pairs(vars) do v[k] = x end
    out[i] = h.start_nginx("spec-rate.conf", v)
  end
  return out
end

for _, topo in ipairs(topologies) do
  local tname, redis_of = topo[1], topo[2]

  if not topo.api_only then describe("gateway mode rate on " .. tname, function()
    local a, b
    local ctx = {}
    setup(function()
      redis_of(ctx)
      local seeds = ctx.c and table.concat(ctx.c.seeds, ",") or nil
      a, b = unpack(fleet(seeds))
    end)
    teardown(function()
      if a then a.stop() end
      if b then b.stop() end
      -- The file's last use of its cluster: stopped here, before the file's error-log check.
      if ctx.c then
        ctx.c.stop()
        cluster = nil
      end
    end)

    local function get(n, path) return assert(h.http(n.port, path)) end

    it("admit no more than burst + rate x elapsed / period across two nginx of 2 workers each, offered 3x and more", function()
      -- api: 20 per 1000 ms, burst 10; 16 clients alternating the two nginx for 2.5 s.
      local admitted, refused, other, answered = 0, 0, 0, {}
      local t0 = h.now()
      h.under_load(2.5, 16, function(i)
        local n = (i % 2 == 0) and a or b
        local res = get(n, "/g/api?key=exact")
        answered[#answered + 1] = h.now()
        if res.status == 200 then admitted = admitted + 1
        elseif res.status == 429 and res.headers["retry-after"] == "1" then refused = refused + 1
        else other = other + 1 end
        ngx.sleep(0.01)
      end)
      local elapsed = h.now() - t0
      note("two nginx", admitted, refused, elapsed, 10 + 20 * elapsed)
      assert.equal(0, other)
      assert.is_true(admitted <= 10 + 20 * elapsed, admitted .. " admitted in " .. elapsed .. " s")
      -- Not starved either: most of what the requests, as they came, left room for
      -- (a stall of the machine between them leaves room for no more than the burst).
      local room = h.gcra_admits(answered, 20, 10)
      assert.is_true(admitted >= room * 0.7, admitted .. " admitted where " .. room .. " fit, in " .. elapsed .. " s")
      assert.is_true(refused >= 2 * admitted, refused .. " refused, " .. admitted .. " admitted: offered less than 3x")
    end)

    it("stay exact through nginx -s reload of one nginx under load: the count lives in Redis, no request fails", function()
      local admitted, refused, other, answered = 0, 0, 0, {}
      local t0 = h.now()
      local reloaded = false
      h.parallel(16, function(i)
        local n = (i % 2 == 0) and a or b
        while h.now() < t0 + 2.5 do
          if i == 1 and not reloaded and h.now() > t0 + 1 then
            reloaded = true
            assert(h.sh(h.env.nginx .. " -p " .. a.prefix .. " -c " .. a.prefix .. "/nginx.conf -s reload"))
          end
          local res = get(n, "/g/api?key=reload")
          answered[#answered + 1] = h.now()
          if res.status == 200 then admitted = admitted + 1
          elseif res.status == 429 then refused = refused + 1
          else other = other + 1 end
          ngx.sleep(0.01)
        end
      end)
      local elapsed = h.now() - t0
      note("two nginx, one reloaded", admitted, refused, elapsed, 10 + 20 * elapsed)
      assert.is_true(reloaded)
      assert.equal(0, other)
      assert.is_true(admitted <= 10 + 20 * elapsed, admitted .. " admitted in " .. elapsed .. " s")
      local room = h.gcra_admits(answered, 20, 10)
      assert.is_true(admitted >= room * 0.7, admitted .. " admitted where " .. room .. " fit, in " .. elapsed .. " s")
    end)

    it("say the policy and what remains in RateLimit-Policy and RateLimit (draft-ietf-httpapi-ratelimit-headers-11)", function()
      local res = get(a, "/g/api?key=fields")
      assert.equal(200, res.status)
      assert.equal('"20-per-1s";q=20;w=1;dlock-burst=10', res.headers["ratelimit-policy"])
      assert.equal('"20-per-1s";r=9;t=1', res.headers["ratelimit"])
      res = get(b, "/g/api?key=fields")
      assert.equal('"20-per-1s";r=8;t=1', res.headers["ratelimit"])
      -- A period of no whole seconds has no window parameter (w is in seconds).
      -- What remains is exact when the interval is no whole number of us (66666.67 here).
      assert.equal('"15-per-1s";r=14;t=1', get(a, "/g/fifteen?key=fields").headers["ratelimit"])
      res = get(a, "/g/odd?key=fields")
      assert.equal('"3-per-1500ms";q=3;dlock-burst=1', res.headers["ratelimit-policy"])
      assert.equal('"3-per-1500ms";r=0;t=1', res.headers["ratelimit"])
      -- Through a proxied response too.
      res = get(b, "/proxied?key=fields")
      assert.equal(200, res.status)
      assert.equal("served fields\n", res.body)
      assert.equal('"20-per-1s";r=7;t=1', res.headers["ratelimit"])
    end)

    it("refuse with 429, Retry-After in whole seconds and the fields, charging nothing for the refusal", function()
      assert.equal(200, get(a, "/g/odd?key=retry").status)
      local res = get(b, "/g/odd?key=retry")
      assert.equal(429, res.status)
      assert.equal("1", res.headers["retry-after"])
      assert.equal('"3-per-1500ms";r=0;t=1', res.headers["ratelimit"])
      -- One interval (500 ms) after the admitted one, whatever was refused meanwhile.
      ngx.sleep(0.55)
      assert.equal(200, get(b, "/g/odd?key=retry").status)
    end)

    it("decide several limits together: the tightest refuses, its Retry-After, and every policy in the fields", function()
      for i = 1, 5 do
        local res = get(i % 2 == 0 and a or b, "/g/multi?key=m")
        assert.equal(200, res.status)
      end
      local res = get(a, "/g/multi?key=m")
      assert.equal(429, res.status)
      assert.equal("1", res.headers["retry-after"])
      assert.equal('"persec";q=5;w=1, "permin";q=8;w=60', res.headers["ratelimit-policy"])
      assert.matches('^"persec";r=0;t=1, "permin";r=3;t=%d+$', res.headers["ratelimit"])
      ngx.sleep(1.05)
      for _ = 1, 3 do assert.equal(200, get(b, "/g/multi?key=m").status) end
      res = get(a, "/g/multi?key=m")
      assert.equal(429, res.status)
      -- 8 per minute: the next one in 7.5 s, less the second that passed.
      local ra = tonumber(res.headers["retry-after"])
      assert.is_true(ra >= 6 and ra <= 8, tostring(ra))
      assert.matches('"permin";r=0;t=%d+$', res.headers["ratelimit"])
    end)

    it("charge cost units per request (cost = 4 of 10 per minute); t is the effective window: the seconds until " ..
       "the next unit comes back, within which no more than r can be used (draft-11 4.1.2), never past Retry-After", function()
      assert.equal('"10-per-1m";r=6;t=6', get(a, "/g/costly?key=c").headers["ratelimit"])
      assert.equal('"10-per-1m";r=2;t=6', get(b, "/g/costly?key=c").headers["ratelimit"])
      local res = get(a, "/g/costly?key=c")
      assert.equal(429, res.status)
      assert.equal("12", res.headers["retry-after"])
      assert.equal('"10-per-1m";r=2;t=6', res.headers["ratelimit"])
    end)

    it("leave the fields out with ratelimit_headers = false, and add the guard's own headers to refusals", function()
      for _ = 1, 2 do
        local res = get(a, "/g/quiet?key=q")
        assert.equal(200, res.status)
        assert.is_nil(res.headers["ratelimit"])
        assert.is_nil(res.headers["ratelimit-policy"])
      end
      local res = get(b, "/g/quiet?key=q")
      assert.equal(429, res.status)
      assert.equal("yes", res.headers["x-limited"])
      assert.is_not_nil(res.headers["retry-after"])
    end)

    it("charge a request once, even when an internal redirect brings it to the guard again", function()
      assert.equal(200, get(a, "/twice?key=t").status)
      assert.equal(200, get(a, "/g/twice?key=t").status)
      assert.equal(429, get(b, "/g/twice?key=t").status)
    end)

    it("let a request without its key through unguarded (on_missing = pass), without fields", function()
      local res = get(a, "/g/api")
      assert.equal(200, res.status)
      assert.is_nil(res.headers["ratelimit"])
    end)

    it("count admitted (acquired) and refused (rejected) requests per guard on the status page", function()
      local cjson = require "cjson.safe"
      local row = assert(cjson.decode(get(a, "/dlock/status").body)).guards.quiet
      assert.equal("rate", row.mode)
      assert.equal(2, row.acquired)
      assert.equal(0, row.rejected)
      row = assert(cjson.decode(get(b, "/dlock/status").body)).guards.quiet
      assert.equal(0, row.acquired)
      assert.equal(1, row.rejected)
    end)

    if tname == "standalone" then
      it("refuse with error_status (on_error = deny) or let through (allow) while Redis is down, then stop calling it", function()
        for _ = 1, 4 do
          assert.equal(503, get(a, "/g/down_deny?key=d").status)
          assert.equal(200, get(a, "/g/down_allow?key=d").status)
        end
        local cjson = require "cjson.safe"
        local g = assert(cjson.decode(get(a, "/dlock/status").body)).guards
        assert.equal("open", g.down_deny.breaker)
        assert.equal(4, g.down_deny.failed_closed)
        assert.equal(4, g.down_allow.failed_open)
        assert.is_true(g.down_deny.short_circuited >= 1)
      end)
    end
  end) end
end

-- The unreachable Redis of the down_* guards: connect failures, the guards' lines.
h.check_error_logs({ { "connect%(%) failed %(111: Connection refused%)", max = 6 },
  { "dlock: guard down_%a+: redis 127%.0%.0%.1:%d+: connect", max = 8 },
  { "dlock: guard down_%a+: Redis keeps failing", max = 4 } })
