-- The gateway guards over real HTTP: two nginx instances (nginx/gateway.conf,
-- 2 workers each) share one Redis and one slow backend; the backend measures
-- what actually reached it.
local h = require "helpers"
local cjson = require "cjson.safe"

local redis, a, b, backend_port

local function get(gw, path, opts)
  local res, err = h.http(gw.port, path, opts)
  assert(res, err)
  return res
end

local function backend_stats(key)
  return h.backend_stats(backend_port, key)
end

local function status(gw)
  return assert(cjson.decode(get(gw, "/dlock/status").body))
end

local function now()
  ngx.update_time()
  return ngx.now()
end

describe("request keys", function()
  it("hash in C to the Redis key Lua would make: the prefix, then the hex SHA-1 of the key, for any bytes, size and prefix", function()
    local digest = require "resty.dlock.gateway.digest"
    local hex = require("resty.dlock.core.token").hex
    local long_prefix = ("p"):rep(600)
    local cases = {
      { "dlock:gw:orders:", "abc" },
      { "", "abc" },
      { "dlock:gw:orders:", "" },
      { "dlock:gw:api:", "\0\255 binary\r\n" .. ("x"):rep(5000) },
      { "dlock:gw:orders:", "abc" },  -- the first prefix again, after another
      { long_prefix, "past the buffer: joined in Lua" },
      { "dlock:gw:orders:", "abd" },
    }
    for _, c in ipairs(cases) do
      local prefix, raw = c[1], c[2]
      assert.equal(prefix .. hex(ngx.sha1_bin(raw)), digest.key(prefix, raw))
    end
    assert.equal("dlock:gw:orders:a9993e364706816aba3e25717850c26c9cd0d89d", digest.key("dlock:gw:orders:", "abc"))
  end)
end)

