-- The guards keep their promise through everything nginx does to a request:
-- internal redirects, client aborts, reload and quit, slow request bodies.
-- Real nginx (nginx/spec-lifecycle.conf, 2 workers), real HTTP, one Redis, and a
-- backend that counts what reaches it. Leases are 1000 ms, so a request longer
-- than that keeps its key only through renewal.
local h = require "helpers"
local cjson = require "cjson.safe"

local redis
local gw   -- gateway.log() at http level: the recommended form
local op   -- guard:log() in the first location only, nothing in the final one

local function start(vars)
  local own = h.free_port()
  local v = { REDIS_PORT = redis.port, OWN_BACKEND_PORT = own, BACKEND_PORT = own, DEAD_PORT = h.free_port() }
  for k, x in pairs(vars) do v[k] = x end
  local n = h.start_nginx("spec-lifecycle.conf", v)
  n.backend = own
  return n
end

local function get(n, path, opts)
  local res, err = h.http(n.port, path, opts)
  assert(res, err)
  return res
end

local function backend(n, key)
  return h.backend_stats(n.backend, key)
end

local function guard(n, name)
  return assert(cjson.decode(get(n, "/dlock/status").body)).guards[name]
end

local function lock_keys(name)
  return h.cmd(redis.port, "keys", "dlock:gw:" .. name .. ":*")
end

local function now()
  ngx.update_time()
  return ngx.now()
end

--- Seconds until no lock key of guard `name` is left in Redis (nil if some still are after `within` s).
local function released_within(name, within)
  local t0 = now()
  repeat
    if #lock_keys(name) == 0 then return now() - t0 end
    ngx.sleep(0.02)
  until now() - t0 > within
  return nil
end

