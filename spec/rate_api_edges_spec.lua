-- resty.dlock.rate's Lua API at its edges: limiters sharing a name, a
-- give-back on a Redis out of memory, and the README's example as an operator
-- copies it. Real nginx (the runner's, and nginx/spec-rate-readme.conf), real Redis.
local h = require "helpers"
local rate = require "resty.dlock.rate"

describe("resty.dlock.rate limiters and their names", function()
  -- Redis holds a limiter's state, by prefix (dlock:rate:<name>:): the dict holds no counts.
  it("share a key's state when they share a name, whatever their limits (README: give them different names)", function()
    local login = assert(rate.new({ dict = "dlock", redis = h.redis_opts(), rate = 5, period = 60000, name = "shared" }))
    local api = assert(rate.new({ dict = "dlock", redis = h.redis_opts(), rate = 1000, period = 1000, name = "shared" }))
    local client = h.unique("10.0.0.")
    assert.same({ 0, 4 }, { login:incoming(client, true) })
    -- 12 s of the client's schedule are taken, a burst's worth of api's 1 ms spacing.
    local delay, why = api:incoming(client, true)
    assert.is_nil(delay)
    assert.equal("rejected", why)
  end)

  it("keep separate state for one key under different names", function()
    local login = assert(rate.new({ dict = "dlock", redis = h.redis_opts(), rate = 5, period = 60000, name = "login" }))
    local api = assert(rate.new({ dict = "dlock", redis = h.redis_opts(), rate = 1000, period = 1000, name = "api" }))
    local client = h.unique("10.0.0.")
    assert.same({ 0, 4 }, { login:incoming(client, true) })
    assert.same({ 0, 999 }, { api:incoming(client, true) })
  end)
end)

describe("resty.dlock.rate on a Redis out of memory (maxmemory, noeviction)", function()
  -- Locks taken before Redis filled up still release (README, What it does;
  -- spec/eviction_spec.lua): a give-back needs no memory. uncommit is the
  -- rate limit's give-back, which combine() relies on when a later limiter refuses.
  it("gives back with uncommit a charge taken before Redis filled up", function()
    local r = h.start_redis(nil, "--maxmemory-policy noeviction")
    finally(function() r.stop() end)
    local lim = assert(rate.new({ dict = "dlock", prefix = h.unique("oom"), rate = 3, period = 60000,
      redis = { port = r.port, connect_timeout = 500, read_timeout = 1000 } }))
    assert.same({ 0, 2 }, { lim:incoming("k", true) })
    assert.same({ 0, 1 }, { lim:incoming("k", true) })
    assert.equal("OK", h.cmd(r.port, "config", "set", "maxmemory", "1"))
    local remaining, err = lim:uncommit("k")
    assert.equal(2, remaining, "uncommit answered " .. tostring(remaining) .. ", " .. tostring(err))
    assert.equal("OK", h.cmd(r.port, "config", "set", "maxmemory", "0"))
    -- Two left: the give-back took.
    assert.same({ 0, 1 }, { lim:incoming("k", true) })
  end)
end)

describe("the README's Lua API example (nginx/spec-rate-readme.conf: its lines verbatim, at 1 request a minute)", function()
  local node
  setup(function() node = h.start_nginx("spec-rate-readme.conf", { PREFIX_KEYS = h.unique("readme") }) end)
  teardown(function() if node then node.stop() end end)

  it("answers 401 to requests without the X-API-Key header, logging nothing, and counts those with it", function()
    for _ = 1, 5 do assert.equal(401, assert(h.http(node.port, "/api")).status) end
    local key = { ["X-API-Key"] = h.unique("k") }
    assert.equal(200, assert(h.http(node.port, "/api", { headers = key })).status)
    local refused = assert(h.http(node.port, "/api", { headers = key }))
    assert.equal(429, refused.status)
    assert.is_not_nil(refused.headers["retry-after"])
    assert.not_matches("rate limit:", node.error_log(), 1, true)
  end)
end)

h.check_error_logs()