describe("gateway", function()
  setup(function()
    redis = h.start_redis()
    backend_port = h.free_port()
    a = h.start_nginx("gateway.conf", { REDIS_PORT = redis.port, OWN_BACKEND_PORT = backend_port, BACKEND_PORT = backend_port })
    b = h.start_nginx("gateway.conf", { REDIS_PORT = redis.port, OWN_BACKEND_PORT = h.free_port(), BACKEND_PORT = backend_port })
  end)

  teardown(function()
    if a then a.stop() end
    if b then b.stop() end
    if redis then redis.stop() end
  end)

  describe("dedup", function()
    it("lets exactly one of 50 concurrent requests with one Idempotency-Key through; the rest get 409 + Retry-After", function()
      local key = h.unique("idem")
      local res = h.parallel(50, function(i)
        return get(i % 2 == 0 and a or b, "/orders?ms=300&key=" .. key, { headers = { ["Idempotency-Key"] = key } })
      end)
      local ok, conflict = 0, 0
      for _, r in ipairs(res) do
        if r.status == 200 then ok = ok + 1 end
        if r.status == 409 then
          conflict = conflict + 1
          assert.is_true(tonumber(r.headers["retry-after"]) >= 1)
        end
      end
      assert.equal(1, ok)
      assert.equal(49, conflict)
      assert.equal(1, (backend_stats(key)))
    end)

    it("holds the key after a 2xx so an immediate retry is a 409, and lets it through after `hold`", function()
      local key = h.unique("idem")
      local hdr = { headers = { ["Idempotency-Key"] = key } }
      assert.equal(200, get(a, "/orders?key=" .. key, hdr).status)
      local retry = get(b, "/orders?key=" .. key, hdr)
      assert.equal(409, retry.status)
      -- The hold lands in the log phase, a moment after the client has its response: until
      -- then the retry meets the request's own lease (ttl 3 s), after it the hold (2 s).
      assert.is_truthy(retry.headers["retry-after"] == "2" or retry.headers["retry-after"] == "3", retry.headers["retry-after"])
      ngx.sleep(2.1)
      assert.equal(200, get(a, "/orders?key=" .. key, hdr).status)
      assert.equal(2, (backend_stats(key)))
    end)

    it("still releases after SCRIPT FLUSH (queued releases go out pipelined, NOSCRIPT falls back to EVAL)", function()
      assert.equal("OK", h.cmd(redis.port, "script", "flush"))
      local keys = {}
      local res = h.parallel(10, function(i)
        keys[i] = h.unique("flush")
        return get(a, "/jobs?job=" .. keys[i] .. "&key=" .. keys[i])
      end)
      for _, r in ipairs(res) do assert.equal(200, r.status) end
      ngx.sleep(0.2)
      for i = 1, 10 do
        local again = get(b, "/jobs?job=" .. keys[i] .. "&key=" .. keys[i], { timeout = 5000 })
        assert.equal(200, again.status)
      end
      ngx.sleep(0.3)   -- releases go out after the response, from the log phase's queue
      assert.same({}, h.cmd(redis.port, "keys", "dlock:gw:jobs:*"))
    end)

    it("rejects a request without the key with 400 (on_missing = reject)", function()
      assert.equal(400, get(a, "/orders").status)
    end)

    it("keeps the key of a request whose client went away while the backend still runs it", function()
      local key = h.unique("abort")
      local hdr = { ["Idempotency-Key"] = key }
      get(a, "/orders?ms=1500&key=" .. key, { headers = hdr, abort_after = 300 })
      ngx.sleep(0.1)
      local retry = get(b, "/orders?key=" .. key, { headers = hdr })
      assert.equal(409, retry.status)
      -- Not renewed any more: the lease (3 s) runs out on its own.
      assert.is_true(tonumber(retry.headers["retry-after"]) <= 3)
      local hits, _, inflight = backend_stats(key)
      assert.equal(1, hits)
      assert.equal(1, inflight)
    end)

    it("keeps the lock of a request that runs longer than its ttl (renewal)", function()
      local key = h.unique("long")
      local hdr = { headers = { ["Idempotency-Key"] = key } }
      local before = status(a).guards.orders
      local slow = ngx.thread.spawn(get, a, "/orders?ms=4500&key=" .. key, hdr)
      ngx.sleep(3.6)   -- past the 3000 ms ttl
      assert.equal(409, get(b, "/orders?key=" .. key, hdr).status)
      local _, res = ngx.thread.wait(slow)
      assert.equal(200, res.status)
      local after = status(a).guards.orders
      assert.is_true(after.renewed - before.renewed >= 2)
      assert.equal(before.lost, after.lost)
    end)
  end)

  describe("renewal", function()
    it("logs and counts a lease that vanished while its request was in flight", function()
      local before = status(a).guards.orders.lost
      local key = h.unique("vanish")
      local slow = ngx.thread.spawn(get, a, "/orders?ms=2500&key=" .. key, { headers = { ["Idempotency-Key"] = key } })
      ngx.sleep(0.3)
      -- Someone (an operator, a failover) deletes the lock under the running request.
      for _, k in ipairs(h.cmd(redis.port, "keys", "dlock:gw:orders:*")) do h.cmd(redis.port, "del", k) end
      ngx.sleep(1.5)   -- the next renewal sweep (every ttl/3 = 1 s) finds it gone
      assert.equal(before + 1, status(a).guards.orders.lost)
      assert.matches("lease on %x+ lost while its request is in flight", a.error_log())
      local _, res = ngx.thread.wait(slow)
      assert.equal(200, res.status)
    end)
  end)

  describe("concurrency", function()
    it("never lets more than 3 of 30 concurrent slow requests per key reach the backend across 2 nginx", function()
      local key = h.unique("conc")
      local t0 = now()
      local res = h.parallel(30, function(i)
        local r = get(i % 2 == 0 and a or b, "/reports?user=alice&ms=400&key=" .. key)
        r.took = now() - t0
        return r
      end)
      local ok, limited = 0, 0
      for _, r in ipairs(res) do
        if r.status == 200 then ok = ok + 1 end
        if r.status == 429 then
          limited = limited + 1
          assert.is_true(r.took >= 1.5, "429 before the wait ran out: " .. r.took)
          assert.is_truthy(r.headers["retry-after"])
        end
      end
      local hits, max, inflight = backend_stats(key)
      assert.equal(3, max)
      assert.equal(ok, hits)
      assert.equal(0, inflight)
      assert.equal(30, ok + limited)
      -- Waiters got through as capacity freed: far more than the first 3, not all 30.
      assert.is_true(ok >= 9, ok .. " passed")
      assert.is_true(limited >= 1, limited .. " limited")
    end)

    it("counts per key: another user is not limited", function()
      local key = h.unique("conc")
      local res = h.parallel(6, function(i)
        return get(a, "/reports?user=u" .. i .. "&ms=200&key=" .. key)
      end)
      for _, r in ipairs(res) do assert.equal(200, r.status) end
      local _, max = backend_stats(key)
      assert.equal(6, max)
    end)
  end)

  describe("throttle", function()
    it("lets one request per key per ttl through, and says when to retry", function()
      local user = h.unique("user")
      assert.equal(200, get(a, "/refresh?user=" .. user).status)
      local again = get(b, "/refresh?user=" .. user)
      assert.equal(429, again.status)
      assert.equal("1", again.headers["retry-after"])
      assert.equal(200, get(a, "/refresh?user=" .. user .. "x").status)
      ngx.sleep(1.05)
      assert.equal(200, get(b, "/refresh?user=" .. user).status)
    end)
  end)

  describe("mutex", function()
    it("runs requests with the same key one at a time, each waiting for the previous", function()
      local key = h.unique("mutex")
      local res = h.parallel(4, function(i)
        return get(i % 2 == 0 and a or b, "/jobs?job=" .. key .. "&ms=200&key=" .. key)
      end)
      for _, r in ipairs(res) do assert.equal(200, r.status) end
      local hits, max = backend_stats(key)
      assert.equal(4, hits)
      assert.equal(1, max)
    end)

    it("keeps a lock past its ttl while the request runs, releases it at the end", function()
      local key = h.unique("mutex")
      local t0 = now()
      local first = ngx.thread.spawn(get, a, "/jobs?job=" .. key .. "&ms=4000&key=" .. key)
      ngx.sleep(3.5)   -- the 3000 ms ttl is over: only renewal keeps the lock
      local second = get(b, "/jobs?job=" .. key .. "&ms=10&key=" .. key)
      local took = now() - t0
      assert.equal(200, second.status)
      assert.is_true(took >= 4.0, "second got in at " .. took)
      local _, r1 = ngx.thread.wait(first)
      assert.equal(200, r1.status)
      local _, max = backend_stats(key)
      assert.equal(1, max)
    end)

    it("meters a request that waited and got the lock as one acquire, not as a busy one too", function()
      local function reading(outcome)
        local m = get(a, "/dlock/metrics").body
        return tonumber(m:match('dlock_acquires_total{factory="jobs",outcome="' .. outcome .. '"} (%d+)')) or 0
      end
      local key = h.unique("mutex")
      local first = ngx.thread.spawn(get, a, "/jobs?job=" .. key .. "&ms=900&key=" .. key)
      ngx.sleep(0.5)   -- the first's acquisition is in the dict by now (added every 0.25 s)
      local busy, acquired = reading("busy"), reading("acquired")
      local second = get(a, "/jobs?job=" .. key .. "&ms=10&key=" .. key)
      local _, r1 = ngx.thread.wait(first)
      assert.same({ 200, 200 }, { r1.status, second.status })
      -- The worker adds its counts to the dict every 0.25 s.
      assert.is_true(h.eventually(2, function() return reading("acquired") - acquired >= 1 end))
      ngx.sleep(0.3)
      -- Its first try met the key held and it waited (wait = 2000): one acquisition, no refusal, as
      -- locks:acquire(key, { wait = 2000 }) meters it.
      assert.equal(0, reading("busy") - busy)
      assert.equal(1, reading("acquired") - acquired)
    end)
  end)

  describe("when Redis dies", function()
    it("follows on_error, opens the breaker, and closes it once Redis is back", function()
      local before = status(a).guards
      redis.stop()
      -- refresh: on_error = "allow" (fail open)
      assert.equal(200, get(a, "/refresh?user=" .. h.unique("u")).status)
      -- jobs: on_error = "deny" (fail closed), breaker after 2 failures, 1000 ms cool-down
      for _ = 1, 4 do
        assert.equal(503, get(a, "/jobs?job=" .. h.unique("j")).status)
      end
      local during = status(a).guards
      assert.equal("open", during.jobs.breaker)
      assert.is_true(during.jobs.short_circuited - before.jobs.short_circuited >= 1)
      assert.equal(1, during.jobs.breaker_opened - before.jobs.breaker_opened)
      assert.is_true(during.refresh.failed_open - before.refresh.failed_open >= 1)
      -- While open, Redis is not even tried: the 503 comes from the breaker.
      local sc = status(a).guards.jobs.short_circuited
      assert.equal(503, get(a, "/jobs?job=x").status)
      assert.equal(sc + 1, status(a).guards.jobs.short_circuited)

      redis = h.start_redis(redis.port)
      ngx.sleep(1.1)
      local key = h.unique("back")
      assert.equal(200, get(a, "/jobs?job=" .. key .. "&key=" .. key).status)
      assert.equal("closed", status(a).guards.jobs.breaker)
      -- Nothing stuck: the same keys work on both gateways at once.
      assert.equal(200, get(b, "/jobs?job=" .. key .. "&key=" .. key).status)
      assert.equal(200, get(b, "/refresh?user=" .. h.unique("u")).status)
    end)

    it("under 12 requests in flight, logs one line per worker for the renewals and one for the releases it " ..
       "could not send, and counts every one", function()
      local log_before = #a.error_log()
      local before = status(a).guards.reports
      local threads = {}
      for i = 1, 12 do
        -- ttl 3000: renewed about every second while the backend takes 2.5 s.
        threads[i] = ngx.thread.spawn(get, a, "/reports?ms=2500&user=" .. h.unique("out"))
      end
      assert.is_true(h.eventually(2, function() return status(a).guards.reports.in_flight == 12 end))
      redis.stop()
      local restarted = false
      finally(function() if not restarted then redis = h.start_redis(redis.port) end end)
      for i = 1, 12 do
        local ok, res = ngx.thread.wait(threads[i])
        assert.is_true(ok)
        assert.equal(200, res.status)
      end
      -- Each request's two renewals and its release failed: about 36 failures, every one counted.
      assert.is_true(h.eventually(3, function()
        return status(a).guards.reports.redis_errors - before.redis_errors >= 36
      end), "redis_errors went from " .. before.redis_errors .. " to " .. status(a).guards.reports.redis_errors)
      -- The count comes first (a failed post), the line when the release queue's own try failed too.
      local log
      h.eventually(3, function()
        log = a.error_log():sub(log_before + 1)
        return log:find("releasing 1 lease(s) failed", 1, true) ~= nil
      end)
      local function per_worker(what)
        local seen, total = {}, 0
        for pid, rest in log:gmatch("%[warn%] (%d+)#%d+: ([^\n]*dlock: guard reports: " .. what .. "[^\n]*)") do
          assert.not_matches("more like it", rest, 1, true)
          seen[pid] = (seen[pid] or 0) + 1
          total = total + 1
        end
        for pid, n in pairs(seen) do assert.equal(1, n, "worker " .. pid .. " logged " .. n .. " lines " .. what) end
        return total
      end
      -- (The reason is Redis' refusal, unless a connection it closed as it stopped is what a call met.)
      local renewing = per_worker("renewing %x+: redis 127%.0%.0%.1:%d+: ")
      local releasing = per_worker("releasing 1 lease%(s%) failed %(retried until Redis answers or the lease expires%): " ..
        "redis 127%.0%.0%.1:%d+: ")
      assert.is_true(renewing >= 1 and renewing <= 2, renewing .. " lines about renewals")
      assert.is_true(releasing >= 1 and releasing <= 2, releasing .. " lines about releases")

      redis, restarted = h.start_redis(redis.port), true
      ngx.sleep(0.2)   -- the refusal remembered for 100 ms is over
      assert.equal(200, get(a, "/reports?user=" .. h.unique("back")).status)
    end)
  end)

  describe("status and metrics", function()
    it("report the numbers the requests produced, and the leases held now", function()
      local before = status(a).guards.orders
      local key = h.unique("stat")
      local slow = ngx.thread.spawn(get, a, "/orders?ms=600&key=" .. key, { headers = { ["Idempotency-Key"] = key } })
      ngx.sleep(0.2)
      for _ = 1, 4 do
        assert.equal(409, get(a, "/orders", { headers = { ["Idempotency-Key"] = key } }).status)
      end
      local s = status(a)
      assert.equal(before.acquired + 1, s.guards.orders.acquired)
      assert.equal(before.rejected + 4, s.guards.orders.rejected)
      assert.equal("dedup", s.guards.orders.mode)
      assert.equal("closed", s.guards.orders.breaker)
      -- The request's lease is listed (under the hashed key), without its token.
      local hashed = require("resty.dlock.core.token").hex(ngx.sha1_bin(key))
      local mine = {}
      for _, l in ipairs(s.held) do
        assert.is_nil(l.token)
        assert.equal("dlock", l.dict)
        if l.key == hashed then mine[#mine + 1] = l end
      end
      assert.equal(1, #mine)
      assert.is_true(mine[1].ttl > 0 and mine[1].ttl <= 3000, "ttl " .. mine[1].ttl)
      assert.equal(1, s.guards.orders.in_flight)
      local metrics = get(a, "/dlock/metrics").body
      local m = tonumber(metrics:match('dlock_guard_events_total{guard="orders",mode="dedup",event="rejected"} (%d+)'))
      assert.equal(s.guards.orders.rejected, m)
      assert.matches('dlock_guard_breaker_open{guard="jobs"} 0', metrics, 1, true)
      assert.matches('dlock_guard_in_flight{guard="orders"} 1\n', metrics, 1, true)
      ngx.thread.wait(slow)
    end)
  end)
end)

h.check_error_logs({
  "dlock: guard %w+: lease on %x+ lost while its request is in flight",  -- the key deleted under a request
  -- Guards in front of a Redis that is down, on purpose (on_error, the breaker):
  "connect%(%) failed %(111: Connection refused%)",
  -- ... and a connection that was open to it when it stopped (a release on its way):
  "recv%(%) failed %(104: Connection reset by peer%), context: ngx%.timer",
  "dlock: guard %w+: redis 127%.0%.0%.1:%d+: connection refused",
  "dlock: guard %w+: Redis keeps failing, not calling it for %d+ ms",
})
