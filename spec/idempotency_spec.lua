-- The idempotency guard: the first request with a key runs, retries get its
-- stored response, from any nginx sharing the Redis. Real nginx
-- (nginx/spec-idempotency.conf, 2 workers), real HTTP, a backend that counts how
-- often each operation runs.
local h = require "helpers"
local cjson = require "cjson.safe"

local redis
local a, b   -- two nginx of one fleet: b forwards to a's backend, both use one Redis

local function start(backend)
  local own = h.free_port()
  local n = h.start_nginx("spec-idempotency.conf", {
    REDIS_PORT = redis.port, OWN_BACKEND_PORT = own, BACKEND_PORT = backend or own, DEAD_PORT = h.free_port(),
  })
  n.backend = backend or own
  return n
end

--- One request (h.http) as the spec's client, whose keys the guards keep per Authorization (unless
--- opts.anonymous or a test names its own); a request that gets no answer fails the test.
local function request(n, method, path, opts)
  opts = opts or {}
  local headers = {}
  for k, v in pairs(opts.headers or {}) do headers[k] = v end
  if headers.Authorization == nil and not opts.anonymous then headers.Authorization = "Bearer spec-client" end
  local res, err = h.http(n.port, path, { method = method, headers = headers, body = opts.body or "",
    timeout = opts.timeout, abort_after = opts.abort_after })
  return assert(res, err)
end

