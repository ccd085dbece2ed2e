-- Redis far away: production sometimes puts the lock Redis 5 to 50 ms away
-- (another zone or region), with jitter. A latency proxy of this spec's (a
-- python3 TCP proxy, started as a process) sits between nginx and a real
-- redis-server and delivers every chunk, each way, D ms after it was read
-- (plus 0 to J ms of jitter, the order kept): a round trip of 2D to 2(D + J).
-- The Lua API runs in the runner's worker; the guards in an nginx of two
-- workers (nginx/spec-far-redis.conf, the README's gateway timeouts) in front of
-- another nginx (nginx/spec-operator-backend.conf). Real nginx, real
-- redis-server, real HTTP.
local h = require "helpers"
local dlock = require "resty.dlock"

local PROXY = [[
import asyncio, random, sys, time, os, signal
listen_port, target_port, delay, jitter = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
async def pump(reader, writer):
    q = asyncio.Queue()
    async def feed():
        last = 0.0
        while True:
            try:
                data = await reader.read(65536)
            except Exception:
                data = b""
            t = max(last, time.monotonic() + (delay + random.random() * jitter) / 1000.0)
            last = t
            await q.put((t, data))
            if not data:
                return
    async def drain():
        while True:
            t, data = await q.get()
            w = t - time.monotonic()
            if w > 0:
                await asyncio.sleep(w)
            if not data:
                try:
                    writer.close()
                except Exception:
                    pass
                return
            try:
                writer.write(data)
                await writer.drain()
            except Exception:
                return
    await asyncio.gather(feed(), drain())
async def handle(cr, cw):
    try:
        sr, sw = await asyncio.open_connection("127.0.0.1", target_port)
    except Exception:
        cw.close()
        return
    await asyncio.gather(pump(cr, sw), pump(sr, cw), return_exceptions=True)
async def main():
    srv = await asyncio.start_server(handle, "127.0.0.1", listen_port)
    with open(sys.argv[5], "w") as f:
        f.write(str(os.getpid()))
    async with srv:
        await srv.serve_forever()
asyncio.run(main())
]]

local script = h.env.prefix .. "/far-proxy.py"
do
  local f = assert(io.open(script, "w"))
  f:write(PROXY)
  f:close()
end

--- A latency proxy to `target` (the runner's Redis unless told): D ms each way, plus 0..J ms.
local function proxy(d, j, target)
  local port = h.free_port()
  local pidf = h.env.prefix .. "/far-proxy-" .. port .. ".pid"
  assert(h.sh(string.format("/usr/bin/python3 %s %d %d %s %s %s > %s.log 2>&1 &", script, port, target or h.env.redis_port,
    d, j or 0, pidf, pidf)))
  local pid
  for _ = 1, 100 do
    pid = tonumber(h.read_file(pidf) or "")
    if pid then break end
    ngx.sleep(0.05)
  end
  assert(pid, "the latency proxy did not start: " .. tostring(h.read_file(pidf .. ".log")))
  h.track(pid)
  return { port = port, pid = pid, stop = function() h.stop_pid(pid, "TERM") end }
end

--- A round trip through p, in ms (a PING on a socket of our own).
local function rtt(p)
  local sock = ngx.socket.tcp()
  assert(sock:connect("127.0.0.1", p.port))
  local t0 = h.now()
  assert(sock:send("PING\r\n"))
  assert(sock:receive("*l"))
  local ms = (h.now() - t0) * 1000
  sock:close()
  return ms
end

local function factory(p, extra)
  local o = { dict = "dlock", prefix = h.unique("far") .. ":", redis = { host = "127.0.0.1", port = p.port } }
  for k, v in pairs(extra or {}) do o[k] = v end
  return assert(dlock.new(o))
end

describe("the Lua API with Redis 40 ms away (20 ms each way)", function()
  local p
  setup(function() p = proxy(20, 0) end)
  teardown(function() p.stop() end)

  it("the proxy adds the round trip it is told to (about 40 ms)", function()
    local ms = rtt(p)
    assert.is_true(ms >= 38 and ms < 150, "a PING took " .. ms .. " ms")
  end)

  -- The lease's validity counts from when the acquire was sent (lease.ts make):
  -- a lease whose ttl was spent on the way is no lease to act on. Redlock
  -- refuses such an acquire (redis/majority.ts: elapsed + drift < ttl).
  it("never hands out a lease that is already invalid when acquire returns it (ttl 30 ms, round trip 40 ms)", function()
    local locks = factory(p)
    local bad = {}
    for i = 1, 5 do
      local key = "short-" .. i
      local l, err = locks:acquire(key, { ttl = 30 })
      if l ~= nil and not l:valid() then bad[#bad + 1] = key end
      if l == nil then assert.is_string(err) end
    end
    assert.same({}, bad, #bad .. " of 5 acquires returned a lease whose valid() was already false")
  end)

  -- The first acquire through an endpoint also sets the connection up (the
  -- eviction check, INFO) and, on a Redis that never ran the script, meets
  -- NOSCRIPT and sends it with EVAL: three round trips, all counted against the ttl.
  it("never hands out a lease that is already invalid: the first acquire on a fresh Redis, ttl 100 ms", function()
    local fresh = h.start_redis()
    local fp = proxy(20, 0, fresh.port)
    local locks = factory(fp)
    local took, l, err = h.took(locks.acquire, locks, "cold", { ttl = 100 })
    local valid = l ~= nil and l:valid()
    local pttl = h.cmd(fresh.port, "PTTL", locks.prefix .. "cold")
    if l then l:release() end
    fp.stop()
    fresh.stop()
    assert.is_truthy(l == nil or valid, string.format("acquire returned a lease after %.0f ms whose valid() is false " ..
      "(Redis still holds the key for %s ms)", took * 1000, tostring(pttl)))
    if l == nil then assert.is_string(err) end
  end)

  it("hands out a lease with ttl 100 ms that is valid when acquire returns, and that Redis holds", function()
    local locks = factory(p)
    local l = assert(locks:acquire("k100", { ttl = 100 }))
    assert.is_true(l:valid())
    local b, err = locks:acquire("k100", { ttl = 100 })
    assert.is_nil(b)
    assert.equal("busy", err)
  end)

  -- README, Watchdog: "extends every renewed lease a third of its ttl after its
  -- last renewal"; lease:valid(): "false ... when its ttl has run out by the
  -- local clock since the acquire or the last extend Redis confirmed".
  it("keeps a renewed lease (renew = true, ttl 100 ms) valid without a gap while Redis answers every renewal", function()
    local locks = factory(p)
    -- The scripts known to Redis already: only the round trip is in the way.
    local w = assert(locks:acquire("warm", { ttl = 1000 }))
    assert.is_true(w:extend(1000))
    assert.is_true(w:release())
    local lost = {}
    local l = assert(locks:acquire("wd", { ttl = 100, renew = true, on_lost = function(_, why) lost[#lost + 1] = why end }))
    local samples, invalid, first = 0, 0, nil
    local t0 = h.now()
    while h.now() - t0 < 1.5 do
      samples = samples + 1
      if not l:valid() then
        invalid = invalid + 1
        first = first or string.format("%.0f ms in", (h.now() - t0) * 1000)
      end
      ngx.sleep(0.005)
    end
    -- Redis held it all along: nobody else gets it.
    local other, oerr = locks:acquire("wd", { ttl = 100 })
    assert.is_nil(other, "someone else took the renewed key")
    assert.equal("busy", oerr)
    assert.is_true(l:release())
    assert.same({}, lost)
    assert.equal(0, invalid, invalid .. " of " .. samples .. " looks (5 ms apart) found valid() false, first " .. tostring(first))
  end)

  it("never loses a renewed lease (renew = true, ttl 100 ms) while Redis answers every renewal, 50 to 70 ms away", function()
    local fp = proxy(25, 10)
    local locks = factory(fp)
    -- The scripts known to Redis already: only the round trip is in the way.
    local w = assert(locks:acquire("warm", { ttl = 1000 }))
    assert.is_true(w:extend(1000))
    assert.is_true(w:release())
    local lost = {}
    local l = assert(locks:acquire("wd70", { ttl = 100, renew = true, on_lost = function(_, why) lost[#lost + 1] = why end }))
    local taken = 0
    local t0 = h.now()
    while h.now() - t0 < 2 do
      ngx.sleep(0.05)
      if h.cmd(h.env.redis_port, "GET", locks.prefix .. "wd70") ~= l.token then taken = taken + 1 end
    end
    l:release()
    fp.stop()
    assert.same({}, lost)
    assert.equal(0, taken, "the key was gone or someone else's at " .. taken .. " of 40 looks")
  end)

  it("answers a release that arrives after the lease ran out not_owner, and frees nothing of another holder's", function()
    local locks = factory(p)
    local l = assert(locks:acquire("late", { ttl = 60 }))
    ngx.sleep(0.08)
    local other = assert(locks:acquire("late", { ttl = 5000 }))
    local ok, err = l:release()
    assert.is_nil(ok)
    assert.equal("not_owner", err)
    assert.is_true(other:valid())
    local again, aerr = locks:acquire("late", { ttl = 100 })
    assert.is_nil(again)
    assert.equal("busy", aerr)
    assert.is_true(other:release())
  end)

  it("extend() of a lease with ttl 100 ms keeps it valid for its new ttl from when the extend was sent", function()
    local locks = factory(p)
    local l = assert(locks:acquire("ext", { ttl = 100 }))
    ngx.sleep(0.03)
    assert.is_true(l:extend(300))
    ngx.sleep(0.15)
    assert.is_true(l:valid())
    local b, err = locks:acquire("ext", { ttl = 100 })
    assert.is_nil(b)
    assert.equal("busy", err)
    assert.is_true(l:release())
  end)

  it("a waiter (wait 2000 ms) gets the key soon after its holder releases it", function()
    local locks = factory(p)
    local l = assert(locks:acquire("line", { ttl = 5000 }))
    local waiter = h.spawn(function()
      return h.took(locks.acquire, locks, "line", { ttl = 5000, wait = 2000 })
    end)
    ngx.sleep(0.3)
    assert.is_true(l:release())
    local took, w, err = waiter()
    assert.is_truthy(w, err)
    assert.is_true(took < 0.3 + 0.4, "the waiter took " .. took .. " s")
    assert.is_true(w:release())
  end)

  it("with() runs its function under the lock and releases it", function()
    local locks = factory(p)
    local r, err = locks:with("w", { ttl = 1000 }, function() return "done" end)
    assert.equal("done", r, err)
    local l = assert(locks:acquire("w", { ttl = 1000 }))
    assert.is_true(l:release())
  end)
end)

describe("guards with a fresh Redis about 40 to 60 ms away (20 ms each way, 10 ms jitter), two workers", function()
  local p, app, n, fresh
  setup(function()
    -- A Redis and an nginx both just started (a new Redis, or one restarted: its script cache is empty).
    fresh = h.start_redis()
    p = proxy(20, 10, fresh.port)
    app = h.start_nginx("spec-operator-backend.conf")
    n = h.start_nginx("spec-far-redis.conf", { REDIS_PORT = p.port, APP_PORT = app.port, WORKERS = 2, SHORT_TTL = 150 })
  end)
  teardown(function()
    if n then n.stop() end
    if app then app.stop() end
    if p then p.stop() end
    if fresh then fresh.stop() end
  end)

  it("keep a short lease (ttl 150 ms) through a 900 ms request by renewing it: a request beside it is refused all along", function()
    local key = h.unique("short")
    local done = false
    local first = h.spawn(function()
      local res = h.http(n.port, "/short?key=" .. key .. "&ms=900")
      done = true
      return res
    end)
    local statuses = {}
    ngx.sleep(0.1)
    for _ = 1, 8 do
      local status = assert(h.http(n.port, "/short?key=" .. key)).status
      -- Only answers given while the first request still ran count: after it, the key is free.
      if done then break end
      statuses[#statuses + 1] = status
      ngx.sleep(0.08)
    end
    assert.equal(200, assert(first()).status)
    local _, most = h.backend_stats(app.port, key)
    assert.equal(1, most, "statuses beside it: " .. table.concat(statuses, " "))
    assert.is_true(#statuses >= 3, "only " .. #statuses .. " requests beside it")
    for _, s in ipairs(statuses) do assert.equal(503, s) end
    assert.equal(0, h.guard_row(n.port, "short").lost)
  end)

  -- README, "A client's next request": a guard that would refuse at once while
  -- the key's release is marked on its way waits for it and tries again
  -- (gateway/onway.ts). At this distance a request takes about one round trip,
  -- so the previous request's release is answered just after this one's
  -- release left; jitter lets the next request's try reach Redis first.
  it("never refuse a client's requests sent one after another (mutex, concurrency, dedup with wait = 0; 60 each)", function()
    local total, report = h.one_after_another(n.port, { "/jobs", "/cap", "/dd" }, 60)
    assert.equal(0, total, report)
  end)

  it("refuse a second request beside one in flight (mutex wait = 0: 503; concurrency of one: 429; dedup: 409)", function()
    for loc, status in pairs({ jobs = 503, cap = 429, dd = 409 }) do
      local key = h.unique("beside-" .. loc)
      local first = h.spawn(h.http, n.port, "/" .. loc .. "?key=" .. key .. "&ms=600")
      ngx.sleep(0.25)
      local res = assert(h.http(n.port, "/" .. loc .. "?key=" .. key))
      assert.equal(status, res.status, loc)
      assert.equal(200, assert(first()).status)
      local hits, most = h.backend_stats(app.port, key)
      assert.same({ 1, 1 }, { hits, most }, loc)
    end
  end)

  it("let waiters through one at a time (mutex wait 3000: 4 requests of 150 ms all 200, never two inside)", function()
    local key = h.unique("mw")
    local res = h.parallel(4, function() return h.http(n.port, "/jobsw?key=" .. key .. "&ms=150") end)
    for _, r in ipairs(res) do assert.equal(200, assert(r).status) end
    local hits, most = h.backend_stats(app.port, key)
    assert.same({ 4, 1 }, { hits, most })
  end)

  it("let waiters through two at a time (concurrency of 2, wait 3000: 6 requests of 150 ms all 200, never three inside)", function()
    local key = h.unique("cw")
    local res = h.parallel(6, function() return h.http(n.port, "/capw?key=" .. key .. "&ms=150") end)
    for _, r in ipairs(res) do assert.equal(200, assert(r).status) end
    local hits, most = h.backend_stats(app.port, key)
    assert.equal(6, hits)
    assert.is_true(most <= 2, most .. " inside at once")
  end)

  it("throttle one request per key per ttl (1000 ms)", function()
    local key = h.unique("thr")
    local a = assert(h.http(n.port, "/thr?key=" .. key)).status
    local b = assert(h.http(n.port, "/thr?key=" .. key)).status
    ngx.sleep(1.2)
    local c = assert(h.http(n.port, "/thr?key=" .. key)).status
    assert.same({ 200, 429, 200 }, { a, b, c })
  end)

  it("admit at most burst + rate * elapsed of a rate limit (10/s, burst 5) over 2 s of requests 20 ms apart", function()
    local key = h.unique("rate")
    local admitted, refused, other = 0, 0, {}
    local t0 = h.now()
    while h.now() - t0 < 2 do
      local s = assert(h.http(n.port, "/rate?key=" .. key)).status
      if s == 200 then admitted = admitted + 1 elseif s == 429 then refused = refused + 1 else other[#other + 1] = s end
      ngx.sleep(0.02)
    end
    local elapsed = h.now() - t0
    assert.same({}, other)
    -- README: at most burst + rate * (e + 1) / period (e in ms of Redis' clock).
    local bound = 5 + 10 * (elapsed * 1000 + 1) / 1000
    assert.is_true(admitted <= bound, admitted .. " admitted in " .. elapsed .. " s, bound " .. bound)
    assert.is_true(admitted >= 5 + 10 * (elapsed - 0.3), admitted .. " admitted in " .. elapsed .. " s: too few")
  end)

  it("replay an idempotent POST's response to its retries, and run it once", function()
    local key = h.unique("idem")
    local hdr = { ["Idempotency-Key"] = key }
    local first = assert(h.http(n.port, "/idem?key=" .. key .. "&ms=100", { method = "POST", headers = hdr, body = "{}" }))
    assert.equal(200, first.status)
    for _ = 1, 5 do
      local r = assert(h.http(n.port, "/idem?key=" .. key .. "&ms=100", { method = "POST", headers = hdr, body = "{}" }))
      assert.equal(200, r.status)
      assert.equal("true", r.headers["idempotent-replayed"])
      assert.equal(first.body, r.body)
    end
    -- Duplicates while it runs wait for its answer (wait 1000 ms by default).
    local k2 = h.unique("idem2")
    local h2 = { ["Idempotency-Key"] = k2 }
    local res = h.parallel(4, function()
      return h.http(n.port, "/idem?key=" .. k2 .. "&ms=300", { method = "POST", headers = h2, body = "{}" })
    end)
    for _, r in ipairs(res) do assert.equal(200, assert(r).status) end
    assert.equal(1, (h.backend_stats(app.port, key)))
    assert.equal(1, (h.backend_stats(app.port, k2)))
  end)

  -- (A lease lost to late renewals is the short-lease test's, not counted here.)
  it("never open a circuit breaker, time out or fail a call under mere latency", function()
    local res = assert(h.http(n.port, "/dlock/status"))
    local st = assert(require("cjson.safe").decode(res.body), res.body)
    local bad = {}
    for name, row in pairs(st.guards) do
      for _, f in ipairs({ "short_circuited", "redis_errors", "failed_closed", "failed_open", "breaker_opened", "timed_out", "key_errors" }) do
        if (tonumber(row[f]) or 0) > 0 then bad[#bad + 1] = name .. "." .. f .. "=" .. tostring(row[f]) end
      end
    end
    table.sort(bad)
    assert.same({}, bad)
  end)
end)

describe("guards with Redis 150 to 170 ms away (75 ms each way, 10 ms jitter: beyond the 100 ms a refusal waits for a release on its way), two workers", function()
  local p, app, n
  setup(function()
    p = proxy(75, 10)
    app = h.start_nginx("spec-operator-backend.conf")
    n = h.start_nginx("spec-far-redis.conf", { REDIS_PORT = p.port, APP_PORT = app.port, WORKERS = 2, SHORT_TTL = 1000 })
  end)
  teardown(function()
    if n then n.stop() end
    if app then app.stop() end
    if p then p.stop() end
  end)

  it("never refuse a client's requests sent one after another (dedup and mutex with wait = 0; 25 each)", function()
    local total, report = h.one_after_another(n.port, { "/dd", "/jobs" }, 25)
    assert.equal(0, total, report)
  end)

  it("still refuse at once beside a request in flight, and never fail a call (README timeouts: read 500 ms)", function()
    local key = h.unique("far-beside")
    local first = h.spawn(h.http, n.port, "/jobs?key=" .. key .. "&ms=800")
    ngx.sleep(0.4)
    local res = assert(h.http(n.port, "/jobs?key=" .. key))
    assert.equal(503, res.status)
    assert.equal(200, assert(first()).status)
    local row = h.guard_row(n.port, "jobs")
    assert.same({ 0, 0, 0 }, { row.redis_errors, row.failed_closed, row.breaker_opened })
  end)
end)

h.check_error_logs({})
