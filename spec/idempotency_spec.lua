-- The idempotency guard: the first request with a key runs, retries get its
-- stored response, from any nginx sharing the Redis. Real nginx
-- (nginx/spec-idempotency.conf, 2 workers), real HTTP, a backend that counts how
-- often each operation runs. What keys, duplicates, replays, mismatches and
-- tenants get; a response's way and an nginx's life are in
-- idempotency_lifecycle_spec.lua.
local h = require "helpers"
local idem = require "idempotency_client"

local request, post11, post, executions, guard, problem, fresh, app_headers =
  idem.request, idem.post11, idem.post, idem.executions, idem.guard, idem.problem, idem.fresh, idem.app_headers

local a, b, redis   -- two nginx of one fleet: b forwards to a's backend, both use one Redis

describe("gateway mode idempotency", function()
  setup(function() a, b, redis = idem.up() end)
  teardown(idem.down)

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

  it("replays the values of a repeated header in the order they were sent, and no Content-Type where there was none", function()
    local key, q = fresh("order")
    local first = post(a, "/payments" .. q .. "&ctype=none", key, "{}")
    assert.equal(201, first.status)
    assert.same({ "zeta", "alpha" }, first.headers["x-multi"])
    assert.is_nil(first.headers["content-type"])
    local again = post(a, "/payments" .. q .. "&ctype=none", key, "{}")
    assert.equal("true", again.headers["idempotent-replayed"])
    assert.same({ "zeta", "alpha" }, again.headers["x-multi"])
    assert.is_nil(again.headers["content-type"], again.raw_head)
    assert.equal(first.body, again.body)
    assert.equal(1, executions(a, key))
  end)

  it("replays header names spelt as the backend sent them (X-Execution, not x-execution)", function()
    local key, q = fresh("case")
    local first = post(a, "/payments" .. q, key, "{}")
    assert.equal(201, first.status)
    assert.truthy(first.raw_head:find("\r\nX-Execution: ", 1, true), first.raw_head)
    local again = post(a, "/payments" .. q, key, "{}")
    assert.equal("true", again.headers["idempotent-replayed"])
    assert.truthy(again.raw_head:find("\r\nX-Execution: ", 1, true), again.raw_head)
    assert.truthy(again.raw_head:find("\r\nX-Multi: zeta\r\nX-Multi: alpha\r\n", 1, true), again.raw_head)
    assert.equal(1, executions(a, key))
  end)

  it("stores and replays the answer to a guarded HEAD (methods = { \"POST\", \"HEAD\" }): the backend runs once", function()
    local key, q = fresh("head")
    local function head() return request(a, "HEAD", "/heads" .. q, { headers = { ["Idempotency-Key"] = key } }) end
    local first = head()
    assert.equal(201, first.status)
    local again = head()
    assert.equal(201, again.status, again.raw_head)
    assert.equal("true", again.headers["idempotent-replayed"])
    assert.same(app_headers(first), app_headers(again))
    assert.equal(first.headers["content-length"], again.headers["content-length"])
    assert.equal("", again.body)
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

  it("answers 400 invalid-key to a key sent in two header lines, on every nginx (1.23+ joins them, 1.22 gave the first)", function()
    local key, q = fresh("twice")
    problem(request(a, "POST", "/payments" .. q, { body = "{}", headers = { ["Idempotency-Key"] = { key, key .. "-b" } } }),
      400, "invalid-key")
    problem(request(a, "POST", "/payments" .. q, { body = "{}", headers = { ["Idempotency-Key"] = { key, key } } }),
      400, "invalid-key")
    assert.equal(0, executions(a, q:sub(6)))
    assert.equal(201, post(a, "/payments" .. q, key, "{}").status)
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
end)

h.check_error_logs({
  -- Key and scope functions that raise or return a table, on purpose:
  "dlock: guard [%w_]+: no key: ",
})
