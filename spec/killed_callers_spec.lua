-- Per-worker state set before a yield and put back after it: a coroutine
-- dropped at that yield (ngx.thread.kill of a thread blocked on a paused Redis;
-- a request nginx ends when its client leaves, with lua_check_client_abort on)
-- never runs the line that puts it back. Each test kills at the yield, lets
-- Redis be healthy again, and shows that later calls of the same worker work,
-- seconds later (core/question.ts, the eviction check's and the idempotency
-- watch's bounds). Real nginx (nginx/spec-killed-callers.conf), real Redis.
local h = require "helpers"
local status = require "resty.dlock.status"

local function since(t0)
  ngx.update_time()
  return ngx.now() - t0
end

--- Run fn in a light thread, let it reach its yield, kill it there; true when it was still running.
local function kill_after(seconds, fn)
  local th = ngx.thread.spawn(fn)
  ngx.sleep(seconds)
  local killed = ngx.thread.kill(th)
  return killed == 1 or killed == true
end

describe("a coroutine killed at a yield (this worker)", function()
  it("eviction check: a first connection whose coroutine was killed during INFO memory does not keep this worker from checking that Redis",
    function()
      local r = h.start_redis(nil, "--maxmemory 10mb --maxmemory-policy allkeys-lru")
      finally(function() r.signal("CONT"); r.stop() end)
      local locks = h.locks({ redis = { port = r.port, connect_timeout = 500, read_timeout = 500 } })
      r.signal("STOP")
      -- The acquire's first (fresh) connection: connect (the kernel accepts), then INFO memory, unanswered.
      assert.is_true(kill_after(0.3, function() return locks:acquire("a") end), "the acquire was not blocked")
      r.signal("CONT")
      -- The killed check counts as on its way as long as its INFO and CONFIG GET could take, and a second.
      ngx.sleep(2.2)
      -- Redis healthy again: many fresh connections later (a pool of 1, no auto-pipelining, 20 at once).
      local again = h.locks({ redis = { port = r.port, connect_timeout = 500, read_timeout = 500, pool_size = 1,
        auto_pipeline = false } })
      for round = 1, 3 do
        h.parallel(20, function(i)
          local lease = assert(again:acquire("k" .. round .. ":" .. i))
          assert(lease:release())
          return true
        end)
      end
      local s = assert(status.report({ limit = 0 })).redis["127.0.0.1:" .. r.port]
      assert.is_table(s, "no eviction finding for 127.0.0.1:" .. r.port ..
        " in /dlock/status after 60 fresh connections: this worker never checked it")
      assert.is_true(s.can_evict_locks)
    end)

  it("cluster slot map: a read of the map whose coroutine was killed does not stop this worker from reading it ever again " ..
     "(the first seed dies: keys on the live masters still work)", function()
    local c = h.start_cluster()
    finally(function() c.stop() end)
    local locks = c.locks("hk")
    local seed_port = tonumber(c.seeds[1]:match(":(%d+)$"))
    local seed
    for _, n in ipairs(c.nodes) do if n.port == seed_port then seed = n end end
    seed.signal("STOP")
    -- A fresh worker's first call reads the map (CLUSTER SLOTS) from the first seed, which does not answer.
    local killed = kill_after(0.3, function() return locks:acquire("first", { wait = 0 }) end)
    seed.signal("CONT")
    assert.is_true(killed, "the acquire was not blocked")
    ngx.sleep(1)
    -- Healthy: this works (through MOVED from the seed).
    assert(assert(locks:acquire("warm", { wait = 0 })):release())
    -- The first seed dies; the second seed and the other masters are fine.
    c.kill(seed)
    local keys = {}
    for i = 1, 200 do
      local k = "after" .. i
      local owner = c.slot_owner(locks.prefix .. k)
      if owner ~= seed_port then keys[#keys + 1] = k end
      if #keys == 5 then break end
    end
    ngx.sleep(0.5)
    local failed, last = 0, nil
    local t0 = h.now()
    for _, k in ipairs(keys) do
      local lease, err
      -- Up to 3 s each: a map read from the second seed takes one round trip.
      for _ = 1, 30 do
        lease, err = locks:acquire(k, { wait = 0 })
        if lease then break end
        ngx.sleep(0.1)
      end
      if lease then lease:release() else failed = failed + 1; last = err end
    end
    assert.equal(0, failed, failed .. " of " .. #keys .. " keys on live masters never taken within 3 s each (" ..
      since(t0) .. " s in all), last error: " .. tostring(last))
  end)
end)


-- The idempotency guard's duplicates in one worker (gateway/idempotency/claim.ts, waitFor): a
-- duplicate whose client leaves while it waits for the first request's response.
describe("an idempotency duplicate whose client left while it waited (1 worker, lua_check_client_abort on)", function()
  local r, n, m

  local function start(backend)
    local own = h.free_port()
    return h.start_nginx("spec-killed-callers.conf", { REDIS_PORT = r.port, BACKEND_PORT = backend or own })
  end

  setup(function()
    r = h.start_redis()
    n = start()
  end)
  teardown(function()
    if m then m.stop() end
    if n then n.stop() end
    if r then r.signal("CONT"); r.stop() end
  end)

  local function post(port, key, q, opts)
    opts = opts or {}
    -- One path, query and body for every request of a key (the fingerprint); the backend's time and status in headers.
    return h.http(port, "/idem?key=" .. q, { method = "POST", body = "{}",
      headers = { ["Idempotency-Key"] = key, ["X-Ms"] = opts.ms, ["X-Status"] = opts.status },
      abort_after = opts.abort_after, timeout = 15000 })
  end

  it("a later duplicate of the key, waiting on a new run of it (its record expired), gets that run's response, not the run before",
    function()
      local key = h.unique("stale"):gsub("[^%w]", "-")
      -- Run 1: 1.2 s. A duplicate joins it and its client leaves after 0.3 s.
      local first = h.spawn(post, n.port, key, key, { ms = 1200 })
      ngx.sleep(0.2)
      assert.is_true(assert(post(n.port, key, key, { abort_after = 300 })).aborted)
      local r1 = assert(first())
      assert.equal(201, r1.status)
      assert.matches('"execution":1', r1.body, 1, true)
      -- The record (ttl 1 s) runs out; Redis is healthy all along.
      ngx.sleep(1.5)
      -- Run 2 of the key, and a duplicate of it 0.3 s in.
      local second = h.spawn(post, n.port, key, key, { ms = 1500 })
      ngx.sleep(0.3)
      local t0 = h.now()
      local dup = assert(post(n.port, key, key))
      local took = since(t0)
      local r2 = assert(second())
      assert.matches('"execution":2', r2.body, 1, true)
      assert.equal(r2.body, dup.body, "the duplicate of run 2 got, after " .. string.format("%.3f", took) ..
        " s (run 2 still running), status " .. tostring(dup.status) .. " replayed=" ..
        tostring(dup.headers["idempotent-replayed"]) .. " body " .. dup.body:gsub("\n", ""))
    end)

  it("a duplicate killed while its poll was on its way (Redis paused) leaves later duplicates of the key able to poll: " ..
     "they get the response another nginx stored, not 409 after the whole wait", function()
      m = m or start()
      local key = h.unique("poll"):gsub("[^%w]", "-")
      -- Run 1 on this nginx, 3 s, answers 503 (not stored: the claim is dropped, retries may run it).
      local first = h.spawn(post, n.port, key, key, { ms = 3000, status = 503 })
      ngx.sleep(0.2)
      -- A duplicate polls Redis (every 5..100 ms); Redis stops answering; its client leaves mid-poll.
      local dup = h.spawn(post, n.port, key, key, { abort_after = 900 })
      ngx.sleep(0.5)
      r.signal("STOP")
      ngx.sleep(0.5)
      assert.is_true(dup().aborted)
      ngx.sleep(0.1)
      r.signal("CONT")
      assert.equal(503, assert(first()).status)
      ngx.sleep(1)
      -- Redis healthy. Run 2 of the key on another nginx of the fleet (1.5 s); a duplicate on this one 0.3 s in.
      local second = h.spawn(post, m.port, key, key, { ms = 1500 })
      ngx.sleep(0.3)
      local t0 = h.now()
      local late = assert(post(n.port, key, key))
      local took = since(t0)
      local r2 = assert(second())
      assert.equal(201, r2.status)
      assert.equal(201, late.status, "the duplicate got " .. tostring(late.status) .. " after " ..
        string.format("%.3f", took) .. " s (run 2 was stored after about 1.2 s; the wait is 4 s): " .. late.body:gsub("\n", ""))
      assert.equal(r2.body, late.body)
    end)
end)

h.check_error_logs({
  "can evict lock keys %(maxmemory%-policy [%w-]+, maxmemory %d+%): an evicted lock lets a second holder in",
  "connect%(%) failed %(111: Connection refused%)",  -- the seed killed on purpose
})