describe("gateway lifecycle", function()
  setup(function()
    redis = h.start_redis()
    gw = start({ GW_LOG = "", LOC_LOG = "#" })
    op = start({ GW_LOG = "#", LOC_LOG = "" })
  end)

  teardown(function()
    if gw then gw.stop() end
    if op then op.stop() end
    if redis then redis.stop() end
  end)

  local redirects = {
    { path = "/intercept", what = "error_page after the backend's 500 (proxy_intercept_errors)" },
    { path = "/dead", what = "error_page 502 for an upstream that is down" },
    { path = "/accel", what = "X-Accel-Redirect from the backend" },
    -- @app runs the guard's own log(): nothing for the keeper to notice there.
    { path = "/files", what = "try_files to a named location", final_logs = true },
  }

  describe("internal redirects, with gateway.log() at http level", function()
    for _, r in ipairs(redirects) do
      it("releases the lease as soon as the request ends in the other location: " .. r.what, function()
        local before = guard(gw, "jobs")
        local key = h.unique("redir")
        local res = get(gw, r.path .. "?key=" .. key .. "&ms=200")
        assert.equal(200, res.status)
        assert.is_truthy(released_within("jobs", 0.3), "lock still in Redis 300 ms after the response")
        local after = guard(gw, "jobs")
        assert.equal(before.acquired + 1, after.acquired)
        assert.equal(before.unlogged, after.unlogged)
        assert.equal(0, after.in_flight)
        assert.equal(200, get(gw, "/jobs?key=" .. key).status)
      end)
    end

    it("lets a request pass the same guard twice (try_files to a guarded @app) without waiting for itself", function()
      local key = h.unique("twice")
      local res = get(gw, "/files?key=" .. key .. "&ms=50")
      assert.equal(200, res.status)
      assert.equal("served " .. key .. "\n", res.body)
      assert.equal(1, (backend(gw, key)))
    end)

    it("keeps the first guard's lease when the request passes another guard after the redirect (ngx.exec, try_files): " ..
       "never more than permits at the backend", function()
      for _, path in ipairs({ "/exec-two", "/files-two" }) do
        local user = h.unique("user")
        local before = guard(gw, "per_user")
        local first = ngx.thread.spawn(get, gw, path .. "?key=" .. user .. "&file=f1&ms=800")
        ngx.sleep(0.3)
        local second = get(gw, path .. "?key=" .. user .. "&file=f2&ms=100")
        local _, res = ngx.thread.wait(first)
        assert.equal(200, res.status, path)
        assert.equal(429, second.status, path)
        local hits, max = backend(gw, user)
        assert.same({ 1, 1 }, { hits, max }, path)
        local after = guard(gw, "per_user")
        assert.equal(before.unlogged, after.unlogged, path)
        assert.is_truthy(released_within("per_user", 0.3), path)
      end
    end)

    it("renews a lease through a redirect: a 2.5 s request behind try_files keeps its key past the 1 s ttl", function()
      local key = h.unique("long")
      local before = guard(gw, "jobs")
      local slow = ngx.thread.spawn(get, gw, "/files?key=" .. key .. "&ms=2500")
      ngx.sleep(1.6)
      assert.equal(503, get(op, "/jobs?key=" .. key).status)
      local _, res = ngx.thread.wait(slow)
      assert.equal(200, res.status)
      assert.is_truthy(released_within("jobs", 0.3))
      local after = guard(gw, "jobs")
      assert.is_true(after.renewed - before.renewed >= 3, "renewed " .. (after.renewed - before.renewed))
      assert.equal(before.lost, after.lost)
    end)
  end)

  describe("internal redirects, with guard:log() in the first location only", function()
    for _, r in ipairs(redirects) do
      if not r.final_logs then
      it("releases once the keeper sees the request is gone, and counts it unlogged: " .. r.what, function()
        local before = guard(op, "jobs")
        local key = h.unique("unlogged")
        assert.equal(200, get(op, r.path .. "?key=" .. key .. "&ms=100").status)
        -- The keeper looks every ttl/6 (about 170 ms here).
        assert.is_truthy(released_within("jobs", 1.0), "lock still in Redis 1 s after the response")
        local after = guard(op, "jobs")
        assert.equal(before.unlogged + 1, after.unlogged)
        assert.equal(0, after.in_flight)
      end)
      end
    end

    it("releases at once when the final location runs the guard's log() itself (try_files to @app)", function()
      local before = guard(op, "jobs")
      local key = h.unique("applog")
      assert.equal(200, get(op, "/files?key=" .. key .. "&ms=100").status)
      assert.is_truthy(released_within("jobs", 0.15), "lock still in Redis 150 ms after the response")
      assert.equal(before.unlogged, guard(op, "jobs").unlogged)
    end)

    it("says once per guard and worker how to see every request's end", function()
      local log = op.error_log()
      local _, n = log:gsub("guard jobs: a request ended without log%(%)", "")
      assert.is_true(n >= 1 and n <= 2, n .. " lines")
      assert.matches('log_by_lua_block { require("resty.dlock.gateway").log() } at http level', log, 1, true)
    end)
  end)

  describe("client aborts", function()
    it("keep a concurrency permit until its lease runs out: never more than `permits` at the backend", function()
      local key = h.unique("abort")
      local before = guard(gw, "reports")
      -- Three clients give up after 200 ms; their backends go on for 800 ms.
      for _ = 1, 3 do
        ngx.thread.spawn(get, gw, "/reports?key=" .. key .. "&ms=800", { abort_after = 200 })
      end
      ngx.sleep(0.4)
      local res = h.parallel(4, function() return get(gw, "/reports?key=" .. key .. "&ms=10") end)
      for _, r in ipairs(res) do assert.equal(429, r.status) end
      local _, max = backend(gw, key)
      assert.equal(3, max)
      assert.equal(before.aborted + 3, guard(gw, "reports").aborted)
      -- Kept, not renewed: the permits come back when their leases run out.
      ngx.sleep(1.0)
      assert.equal(200, get(gw, "/reports?key=" .. key .. "&ms=10").status)
      local hits, max2, inflight = backend(gw, key)
      assert.equal(4, hits)
      assert.equal(3, max2)
      assert.equal(0, inflight)
    end)

    it("answer a dedup retry of an aborted request with 409 while the backend still runs it", function()
      local key = h.unique("idem")
      local hdr = { ["Idempotency-Key"] = key }
      get(gw, "/orders?key=" .. key .. "&ms=800", { headers = hdr, abort_after = 200 })
      local retry = get(gw, "/orders?key=" .. key .. "&ms=10", { headers = hdr })
      assert.equal(409, retry.status)
      local _, _, inflight = backend(gw, key)
      assert.equal(1, inflight)
      ngx.sleep(1.0)
      assert.equal(200, get(gw, "/orders?key=" .. key .. "&ms=10", { headers = hdr }).status)
      local hits, max = backend(gw, key)
      assert.equal(2, hits)
      assert.equal(1, max)
    end)

    it("do not let a second run of a mutex job start beside the first", function()
      local key = h.unique("job")
      get(op, "/jobs?key=" .. key .. "&ms=800", { abort_after = 200 })
      assert.equal(503, get(gw, "/jobs?key=" .. key .. "&ms=10").status)
      ngx.sleep(1.0)
      assert.equal(200, get(gw, "/jobs?key=" .. key .. "&ms=10").status)
      local hits, max = backend(op, key)
      assert.equal(1, hits)
      assert.equal(1, max)
      assert.equal(1, (backend(gw, key)))
    end)

    it("keep a mutex when the client gives up a download, even one the backend sent whole (nginx cannot tell " ..
       "a whole FastCGI or gRPC response from one cut short)", function()
      local key = h.unique("download")
      local before = guard(gw, "jobs")
      -- 24 MB with its Content-Length, more than the sockets hold: nginx has it all
      -- from the backend and is still passing it on when the client leaves.
      get(gw, "/jobs?key=" .. key .. "&size=25165824", { abort_after = 300 })
      ngx.sleep(0.15)
      assert.equal(503, get(gw, "/jobs?key=" .. key .. "&ms=10").status)
      assert.equal(before.aborted + 1, guard(gw, "jobs").aborted)
      assert.equal(0, select(3, backend(gw, key)))
    end)

    it("keep a mutex when the client leaves in the middle of a response the backend is still sending", function()
      local key = h.unique("stream")
      local before = guard(gw, "jobs")
      get(gw, "/jobs?key=" .. key .. "&size=25165824&pause=800", { abort_after = 300 })
      ngx.sleep(0.15)
      assert.equal(503, get(gw, "/jobs?key=" .. key .. "&ms=10").status)
      assert.equal(before.aborted + 1, guard(gw, "jobs").aborted)
      ngx.sleep(1.5)
      assert.equal(200, get(gw, "/jobs?key=" .. key .. "&ms=10").status)
    end)
  end)

  describe("nginx -s reload and -s quit", function()
    it("go on renewing in the old workers until their last request ends: no duplicate, nothing lost", function()
      local keys, threads = {}, {}
      local before = guard(gw, "orders")
      for i = 1, 4 do
        keys[i] = h.unique("reload")
        threads[i] = ngx.thread.spawn(get, gw, "/orders?key=" .. keys[i] .. "&ms=2500",
          { headers = { ["Idempotency-Key"] = keys[i] } })
      end
      ngx.sleep(0.3)
      local old = gw.workers()
      assert(h.sh(h.env.nginx .. " -p " .. gw.prefix .. " -c " .. gw.prefix .. "/nginx.conf -s reload"))
      ngx.sleep(1.5)   -- past the 1 s ttl: only the old workers' renewals hold the keys
      for i = 1, 4 do
        local retry = get(op, "/orders?key=" .. keys[i] .. "&ms=10", { headers = { ["Idempotency-Key"] = keys[i] } })
        assert.equal(409, retry.status)
      end
      for i = 1, 4 do
        local _, res = ngx.thread.wait(threads[i])
        assert.equal(200, res.status)
        assert.equal(1, (backend(gw, keys[i])))
      end
      assert.is_truthy(released_within("orders", 0.5))
      -- Counters live in the shared dict, which the reload keeps.
      local after = guard(gw, "orders")
      assert.equal(before.lost, after.lost)
      assert.is_true(after.renewed - before.renewed >= 8, "renewed " .. (after.renewed - before.renewed))
      -- With nothing left to renew, the keeper stops and the old workers can exit.
      for _, pid in ipairs(old) do
        for _ = 1, 50 do
          if not h.sh("kill -0 " .. pid .. " 2>/dev/null") then break end
          ngx.sleep(0.05)
        end
        assert.is_false(h.sh("kill -0 " .. pid .. " 2>/dev/null"), "old worker " .. pid .. " still running")
      end
    end)

    it("keep the lease metrics old workers counted just before the reload: they add them to the dict as they exit", function()
      local function factory()
        return assert(cjson.decode(get(gw, "/dlock/status").body)).factories.orders
      end
      local before = factory()
      local old = gw.workers()
      for _ = 1, 6 do
        local key = h.unique("counted")
        assert.equal(200, get(gw, "/orders?key=" .. key .. "&ms=1", { headers = { ["Idempotency-Key"] = key } }).status)
      end
      -- At once: a worker counts in Lua and adds its counts to the dict 0.25 s later, or when it exits.
      assert(h.sh(h.env.nginx .. " -p " .. gw.prefix .. " -c " .. gw.prefix .. "/nginx.conf -s reload"))
      assert(gw.replaced(old, #old))
      local after = factory()
      assert.equal(6, after.acquired - before.acquired)
      assert.equal(before.held, after.held)
    end)

    it("keep the leases of an nginx that quits until its requests are over", function()
      local q = start({ GW_LOG = "", LOC_LOG = "#" })
      local key = h.unique("quit")
      local hdr = { headers = { ["Idempotency-Key"] = key } }
      local slow = ngx.thread.spawn(get, q, "/orders?key=" .. key .. "&ms=2500", hdr)
      ngx.sleep(0.3)
      assert(h.sh("kill -QUIT " .. q.pid))
      ngx.sleep(1.5)
      assert.equal(409, get(op, "/orders?key=" .. key .. "&ms=10", hdr).status)
      local _, res = ngx.thread.wait(slow)
      assert.equal(200, res.status)
      assert.is_truthy(released_within("orders", 0.5))
      assert.equal(200, get(op, "/orders?key=" .. key .. "&ms=10", hdr).status)
      for _ = 1, 50 do
        if not h.sh("kill -0 " .. q.pid .. " 2>/dev/null") then break end
        ngx.sleep(0.1)
      end
      assert.is_false(h.sh("kill -0 " .. q.pid .. " 2>/dev/null"), "the quitting nginx did not exit after its last request")
    end)

    it("let a worker whose calls rode auto-pipelining's batches exit at once on quit: the idle senders do not hold it", function()
      local q = start({ GW_LOG = "", LOC_LOG = "#" })
      local batches = tonumber(get(q, "/burst").body)
      assert.is_true(batches > 0, "the burst sent no batch: nothing here waits as a sender")
      local t0 = now()
      assert(h.sh("kill -QUIT " .. q.pid))
      for _ = 1, 100 do
        if not h.sh("kill -0 " .. q.pid .. " 2>/dev/null") then break end
        ngx.sleep(0.05)
      end
      assert.is_false(h.sh("kill -0 " .. q.pid .. " 2>/dev/null"), "nginx still running 5 s after QUIT, with no request")
      -- A sender looks at the worker every EXIT_CHECK (0.5 s); it waited IDLE (10 s) before.
      assert.is_true(now() - t0 < 2, "nginx took " .. (now() - t0) .. " s to quit")
    end)
  end)

  describe("Redis trouble", function()
    it("retries a release that failed during a short Redis outage, long before the lease would expire", function()
      local key = h.unique("outage")
      local before = guard(gw, "long")
      local req = ngx.thread.spawn(get, gw, "/long?key=" .. key .. "&ms=600")
      ngx.sleep(0.3)
      redis.signal("STOP")   -- the request ends, and its release times out, while Redis is paused
      ngx.sleep(1.0)
      redis.signal("CONT")
      local _, res = ngx.thread.wait(req)
      assert.equal(200, res.status)
      local took = released_within("long", 2.0)
      assert.is_truthy(took, "the 10 s lease was not released after Redis came back")
      assert.is_true(guard(gw, "long").redis_errors > before.redis_errors)
    end)

    it("renews the leases of many in-flight requests in one round trip per round, not one each", function()
      local function reads()
        return tonumber(h.cmd(redis.port, "info", "stats"):match("total_reads_processed:(%d+)"))
      end
      local threads = {}
      for i = 1, 12 do
        threads[i] = ngx.thread.spawn(get, gw, "/jobs?key=" .. h.unique("many") .. "&ms=2000")
      end
      ngx.sleep(0.2)   -- all acquired; from here on only renewals reach Redis
      local renewed0, reads0 = guard(gw, "jobs").renewed, reads()
      ngx.sleep(1.2)
      local renewed, read = guard(gw, "jobs").renewed - renewed0, reads() - reads0 - 1
      for i = 1, 12 do ngx.thread.wait(threads[i]) end
      assert.is_true(renewed >= 24, renewed .. " renewals")
      -- A keeper round sends one pipeline per worker: a handful of reads for all the renewals.
      assert.is_true(read * 3 <= renewed, read .. " reads for " .. renewed .. " renewals")
    end)

    it("logs a guard's Redis failure with one dlock: prefix", function()
      assert.equal(200, get(gw, "/down?key=" .. h.unique("down")).status)
      local log = gw.error_log()
      assert.matches("dlock: guard down: redis 127.0.0.1:%d+: ", log)
      assert.is_nil(log:find("dlock: guard down: dlock:", 1, true))
    end)
  end)

  describe("slow request bodies", function()
    --- POST with a body trickled in over `secs` seconds; returns the response status.
    local function slow_post(n, path, secs)
      local sock = ngx.socket.tcp()
      sock:settimeout(10000)
      assert(sock:connect("127.0.0.1", n.port))
      assert(sock:send("POST " .. path .. " HTTP/1.0\r\nHost: x\r\nContent-Length: 10\r\n\r\n"))
      for _ = 1, 10 do
        ngx.sleep(secs / 10)
        assert(sock:send("x"))
      end
      local line = sock:receive("*l")
      sock:close()
      return tonumber(line:match("^HTTP/%d%.%d (%d+)"))
    end

    it("with read_body = true, hold no permit while the body comes in", function()
      local key = h.unique("upload")
      local slow = ngx.thread.spawn(slow_post, gw, "/upload?key=" .. key .. "&ms=10", 1.5)
      ngx.sleep(0.2)
      local t0 = now()
      local res = get(gw, "/upload?key=" .. key .. "&ms=10", { method = "POST", headers = { ["Content-Length"] = "0" } })
      assert.equal(200, res.status)
      assert.is_true(now() - t0 < 0.5, "the fast upload waited " .. (now() - t0) .. " s")
      local _, status = ngx.thread.wait(slow)
      assert.equal(200, status)
    end)

    it("without it, take the permit before the body: a slow upload makes the next one wait", function()
      local key = h.unique("early")
      local slow = ngx.thread.spawn(slow_post, gw, "/upload-early?key=" .. key .. "&ms=10", 1.5)
      ngx.sleep(0.2)
      local t0 = now()
      local res = get(gw, "/upload-early?key=" .. key .. "&ms=10", { method = "POST", headers = { ["Content-Length"] = "0" } })
      assert.equal(200, res.status)
      assert.is_true(now() - t0 >= 1.0, "the fast upload did not wait: " .. (now() - t0) .. " s")
      ngx.thread.wait(slow)
    end)
  end)
end)

describe("a release Redis did not confirm, then nginx -s reload", function()
  local redis_up, n
  setup(function()
    redis_up = h.start_redis(nil, "--appendonly yes", "--appendfsync always")
    local own = h.free_port()
    n = h.start_nginx("spec-lifecycle.conf", { REDIS_PORT = redis_up.port, OWN_BACKEND_PORT = own, BACKEND_PORT = own,
      DEAD_PORT = h.free_port(), GW_LOG = "", LOC_LOG = "#" })
  end)
  teardown(function()
    if n then n.stop() end
    if redis_up then redis_up.stop() end
  end)

  it("is retried by the old worker once Redis is back, not left locked for the lease's ttl; then the worker exits", function()
    local function held() return #h.cmd(redis_up.port, "keys", "dlock:gw:long:*") end
    local key = h.unique("reload-orphan")
    local req = ngx.thread.spawn(h.http, n.port, "/long?key=" .. key .. "&ms=700")   -- a 10 s lease
    ngx.sleep(0.3)
    assert.equal(1, held())
    redis_up.stop()   -- saved with its keys (appendonly): the release at the end of the request is refused
    local _, res = ngx.thread.wait(req)
    assert.equal(200, res.status)
    ngx.sleep(0.3)
    local old = n.workers()
    assert(n.reload())
    ngx.sleep(1)
    redis_up = h.start_redis(redis_up.port, "--appendonly yes", "--appendfsync always")
    assert.equal(1, held(), "the key came back with Redis")
    assert.is_true(h.eventually(3, function() ngx.sleep(0.05) return held() == 0 end),
      "still locked 3 s after Redis came back")
    assert.is_true(n.exited(old, 5), "the old workers did not exit once their releases were done")
  end)
end)

h.check_error_logs({
  "connect%(%) failed %(111: Connection refused%) while connecting to upstream",  -- the /dead backend
  -- The release to the stopped Redis, and its retries by the old worker's sweep:
  { "connect%(%) failed %(111: Connection refused%), context: ngx%.timer", max = 40 },
  { "lua tcp socket read timed out", max = 4 },  -- the releases sent to a paused Redis
  -- The guard whose Redis is down, on purpose:
  "connect%(%) failed %(111: Connection refused%), client:",
  "dlock: guard %w+: redis 127%.0%.0%.1:%d+: connection refused",
})
