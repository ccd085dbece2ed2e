-- The gateway guards' edges, over real HTTP against a real nginx
-- (nginx/spec-guard-edges.conf, one worker) and redis-server: key templates in
-- nginx's ${var} form, the local fallback's slots (requests that end without
-- log(), client aborts, Retry-After, in_flight, the probe of an idle guard),
-- connections nginx drops itself, two rate guards on one request, and a
-- half-open breaker that lets one request probe.
local h = require "helpers"
local cjson = require "cjson.safe"

local n, r

local function get(path, opts)
  return assert(h.http(n.port, path, opts))
end

local function status()
  return assert(cjson.decode(get("/dlock/status").body))
end

local function row(name)
  return status().guards[name]
end

--- The backend's "hits max_in_flight in_flight" for key.
local function backend(key)
  return h.backend_stats(n.backend, key)
end

describe("gateway guards at their edges", function()
  setup(function()
    r = h.start_redis()
    local be = h.free_port()
    n = h.start_nginx("spec-guard-edges.conf", { REDIS_PORT = r.port, BACKEND_PORT = be, DOWN_PORT = h.free_port(),
      PREFIX_KEYS = h.unique("ge") })
    n.backend = be
  end)
  teardown(function()
    if r then r.signal("CONT") end
    if n then n.stop() end
    if r then r.stop() end
  end)

  it("a key template in nginx's ${var} form reads the variable: two orgs with one user name are two keys", function()
    local user = h.unique("u")
    local first = h.spawn(get, "/tpl?org=acme&user=" .. user .. "&ms=600&key=tpl-" .. user)
    ngx.sleep(0.2)
    -- Another org, the same user name: another key, so no 409 (dedup).
    local res = get("/tpl?org=globex&user=" .. user .. "&ms=0&key=tpl2-" .. user)
    assert.equal(200, first().status)
    assert.equal(200, res.status, "the ${arg_org} part was taken as a literal: both orgs got one key")
  end)

  it("on_error = local: a slot of a request that ended without log() is given back at the next request of the worker", function()
    -- loc_conc: Redis unreachable, a share of 1 per nginx.
    local key = h.unique("slot")
    local before = row("loc_conc")
    assert.equal(200, get("/loc/unlogged?key=" .. key).status)
    -- Other traffic of the gateway meanwhile (unguarded requests in flight).
    local others = {}
    for i = 1, 4 do others[i] = h.spawn(get, "/plain?ms=1500&key=other" .. i) end
    ngx.sleep(0.2)
    local res = get("/loc/unlogged?key=" .. key)
    local slots = get("/slots").body
    for i = 1, 4 do others[i]() end
    assert.is_true(row("loc_conc").local_admitted > before.local_admitted)
    assert.equal(200, res.status, "the ended request's slot is still held (for its ttl, 20 s): " .. res.status ..
      "; slots: " .. slots)
  end)

  it("dedup: a request nginx drops itself (error_page to return 444) after the backend answered is no client abort: " ..
     "its key is released and a retry goes through", function()
    local key = h.unique("drop")
    local before = row("dd")
    local res = h.http(n.port, "/drop/dd?status=500&key=" .. key)
    assert.is_nil(res, "nginx answered 444 with a response")
    ngx.sleep(0.3)
    local after = row("dd")
    assert.equal(0, after.aborted - before.aborted, "counted as a client abort")
    assert.equal(200, get("/dd?key=" .. key).status)
  end)

  it("two rate guards on one request (per client, per API key): the answer carries the RateLimit fields of both", function()
    local ip, key = h.unique("ip"), h.unique("k")
    local res = get("/two-rates?ip=" .. ip .. "&key=" .. key)
    assert.equal(200, res.status)
    local policy, fields = res.headers["ratelimit-policy"], res.headers["ratelimit"]
    if type(policy) == "table" then policy = table.concat(policy, ", ") end
    if type(fields) == "table" then fields = table.concat(fields, ", ") end
    -- per_ip: 100 per second; per_key: 3 a minute.
    assert.matches('"100-per-1s";q=100;w=1', policy, 1, true)
    assert.matches('"3-per-1m";q=3;w=60', policy, 1, true)
    assert.matches('"100-per-1s";r=99;t=1', fields, 1, true)
    assert.matches('"3-per-1m";r=2;t=', fields, 1, true)
  end)

  it("on_error = local: a concurrency guard's local refusal says when to retry (429 + Retry-After)", function()
    local key = h.unique("ra")
    local first = h.spawn(get, "/loc/logged?ms=800&key=" .. key)
    ngx.sleep(0.3)
    local res = get("/loc/logged?ms=0&key=" .. key)
    assert.equal(200, first().status)
    assert.equal(429, res.status)
    assert.is_not_nil(res.headers["retry-after"], "no Retry-After on the local refusal")
  end)

  it("on_error = local: a request decided locally counts in in_flight while it runs", function()
    local key = h.unique("if")
    local first = h.spawn(get, "/loc/logged?ms=800&key=" .. key)
    ngx.sleep(0.3)
    local during = row("loc_conc")
    local metrics = get("/dlock/metrics").body
    assert.equal(200, first().status)
    assert.equal(1, during.in_flight, "status in_flight")
    assert.matches('dlock_guard_in_flight{guard="loc_conc"} 1', metrics, 1, true)
  end)

  it("on_error = local: a client that goes away while the backend works keeps its slot: never more than the share " ..
     "at the backend", function()
    local key = h.unique("ab")
    -- loc_conc's share is 1 per nginx: the first request's client leaves while the backend works 1.5 s on it.
    local gone = h.spawn(h.http, n.port, "/loc/logged?ms=1500&key=" .. key, { abort_after = 200 })
    assert.is_true(gone().aborted)
    ngx.sleep(0.2)
    local res = get("/loc/logged?ms=0&key=" .. key)
    local _, max = backend(key)
    assert.equal(429, res.status, "a second request let to the backend beside the first")
    assert.equal(1, max)
  end)

  it("on_error = local: once Redis is back, an idle guard stops saying degraded after the cool-down and a probe", function()
    local key = h.unique("deg")
    assert.is_true(r.signal("STOP"))
    local res = get("/live?key=" .. key)
    assert.is_true(r.signal("CONT"))
    assert.equal(200, res.status)
    assert.is_true(row("live_local").degraded)
    -- breaker_cooldown 500 ms; the probe's timeouts 500 ms: 2 s is plenty. No guarded request meanwhile.
    ngx.sleep(2)
    local g = row("live_local")
    local metrics = get("/dlock/metrics").body
    assert.equal("closed", g.breaker)
    assert.is_false(g.degraded)
    assert.matches('dlock_guard_degraded{guard="live_local"} 0', metrics, 1, true)
  end)

  it("breaker half open (on_error = deny): after the cool-down one request probes a Redis that still does not answer, " ..
     "the others are refused at once", function()
    local function timed(i)
      local t0 = h.now()
      local res = get("/brk?key=" .. h.unique("b" .. i))
      return res.status, h.now() - t0
    end
    assert.is_true(r.signal("STOP"))
    finally(function() r.signal("CONT") end)
    assert.equal(503, (timed(0)))   -- read_timeout 300 ms, then the breaker opens (breaker_failures 1)
    assert.equal("open", row("brk").breaker)
    ngx.sleep(0.6)                  -- the cool-down (500 ms) is over: half open
    local waits = {}
    for i = 1, 8 do waits[i] = h.spawn(timed, i) end
    local slow = 0
    for i = 1, 8 do
      local st, took = waits[i]()
      assert.equal(503, st)
      if took >= 0.25 then slow = slow + 1 end
    end
    assert.is_true(r.signal("CONT"))
    assert.is_true(slow <= 1, slow .. " of 8 requests waited for the paused Redis after the cool-down")
  end)
end)

h.check_error_logs({
  { "connect%(%) failed %(111: Connection refused%)", max = 20 },
  { "dlock: guard loc_conc: redis 127%.0%.0%.1:%d+: [^\n]*connect", max = 20 },
  { "dlock: guard loc_conc: Redis keeps failing", max = 2 },
  { "lua tcp socket read timed out", max = 12 },
  { "dlock: guard brk: redis 127%.0%.0%.1:%d+: [^\n]*timeout", max = 10 },
  { "dlock: guard brk: Redis keeps failing", max = 2 },
  { "dlock: guard live_local: redis 127%.0%.0%.1:%d+: [^\n]*timeout", max = 1 },
  { "dlock: guard live_local: Redis keeps failing", max = 1 },
})
