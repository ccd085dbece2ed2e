-- Guards whose request nginx lets go of while the backend goes on with it: an
-- upstream that timed out (nginx answers 504 and closes its connection), a
-- worker killed with its proxied requests in flight. As after a client's
-- abort, the key is kept until its lease runs out. Real nginx
-- (nginx/spec-backend-goes-on.conf, 2 workers), real Redis, and a backend that
-- counts the requests inside it per key (nginx/backend.conf): the witness.
local h = require "helpers"

local redis

local function start(vars)
  local own = h.free_port()
  local v = { REDIS_PORT = redis.port, OWN_BACKEND_PORT = own, BACKEND_PORT = own, PERMITS = 2, TTL = 5000 }
  for k, x in pairs(vars or {}) do v[k] = x end
  local n = h.start_nginx("spec-backend-goes-on.conf", v)
  n.backend = v.BACKEND_PORT
  return n
end

local function get(n, path, opts)
  local res, err = h.http(n.port, path, opts)
  assert(res, err)
  return res
end

--- The backend's witness for key: hits, most inside at once, inside now.
local function backend(n, key) return h.backend_stats(n.backend, key) end

describe("guards whose backend goes on with a request nginx let go of", function()
  local n

  setup(function()
    redis = h.start_redis()
    n = start()
  end)

  teardown(function()
    if n then n.stop() end
    if redis then redis.stop() end
  end)

  describe("an upstream that times out (proxy_read_timeout 300 ms) while the backend still works", function()
    -- nginx answers 504 and closes its connection to the backend, but the
    -- application behind it goes on (backend.conf's /slow does, as a real one
    -- does): the same situation as a client abort, which keeps the lease.
    it("keeps the concurrency permits of 504s until their leases run out: never more than permits in the backend", function()
      local key = h.unique("to")
      local before = h.guard_row(n.port, "cap").aborted
      -- Two requests fill the two permits (5 s leases); nginx gives up on the backend after 300 ms, the backend works 2 s.
      local a = h.spawn(get, n, "/cap-timeout?key=" .. key .. "&ms=2000")
      local b = h.spawn(get, n, "/cap-timeout?key=" .. key .. "&ms=2000")
      assert.equal(504, a().status)
      assert.equal(504, b().status)
      local _, _, inside = backend(n, key)
      assert.equal(2, inside, "the backend still works on both")
      -- Kept as an abort's: counted so, no longer renewed.
      assert.equal(before + 2, h.guard_row(n.port, "cap").aborted)
      -- Two more while the backend is still busy with the first two.
      local c = h.spawn(get, n, "/cap?key=" .. key .. "&ms=500")
      local d = h.spawn(get, n, "/cap?key=" .. key .. "&ms=500")
      local sc, sd = c().status, d().status
      local _, max = backend(n, key)
      assert.equal(2, max, "most requests inside the backend at once (the later two answered " .. sc .. ", " .. sd .. ")")
      assert.same({ 429, 429 }, { sc, sd })
    end)

    it("keeps the permit when error_page turns the 504 into a page of its own", function()
      local key = h.unique("to-page")
      local a = h.spawn(get, n, "/cap-timeout-page?key=" .. key .. "&ms=2000")
      local b = h.spawn(get, n, "/cap-timeout-page?key=" .. key .. "&ms=2000")
      assert.equal("sorry\n", a().body)
      assert.equal("sorry\n", b().body)
      local c = h.spawn(get, n, "/cap?key=" .. key .. "&ms=500")
      local d = h.spawn(get, n, "/cap?key=" .. key .. "&ms=500")
      local sc, sd = c().status, d().status
      local _, max = backend(n, key)
      assert.equal(2, max, "most requests inside the backend at once (the later two answered " .. sc .. ", " .. sd .. ")")
    end)

    it("releases at once a mutex whose upstream answered in time (no 504 among its upstreams' statuses)", function()
      local key = h.unique("in-time")
      assert.equal(200, get(n, "/jobs-timeout?key=" .. key .. "&ms=50").status)
      -- Released from the log phase, after the response left: within a moment, not the 5 s ttl.
      assert.is_true(h.eventually(1, function() return get(n, "/jobs?key=" .. key .. "&ms=10").status == 200 end))
    end)

    it("does not let a second run of a mutex job start beside the first after a 504", function()
      local key = h.unique("to-job")
      assert.equal(504, get(n, "/jobs-timeout?key=" .. key .. "&ms=2000").status)
      local second = get(n, "/jobs?key=" .. key .. "&ms=300")
      local _, max = backend(n, key)
      assert.equal(1, max, "runs of the job at once (the second answered " .. second.status .. ")")
      assert.equal(503, second.status)
    end)

    it("answers a dedup retry of a request that timed out upstream with 409 while the backend still runs it", function()
      local key = h.unique("to-dedup")
      assert.equal(504, get(n, "/orders-timeout?key=" .. key .. "&ms=2000").status)
      local retry = get(n, "/orders-timeout?key=" .. key .. "&ms=10")
      local hits = backend(n, key)
      assert.equal(1, hits, "the backend ran the request again beside the first (retry answered " .. retry.status .. ")")
      assert.equal(409, retry.status)
    end)
  end)
  describe("a worker SIGKILLed while its proxied requests are in flight", function()
    it("leaves their permits to their ttl (crash recovery releases no guard's lease): never more than permits in the backend", function()
      local b = start()   -- the backend, in an nginx of its own: killing the guard's workers does not stop it
      local m = start({ BACKEND_PORT = b.backend })
      local key = h.unique("kill")
      local t = {}
      for i = 1, 2 do t[i] = h.spawn(h.http, m.port, "/cap?key=" .. key .. "&ms=3000") end
      ngx.sleep(0.3)
      local _, _, inside = backend(b, key)
      assert.equal(2, inside)
      for _, w in ipairs(m.workers()) do assert(h.sh("kill -KILL " .. w)) end
      for i = 1, 2 do t[i]() end
      ngx.sleep(1.0)   -- the new workers' crash recovery has run
      local c = h.spawn(get, m, "/cap?key=" .. key .. "&ms=500")
      local d = h.spawn(get, m, "/cap?key=" .. key .. "&ms=500")
      local sc, sd = c().status, d().status
      local _, max = backend(b, key)
      -- Not kept for good: the permits run out by their ttl (5 s, no longer renewed).
      local free = h.eventually(8, function() return get(m, "/cap?key=" .. key .. "&ms=10").status == 200 end)
      m.stop()
      b.stop()
      assert.equal(2, max, "most requests inside the backend at once (the later two answered " .. sc .. ", " .. sd .. ")")
      assert.same({ 429, 429 }, { sc, sd })
      assert.is_true(free, "the permits never ran out")
    end)
  end)
end)

h.check_error_logs({
  { "worker process %d+ exited on signal 9", max = 2 },  -- the SIGKILLed workers
  "upstream timed out %(110: Connection timed out%) while reading response header from upstream",  -- the 504s, on purpose
})
