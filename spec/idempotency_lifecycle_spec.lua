-- The idempotency guard along a response's way and an nginx's life: which
-- statuses are stored, a response without a body, one after an internal
-- redirect, one over max_body, a request body over max_request_body or in a
-- temp file, the claim renewed while the request runs, kept when the client
-- goes away, through a log handler of the location's own and nginx -s reload;
-- Redis down, and paused while responses are stored; the counts. Real nginx (nginx/spec-idempotency.conf), real HTTP.
-- What a key and its duplicates get is in idempotency_spec.lua.
local h = require "helpers"
local idem = require "idempotency_client"

local start, request, post, executions, guard, problem, fresh =
  idem.start, idem.request, idem.post, idem.executions, idem.guard, idem.problem, idem.fresh

local a, b, redis   -- two nginx of one fleet: b forwards to a's backend, both use one Redis

describe("gateway mode idempotency", function()
  setup(function() a, b, redis = idem.up() end)
  teardown(idem.down)

  it("takes a store sent again (its first reply lost to a timeout, the first landed) as stored, not as a claim run out", function()
    local records = require "resty.dlock.redis.records"
    local k = h.unique("idem-store-twice")
    local function eval(s, ...) return h.cmd(nil, "eval", s.src, 1, k, ...) end
    assert.equal("OK", eval(records.IDEM_CLAIM, "tok", 5000, "fp"))
    assert.equal(1, eval(records.IDEM_COMPLETE, "tok", 60000, "done", 201, "", "body"))
    assert.equal(1, eval(records.IDEM_COMPLETE, "tok", 60000, "done", 201, "", "body"))
    -- Another's token is still refused: its claim ran out and the key is someone else's.
    assert.equal(0, eval(records.IDEM_COMPLETE, "other", 60000, "done", 201, "", "body"))
    assert.equal("done", h.cmd(nil, "hget", k, "state"))
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
    local _, max = h.backend_stats(a.backend, key)
    assert.is_true(executions(a, key) >= 2)
    assert.equal(1, max)
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

  it("logs the responses it could not store while Redis was paused once per worker and interval, and counts each",
     function()
    local before = guard(a, "payments")
    local log_before = #a.error_log()
    local posts = {}
    for i = 1, 6 do
      local key, q = fresh("paused")
      posts[i] = ngx.thread.spawn(post, a, "/payments" .. q .. "&ms=400", key, "{}")
    end
    ngx.sleep(0.2)
    redis.signal("STOP")
    finally(function() redis.signal("CONT") end)
    for i = 1, 6 do
      local ok, res = ngx.thread.wait(posts[i])
      assert.is_true(ok)
      assert.equal(201, res.status)
    end
    -- Each store is tried until its claim would run out (lease 1.5 s), then counted not_stored.
    assert.is_true(h.eventually(5, function() return guard(a, "payments").not_stored - before.not_stored >= 6 end))
    local seen, total = {}, 0
    for pid in a.error_log():sub(log_before + 1):gmatch(
        "%[error%] (%d+)#%d+: [^\n]*dlock: guard payments: response not stored, the claim runs out") do
      seen[pid] = (seen[pid] or 0) + 1
      total = total + 1
    end
    for pid, n in pairs(seen) do assert.equal(1, n, "worker " .. pid .. " logged " .. n .. " lines") end
    assert.is_true(total >= 1 and total <= 2, total .. " lines")
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
  -- Guards in front of a Redis that is down, on purpose (on_error):
  "connect%(%) failed %(111: Connection refused%), client:",
  "dlock: guard %w+: redis 127%.0%.0%.1:%d+: connection refused",
  -- Redis paused while responses are stored, on purpose: the stores time out (9 seen on Debian's nginx, 13 on OpenResty), one line per worker says so.
  -- (OpenResty's lua-nginx-module names the upstream before the context.)
  { "lua tcp socket read timed out, .-context: ngx%.timer", max = 20 },
  { "dlock: guard payments: response not stored, the claim runs out: redis 127%.0%.0%.1:%d+: timeout", max = 2 },
})
