-- Guards one after another on a request, as operators stack them (per client,
-- then per API key; a limit, then a lock): a request that a later guard
-- refuses gives back what the guards before it took, as nginx's limit_req and
-- lua-resty-limit-traffic's combine() charge no limit when a later one
-- refuses. Real nginx (nginx/spec-giveback.conf, one worker), real Redis.
local h = require "helpers"

local n, r

local function get(path, opts)
  return assert(h.http(n.port, path, opts))
end

local function row(name) return h.guard_row(n.port, name) end

--- The RateLimit item of policy `name` in a response: what remains under it.
local function remaining(res, name)
  local fields = res.headers["ratelimit"]
  if type(fields) == "table" then fields = table.concat(fields, ", ") end
  local start = ('"' .. name .. '";r='):gsub("%p", "%%%0")
  return tonumber((fields or ""):match(start .. "(%d+)"))
end

describe("a request a later guard refuses", function()
  setup(function()
    r = h.start_redis()
    local be = h.free_port()
    n = h.start_nginx("spec-giveback.conf", { REDIS_PORT = r.port, BACKEND_PORT = be, DOWN_PORT = h.free_port() })
  end)
  teardown(function()
    if n then n.stop() end
    if r then r.stop() end
  end)

  it("gives the client's rate charge back when its API key's limit refuses it: the client keeps its 3 a minute", function()
    local ip = h.unique("ip")
    local a, b, c = h.unique("a"), h.unique("b"), h.unique("c")
    assert.equal(200, get("/ip-key?ip=" .. ip .. "&key=" .. a).status)
    -- Key a has used its 1 a minute: refused by per_key, after per_ip charged the client.
    for _ = 1, 5 do assert.equal(429, get("/ip-key?ip=" .. ip .. "&key=" .. a).status) end
    local second = get("/ip-key?ip=" .. ip .. "&key=" .. b)
    assert.equal(200, second.status)
    assert.equal(1, remaining(second, "3-per-1m"), "per_ip kept the refused requests' charges")
    assert.equal(200, get("/ip-key?ip=" .. ip .. "&key=" .. c).status)
    -- The fourth admitted request of the client is over its 3 a minute.
    assert.equal(429, get("/ip-key?ip=" .. ip .. "&key=" .. h.unique("d")).status)
  end)

  it("gives back a charge under several limits at once (the general script)", function()
    local ip, a = h.unique("ip"), h.unique("a")
    assert.equal(200, get("/many-key?ip=" .. ip .. "&key=" .. a).status)
    for _ = 1, 4 do assert.equal(429, get("/many-key?ip=" .. ip .. "&key=" .. a).status) end
    local res = get("/many-key?ip=" .. ip .. "&key=" .. h.unique("b"))
    assert.equal(200, res.status)
    assert.equal(1, remaining(res, "3-per-1m"))
    assert.equal(8, remaining(res, "10-per-1h"))
  end)

  it("gives back a charge the local fallback made while its Redis is down (on_error = local)", function()
    local ip, a = h.unique("ip"), h.unique("a")
    local before = row("per_ip_local")
    assert.equal(200, get("/local-key?ip=" .. ip .. "&key=" .. a).status)
    for _ = 1, 4 do assert.equal(429, get("/local-key?ip=" .. ip .. "&key=" .. a).status) end
    local res = get("/local-key?ip=" .. ip .. "&key=" .. h.unique("b"))
    assert.equal(200, res.status)
    assert.equal(1, remaining(res, "3-per-1m"))
    assert.equal(200, get("/local-key?ip=" .. ip .. "&key=" .. h.unique("c")).status)
    assert.equal(429, get("/local-key?ip=" .. ip .. "&key=" .. h.unique("d")).status)
    local after = row("per_ip_local")
    assert.equal(7, after.local_admitted - before.local_admitted)
    assert.equal(1, after.local_rejected - before.local_rejected)
  end)

  it("gives the rate charge back when a mutex after it is busy (503)", function()
    local ip, job = h.unique("ip"), h.unique("job")
    local first = h.spawn(get, "/ip-job?ip=" .. ip .. "&job=" .. job .. "&ms=600&key=" .. job)
    ngx.sleep(0.2)
    for _ = 1, 3 do assert.equal(503, get("/ip-job?ip=" .. ip .. "&job=" .. job .. "&key=" .. job).status) end
    assert.equal(200, first().status)
    local res = get("/ip-job?ip=" .. ip .. "&job=" .. h.unique("other"))
    assert.equal(200, res.status)
    assert.equal(1, remaining(res, "3-per-1m"))
  end)

  it("keeps the rate charge when the later guard refuses because its Redis is down: no request waits for it twice", function()
    local ip = h.unique("ip")
    local before = row("down")
    for _ = 1, 3 do assert.equal(503, get("/ip-down?ip=" .. ip .. "&job=j").status) end
    assert.is_true(row("down").failed_closed - before.failed_closed >= 3)
    assert.equal(429, get("/ip-down?ip=" .. ip .. "&job=j").status)
  end)

  it("keeps the charge when the operator's own code refuses after the guard", function()
    local ip = h.unique("ip")
    for _ = 1, 3 do assert.equal(403, get("/ip-then-app?deny=1&ip=" .. ip).status) end
    assert.equal(429, get("/ip-then-app?ip=" .. ip).status)
  end)

  it("releases a throttle passed before a dedup that refuses: the user may try again at once", function()
    local user, key = h.unique("user"), h.unique("key")
    local first = h.spawn(get, "/user-dd?user=" .. h.unique("u0") .. "&key=" .. key .. "&ms=600")
    ngx.sleep(0.2)
    assert.equal(409, get("/user-dd?user=" .. user .. "&key=" .. key).status)
    assert.equal(200, first().status)
    -- The throttle's key was given back when dedup refused: this user is not throttled.
    assert.equal(200, get("/user-dd?user=" .. user .. "&key=" .. h.unique("k2")).status)
    -- And a request that ran keeps it: the throttle's 60 s apply.
    assert.equal(429, get("/user-dd?user=" .. user .. "&key=" .. h.unique("k3")).status)
    assert.equal(0, row("per_user").in_flight)
  end)

  it("gives the rate charge back when an idempotency guard refuses (400 without a key, 409 while the first runs; charged while they waited)", function()
    local ip, key = h.unique("ip"), h.unique("idem")
    local function post(path, k) return get(path, { method = "POST", body = "pay", headers = { ["Idempotency-Key"] = k } }) end
    for _ = 1, 3 do assert.equal(400, get("/ip-idem?ip=" .. ip, { method = "POST", body = "pay" }).status) end
    -- Duplicates wait up to the guard's `wait` (1 s) for the first, then get 409.
    local first = h.spawn(post, "/ip-idem?ip=" .. ip .. "&ms=2000&key=" .. key, key)
    ngx.sleep(0.2)
    local dups = h.parallel(2, function() return post("/ip-idem?ip=" .. ip .. "&ms=2000&key=" .. key, key) end)
    for _, d in ipairs(dups) do assert.equal(409, d.status) end
    assert.equal(200, first().status)
    -- One charge so far (the first request); a replay is an answer, and is charged.
    local replay = post("/ip-idem?ip=" .. ip .. "&ms=2000&key=" .. key, key)
    assert.equal("true", replay.headers["idempotent-replayed"])
    assert.equal(1, remaining(replay, "3-per-1m"), replay.raw_head)
  end)

  it("answers a replay with the RateLimit fields of its own decision, not those stored with the first response", function()
    local ip, key = h.unique("ip"), h.unique("idem")
    local opts = { method = "POST", body = "pay", headers = { ["Idempotency-Key"] = key } }
    local first = get("/ip-idem?ip=" .. ip .. "&key=" .. key, opts)
    assert.equal(2, remaining(first, "3-per-1m"))
    local replay = get("/ip-idem?ip=" .. ip .. "&key=" .. key, opts)
    assert.equal("true", replay.headers["idempotent-replayed"])
    assert.equal('"3-per-1m";q=3;w=60', replay.headers["ratelimit-policy"], replay.raw_head)
    assert.matches('^"3%-per%-1m";r=1;t=%d+$', replay.headers["ratelimit"])
  end)
end)