--- POST over HTTP/1.1: returns as soon as the last byte of the body is in (chunked or
--- Content-Length), before nginx ends the request (its log phase, the close).
local function post11(n, path, key, body)
  local sock = ngx.socket.tcp()
  sock:settimeout(10000)
  assert(sock:connect("127.0.0.1", n.port))
  assert(sock:send("POST " .. path .. " HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer spec-client\r\n" ..
    "Idempotency-Key: " .. key .. "\r\nContent-Length: " .. #body .. "\r\n\r\n" .. body))
  local status = tonumber(assert(sock:receive("*l")):match("^HTTP/1%.1 (%d+)"))
  local headers = {}
  while true do
    local line = assert(sock:receive("*l"))
    if line == "" then break end
    local k, v = line:match("^([^:]+): *(.*)$")
    headers[k:lower()] = v
  end
  local parts = {}
  if headers["content-length"] then
    parts[1] = assert(sock:receive(tonumber(headers["content-length"])))
  elseif headers["transfer-encoding"] == "chunked" then
    while true do
      local size = tonumber(assert(sock:receive("*l")), 16)
      if size == 0 then assert(sock:receive("*l")) break end
      parts[#parts + 1] = assert(sock:receive(size))
      assert(sock:receive("*l"))
    end
  end
  sock:close()
  return { status = status, headers = headers, body = table.concat(parts) }
end

local function post(n, path, key, body, extra)
  local headers = { ["Idempotency-Key"] = key }
  for k, v in pairs(extra or {}) do headers[k] = v end
  return request(n, "POST", path, { headers = headers, body = body })
end

local function executions(n, key)
  local res = assert(h.http(n.backend, "/stats?key=" .. key))
  return tonumber(res.body:match("^(%d+)"))
end

local function guard(n, name)
  return assert(cjson.decode(request(n, "GET", "/dlock/status").body)).guards[name]
end

local function problem(res, status, kind)
  assert.equal(status, res.status)
  assert.equal("application/problem+json", res.headers["content-type"])
  local p = assert(cjson.decode(res.body))
  assert.equal(status, p.status)
  assert.is_truthy(p.type:find(kind, 1, true), p.type)
  assert.is_string(p.title)
  assert.is_string(p.detail)
  return p
end

--- A fresh key and the backend key of the operation (the query names it).
local function fresh(name)
  local k = h.unique(name):gsub("[^%w]", "-")
  return k, "?key=" .. k
end

--- The headers a replay must repeat (what the application sent, but its cookies).
local function app_headers(res)
  return { res.headers["content-type"], res.headers["x-execution"] }
end

describe("gateway mode idempotency", function()
  setup(function()
    redis = h.start_redis()
    a = start()
    b = start(a.backend)
  end)

  teardown(function()
    if a then a.stop() end
    if b then b.stop() end
    if redis then redis.stop() end
  end)

  it("runs 50 concurrent requests with one key once: one answer from the backend, 49 x 409 problem+json with Retry-After after waiting 1 s", function()
    local key, q = fresh("burst")
    local t0 = h.now()
    local results = h.parallel(50, function()
      return post(a, "/payments" .. q .. "&ms=2500", key, "{}")
    end)
    local created, conflicts = 0, 0
    for _, res in ipairs(results) do
      if res.status == 201 then
        created = created + 1
      else
        problem(res, 409, "in-flight")
        assert.equal("1", res.headers["retry-after"])
        conflicts = conflicts + 1
      end
    end
    assert.equal(1, created)
    assert.equal(49, conflicts)
    assert.equal(1, executions(a, key))
    assert.is_true(h.now() - t0 >= 2.4)
  end)

  it("gives the duplicates that come while the first request runs its response after it, once it is done within the wait (1 s by default)", function()
    local key, q = fresh("short-burst")
    local results = h.parallel(20, function(i)
      return post(i % 2 == 0 and a or b, "/payments" .. q .. "&ms=300", key, "{}")
    end)
    local first, replayed = 0, 0
    for _, res in ipairs(results) do
      assert.equal(201, res.status)
      if res.headers["idempotent-replayed"] == "true" then replayed = replayed + 1 else first = first + 1 end
      assert.equal(results[1].body, res.body)
    end
    assert.equal(1, first)
    assert.equal(19, replayed)
    assert.equal(1, executions(a, key))
  end)

  for _, where in ipairs({ "the same nginx", "another nginx of the fleet" }) do
    it("answers a retry sent the moment the first response is in with the replay, never 409, from " .. where ..
       " (50 times, the first worker busy after each response)", function()
      local other = where == "the same nginx" and a or b
      for i = 1, 50 do
        local key, q = fresh("immediate-" .. i)
        local first = post11(a, "/busy" .. q, key, "{}")
        assert.equal(201, first.status)
        local again = post(other, "/busy" .. q, key, "{}")
        assert.equal(201, again.status, "retry " .. i .. ": " .. tostring(again.body))
        assert.equal("true", again.headers["idempotent-replayed"])
        assert.equal(first.body, again.body)
      end
    end)
  end

  it("with wait, gives all 50 concurrent requests the same response from one run", function()
    local key, q = fresh("wait")
    local results = h.parallel(50, function()
      return post(a, "/waiting" .. q .. "&ms=300", key, "{}")
    end)
    local replayed = 0
    for _, res in ipairs(results) do
      assert.equal(201, res.status)
      assert.equal(results[1].body, res.body)
      if res.headers["idempotent-replayed"] == "true" then replayed = replayed + 1 end
    end
    assert.equal(49, replayed)
    assert.equal(1, executions(a, key))
  end)

  it("with wait, gives duplicates on another nginx the first one's response as soon as it is stored", function()
    local key, q = fresh("wait-fleet")
    local first = ngx.thread.spawn(post, a, "/waiting" .. q .. "&ms=400", key, "{}")
    ngx.sleep(0.05)
    local t0 = ngx.now()
    local results = h.parallel(10, function()
      return post(b, "/waiting" .. q .. "&ms=400", key, "{}")
    end)
    ngx.update_time()
    local _, res1 = ngx.thread.wait(first)
    for _, res in ipairs(results) do
      assert.equal(201, res.status)
      assert.equal(res1.body, res.body)
      assert.equal("true", res.headers["idempotent-replayed"])
    end
    assert.is_true(ngx.now() - t0 < 1, "waited " .. (ngx.now() - t0) .. " s")
    assert.equal(1, executions(a, key))
  end)

  it("answers 409 to a duplicate whose wait runs out before the first request completes", function()
    local key, q = fresh("wait-timeout")
    local first = ngx.thread.spawn(post, a, "/waiting" .. q .. "&ms=6000", key, "{}")
    ngx.sleep(0.05)
    ngx.update_time()
    local t0 = ngx.now()
    problem(post(b, "/waiting" .. q .. "&ms=6000", key, "{}"), 409, "in-flight")
    ngx.update_time()
    assert.is_true(ngx.now() - t0 >= 4.9, "gave up after " .. (ngx.now() - t0) .. " s")
    ngx.thread.wait(first)
  end)

  it("replays a completed request byte for byte: status, headers, body, Idempotent-Replayed: true", function()
    local key, q = fresh("replay")
    local first = post(a, "/payments" .. q, key, '{"amount":100}')
    assert.equal(201, first.status)
    assert.is_nil(first.headers["idempotent-replayed"])
    for _ = 1, 3 do
      local again = post(a, "/payments" .. q, key, '{"amount":100}')
      assert.equal(first.status, again.status)
      assert.equal(first.body, again.body)
      assert.same(app_headers(first), app_headers(again))
      assert.equal("true", again.headers["idempotent-replayed"])
    end
    assert.equal(1, executions(a, key))
  end)

  it("replays from any nginx of the fleet: the first request on one, the retry on the other", function()
    local key, q = fresh("fleet")
    local first = post(a, "/payments" .. q, key, "{}")
    assert.equal(201, first.status)
    local again = post(b, "/payments" .. q, key, "{}")
    assert.equal(first.body, again.body)
    assert.equal("true", again.headers["idempotent-replayed"])
    assert.equal(1, executions(a, key))
  end)

  it("runs duplicates sent to two nginx at once only once", function()
    local key, q = fresh("fleet-burst")
    local results = h.parallel(20, function(i)
      return post(i % 2 == 0 and a or b, "/payments" .. q .. "&ms=1500", key, "{}")
    end)
    local created = 0
    for _, res in ipairs(results) do
      if res.status == 201 then created = created + 1 else assert.equal(409, res.status) end
    end
    assert.equal(1, created)
    assert.equal(1, executions(a, key))
  end)

  it("answers 422 to the same key with another body, path or query, and runs nothing", function()
    local key, q = fresh("mismatch")
    assert.equal(201, post(a, "/payments" .. q, key, '{"amount":100}').status)
    problem(post(a, "/payments" .. q, key, '{"amount":999}'), 422, "mismatch")
    problem(post(a, "/payments" .. q .. "&x=1", key, '{"amount":100}'), 422, "mismatch")
    problem(request(a, "PATCH", "/payments" .. q, { headers = { ["Idempotency-Key"] = key }, body = '{"amount":100}' }),
      422, "mismatch")
    assert.equal(1, executions(a, key))
  end)

  it("answers 422 to a duplicate with another body while the first is still in flight", function()
    local key, q = fresh("mismatch-inflight")
    local slow = ngx.thread.spawn(post, a, "/payments" .. q .. "&ms=400", key, "one")
    ngx.sleep(0.1)
    problem(post(a, "/payments" .. q .. "&ms=400", key, "two"), 422, "mismatch")
    local _, first = ngx.thread.wait(slow)
    assert.equal(201, first.status)
  end)

  it("refuses a key without the scope that tells clients apart (on_missing = reject): 400, runs nothing", function()
    local key, q = fresh("no-scope")
    problem(request(a, "POST", "/payments" .. q, { anonymous = true, headers = { ["Idempotency-Key"] = key }, body = "{}" }),
      400, "missing-scope")
    assert.equal(0, executions(a, key))
  end)

  it("with scope = false, shares keys among all clients", function()
    local key, q = fresh("shared")
    local one = post(a, "/waiting" .. q, key, "{}", { Authorization = "Bearer tenant-1" })
    local two = post(a, "/waiting" .. q, key, "{}", { Authorization = "Bearer tenant-2" })
    assert.equal(one.body, two.body)
    assert.equal("true", two.headers["idempotent-replayed"])
    assert.equal(1, executions(a, key))
  end)

  it("never stores nor replays Set-Cookie, unless store_headers lists it", function()
    local key, q = fresh("cookie")
    local first = post(a, "/payments" .. q, key, "{}")
    assert.same({ "a=1; Path=/", "b=2; Path=/" }, first.headers["set-cookie"])
    local again = post(a, "/payments" .. q, key, "{}")
    assert.equal("true", again.headers["idempotent-replayed"])
    assert.is_nil(again.headers["set-cookie"])
    assert.equal(first.headers["x-execution"], again.headers["x-execution"])
    for _, k in ipairs(h.cmd(redis.port, "keys", "dlock:gw:payments:*")) do
      for _, v in ipairs(h.cmd(redis.port, "hvals", k)) do assert.is_nil(v:find("a=1; Path", 1, true)) end
    end
    local key2, q2 = fresh("cookie")
    local listed = post(a, "/cookies" .. q2, key2, "{}")
    local replayed = post(a, "/cookies" .. q2, key2, "{}")
    assert.equal("true", replayed.headers["idempotent-replayed"])
    assert.same(listed.headers["set-cookie"], replayed.headers["set-cookie"])
  end)

  it("follows on_error, not on_missing, when the key or scope function raises or returns a table: 503, runs nothing, logs it once", function()
    local key, q = fresh("key-fn")
    for _, path in ipairs({ "/raises", "/table_key", "/scope_raises" }) do
      for _ = 1, 3 do
        problem(post(a, path .. q, key, "{}"), 503, "unavailable")
      end
    end
    assert.equal(0, executions(a, key))
    local log = a.error_log()
    local _, raised = log:gsub("guard raises: no key: the key function raised: [^\n]*no key today", "")
    local _, tbl = log:gsub("guard table_key: no key: the key function returned a table, not a string", "")
    local _, scope = log:gsub("guard scope_raises: no key: scope: the key function raised: [^\n]*no scope", "")
    -- At most once per worker (2) in the interval, not per request (3).
    for _, n in ipairs({ raised, tbl, scope }) do assert.is_true(n >= 1 and n <= 2, n .. " lines") end
    assert.is_truthy(log:find("refused with 503 (on_error = \"deny\")", 1, true))
    assert.is_true(guard(a, "raises").key_errors >= 3)
  end)

  it("keeps tenants apart: the same key with two Authorization headers runs twice", function()
    local key, q = fresh("tenants")
    local one = post(a, "/payments" .. q, key, "{}", { Authorization = "Bearer tenant-1" })
    local two = post(a, "/payments" .. q, key, "{}", { Authorization = "Bearer tenant-2" })
    assert.equal(201, one.status)
    assert.equal(201, two.status)
    assert.is_nil(two.headers["idempotent-replayed"])
    assert.equal(2, executions(a, key))
    local again = post(a, "/payments" .. q, key, "{}", { Authorization = "Bearer tenant-1" })
    assert.equal(one.body, again.body)
  end)

  it("stores neither the key nor the scope in clear in Redis", function()
    local key, q = fresh("hashed")
    post(a, "/payments" .. q, key, "{}", { Authorization = "Bearer secret-tenant" })
    local found = h.cmd(redis.port, "keys", "dlock:gw:payments:*")
    assert.is_true(#found > 0)
    for _, k in ipairs(found) do
      assert.is_nil(k:find(key, 1, true))
      assert.is_truthy(k:match("^dlock:gw:payments:%x+$"), k)
      for _, v in ipairs(h.cmd(redis.port, "hvals", k)) do
        assert.is_nil(v:find("secret-tenant", 1, true))
      end
    end
  end)

  it("answers 400 problem+json to a missing key (on_missing = reject) and to an invalid one", function()
    local _, q = fresh("missing")
    problem(request(a, "POST", "/payments" .. q, { body = "{}" }), 400, "missing-key")
    problem(post(a, "/payments" .. q, string.rep("k", 256), "{}"), 400, "invalid-key")
    problem(post(a, "/payments" .. q, '"unterminated', "{}"), 400, "invalid-key")
    problem(post(a, "/payments" .. q, '"bad " quote"', "{}"), 400, "invalid-key")
    problem(post(a, "/payments" .. q, "{not-a-token}", "{}"), 400, "invalid-key")
    assert.equal(0, executions(a, q:sub(6)))
  end)

  it("takes a key of 255 bytes, and a quoted sf-String as the same key as the bare token", function()
    local key, q = fresh("sf")
    local first = post(a, "/payments" .. q, key, "{}")
    assert.equal(201, first.status)
    local quoted = post(a, "/payments" .. q, '"' .. key .. '"', "{}")
    assert.equal("true", quoted.headers["idempotent-replayed"])
    assert.equal(first.body, quoted.body)
    assert.equal(201, post(a, "/payments" .. q .. "&long=1", string.rep("k", 255), "{}").status)
  end)

  it("lets other methods and requests without a key (on_missing = pass) through untouched", function()
    local key, q = fresh("methods")
    local get1 = request(a, "GET", "/waiting" .. q, { headers = { ["Idempotency-Key"] = key } })
    local get2 = request(a, "GET", "/waiting" .. q, { headers = { ["Idempotency-Key"] = key } })
    assert.equal(201, get1.status)
    assert.is_nil(get2.headers["idempotent-replayed"])
    assert.equal(201, request(a, "POST", "/waiting" .. q, { body = "{}" }).status)
    assert.equal(3, executions(a, key))
  end)

  it("replays a stored 500, but lets a retry run again after a 503 or a 429 (not stored by default)", function()
    local key, q = fresh("statuses")
    local err = post(a, "/payments" .. q .. "&status=500", key, "{}")
    assert.equal(500, err.status)
    local again = post(a, "/payments" .. q .. "&status=500", key, "{}")
    assert.equal(500, again.status)
    assert.equal("true", again.headers["idempotent-replayed"])
    assert.equal(err.body, again.body)
    assert.equal(1, executions(a, key))

    local key2, q2 = fresh("statuses")
    for _, status in ipairs({ 503, 429 }) do
      local res = post(a, "/payments" .. q2 .. "&status=" .. status, key2 .. status, "{}")
      assert.equal(status, res.status)
      ngx.sleep(0.1)   -- the claim is dropped by a timer
      local retry = post(a, "/payments" .. q2 .. "&status=" .. status, key2 .. status, "{}")
      assert.equal(status, retry.status)
      assert.is_nil(retry.headers["idempotent-replayed"])
    end
    assert.equal(4, executions(a, key2))
  end)

  for _, status in ipairs({ 204, 304 }) do
    it("stores and replays a response without a body (" .. status .. "), without Content-Length", function()
      local key, q = fresh("nobody")
      local first = post(a, "/payments" .. q .. "&status=" .. status, key, "{}")
      assert.equal(status, first.status)
      local again = post(a, "/payments" .. q .. "&status=" .. status, key, "{}")
      assert.equal(status, again.status)
      assert.equal("", again.body)
      assert.equal("true", again.headers["idempotent-replayed"])
      assert.is_nil(again.headers["content-length"], again.raw_head)
      assert.equal(first.headers["x-execution"], again.headers["x-execution"])
      assert.equal(1, executions(a, key))
    end)
  end

  it("lets the duplicates that wait take over when the first response is not stored (503): one more run, not 49", function()
    local key, q = fresh("takeover")
    local first = ngx.thread.spawn(post, a, "/waiting" .. q .. "&ms=200&status=503", key, "{}")
    ngx.sleep(0.05)
    local results = h.parallel(10, function()
      return post(a, "/waiting" .. q .. "&ms=200&status=503", key, "{}")
    end)
    ngx.thread.wait(first)
    for _, res in ipairs(results) do
      assert.is_true(res.status == 503 or res.status == 409, tostring(res.status))
    end
    -- Each 503 drops the claim and one waiter takes it: runs happen one after the other, never together.
    local _, max = assert(h.http(a.backend, "/stats?key=" .. key)).body:match("^(%d+) (%d+)")
    assert.is_true(executions(a, key) >= 2)
    assert.equal("1", max)
  end)

  it("stores what the client got after an internal redirect (error_page of its own)", function()
    local key, q = fresh("intercept")
    local first = post(a, "/intercept" .. q, key, "{}")
    assert.equal(500, first.status)
    assert.equal("sorry, try later\n", first.body)
    local again = post(a, "/intercept" .. q, key, "{}")
    assert.equal("sorry, try later\n", again.body)
    assert.equal("true", again.headers["idempotent-replayed"])
    assert.equal(1, executions(a, key))
  end)

  it("never runs again a request whose response was over max_body: retries get 409 not-replayable", function()
    local key, q = fresh("big")
    local first = post(a, "/small" .. q .. "&size=400", key, "{}")
    assert.equal(201, first.status)
    assert.equal(400, #first.body)
    ngx.sleep(0.1)
    local again = post(a, "/small" .. q .. "&size=400", key, "{}")
    local p = problem(again, 409, "not-replayable")
    assert.is_truthy(p.detail:find("201", 1, true))
    assert.is_nil(again.headers["retry-after"])
    assert.equal(1, executions(a, key))
    -- Within max_body: replayed as usual.
    local key2, q2 = fresh("big")
    local small = post(a, "/small" .. q2 .. "&size=80", key2, "{}")
    assert.equal(small.body, post(a, "/small" .. q2 .. "&size=80", key2, "{}").body)
  end)

  it("refuses a request body over max_request_body with 413, before it reaches the backend", function()
    local key, q = fresh("upload")
    problem(post(a, "/small" .. q, key, string.rep("u", 65)), 413, "request-too-large")
    assert.equal(201, post(a, "/small" .. q, key, string.rep("u", 64)).status)
    assert.equal(1, executions(a, key))
  end)

  it("fingerprints a request body that nginx buffered to a temp file", function()
    local key, q = fresh("file")
    local big = string.rep("f", 40000)   -- over client_body_buffer_size 16k
    assert.equal(201, post(a, "/payments" .. q, key, big).status)
    assert.equal("true", post(a, "/payments" .. q, key, big).headers["idempotent-replayed"])
    problem(post(a, "/payments" .. q, key, big .. "!"), 422, "mismatch")
    assert.equal(1, executions(a, key))
  end)

  it("renews the claim while the request runs: a duplicate 2 s into a 4 s request (lease 1.5 s) gets 409 after its 1 s wait", function()
    local key, q = fresh("renew")
    local slow = ngx.thread.spawn(post, a, "/payments" .. q .. "&ms=4000", key, "{}")
    ngx.sleep(2)
    problem(post(b, "/payments" .. q .. "&ms=4000", key, "{}"), 409, "in-flight")
    local _, first = ngx.thread.wait(slow)
    assert.equal(201, first.status)
    assert.equal(first.body, post(b, "/payments" .. q .. "&ms=4000", key, "{}").body)
    assert.equal(1, executions(a, key))
  end)

  it("keeps the claim when the client goes away while the backend works, so a retry cannot run it twice", function()
    local key, q = fresh("abort")
    request(a, "POST", "/payments" .. q .. "&ms=3000", { headers = { ["Idempotency-Key"] = key }, body = "{}", abort_after = 100 })
    ngx.sleep(0.05)   -- the client is gone; the backend still works
    problem(post(a, "/payments" .. q .. "&ms=3000", key, "{}"), 409, "in-flight")
    assert.equal(1, executions(a, key))
    -- Unrenewed, the claim runs out after its lease (1.5 s); then a retry runs.
    ngx.sleep(0.6)
    assert.equal(201, post(a, "/payments" .. q, key, "{}").status)
    assert.equal(2, executions(a, key))
  end)

  it("stores and replays a response whose location runs a log handler of its own, and forgets the request", function()
    local key, q = fresh("ownlog")
    -- Earlier tests' requests (a client abort's among them) end first: the gauge is the guard's, not this test's.
    assert.is_true(h.eventually(5, function() return guard(a, "payments").in_flight == 0 end),
      "requests of earlier tests still in flight: " .. guard(a, "payments").in_flight)
    local first = post(a, "/ownlog" .. q, key, "{}", { Authorization = "Bearer t" })
    assert.equal(201, first.status)
    ngx.sleep(0.1)   -- the store goes out from a timer
    local again = post(a, "/ownlog" .. q, key, "{}", { Authorization = "Bearer t" })
    assert.equal(201, again.status)
    assert.equal("true", again.headers["idempotent-replayed"])
    assert.equal(first.body, again.body)
    assert.equal(1, executions(a, key))
    -- No log() ran: the keeper notices the requests are over in its next round (a sixth of the 1.5 s lease),
    -- well before the lease would run out.
    assert.is_true(h.eventually(1.2, function() return guard(a, "payments").in_flight == 0 end),
      "still in flight: " .. guard(a, "payments").in_flight)
  end)

  it("warns once when the filters cannot see a response, and lets a retry run after the claim's lease", function()
    local key, q = fresh("ownfilter")
    assert.equal(201, post(a, "/ownfilter" .. q, key, "{}", { Authorization = "Bearer t" }).status)
    -- Nothing stored: the claim stays until its lease (1.5 s) runs out, unrenewed (the duplicate waits 1 s of it).
    problem(post(a, "/ownfilter" .. q, key, "{}", { Authorization = "Bearer t" }), 409, "in-flight")
    ngx.sleep(0.7)
    assert.equal(201, post(a, "/ownfilter" .. q, key, "{}", { Authorization = "Bearer t" }).status)
    assert.equal(2, executions(a, key))
    local log = a.error_log()
    local _, n = log:gsub("guard payments: a response went by unseen, so it was not stored", "")
    assert.is_true(n >= 1 and n <= 2, n .. " warnings")
  end)

  it("keeps renewing through nginx -s reload, and the old worker stores the response", function()
    local c = start()
    local key, q = fresh("reload")
    local slow = ngx.thread.spawn(post, c, "/payments" .. q .. "&ms=4000", key, "{}")
    ngx.sleep(0.3)
    assert.is_true(h.sh("kill -HUP " .. c.pid))
    ngx.sleep(1.7)   -- past the 1.5 s lease: only the old worker's renewals keep the claim
    problem(post(c, "/payments" .. q .. "&ms=4000", key, "{}"), 409, "in-flight")
    local _, first = ngx.thread.wait(slow)
    assert.equal(201, first.status)
    ngx.sleep(0.1)
    local again = post(c, "/payments" .. q .. "&ms=4000", key, "{}")
    local runs = executions(c, key)
    c.stop()
    assert.equal(first.body, again.body)
    assert.equal("true", again.headers["idempotent-replayed"])
    assert.equal(1, runs)
  end)

  it("follows on_error when Redis is down: allow runs the request, deny answers 503 problem+json", function()
    local key, q = fresh("down")
    assert.equal(201, post(a, "/open" .. q, key, "{}").status)
    problem(post(a, "/closed" .. q, key, "{}"), 503, "unavailable")
    assert.equal(1, executions(a, key))
    local open = guard(a, "open")
    assert.is_true(open.failed_open >= 1)
    assert.is_true(guard(a, "closed").failed_closed >= 1)
  end)

  it("counts stored, replayed, conflict, mismatch and not_stored in status and metrics", function()
    local before = guard(a, "payments")
    local key, q = fresh("counters")
    post(a, "/payments" .. q, key, "{}")
    ngx.sleep(0.05)
    post(a, "/payments" .. q, key, "{}")
    post(a, "/payments" .. q, key, "other")
    local after = guard(a, "payments")
    assert.equal("idempotency", after.mode)
    assert.equal(before.stored + 1, after.stored)
    assert.equal(before.replayed + 1, after.replayed)
    assert.equal(before.mismatch + 1, after.mismatch)
    local metrics = request(a, "GET", "/dlock/status").body
    assert.is_truthy(metrics:find('"not_stored"', 1, true))
    assert.is_truthy(metrics:find('"conflict"', 1, true))
  end)
end)

h.check_error_logs({
  -- Key and scope functions that raise or return a table, on purpose:
  "dlock: guard [%w_]+: no key: ",
  -- Guards in front of a Redis that is down, on purpose (on_error):
  "connect%(%) failed %(111: Connection refused%), client:",
  "dlock: guard %w+: redis 127%.0%.0%.1:%d+: connection refused",
})
