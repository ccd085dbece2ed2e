-- The guards of resty.dlock.gateway where the key, the phase or the client
-- does not go as planned: keys that cannot be computed, keys that are never
-- there, guards made per request, subrequests, and waiters whose client left;
-- a mutex guard whose GETs share the key (shared = { "GET" }).
-- Real nginx (nginx/spec-guards.conf, 2 workers), real HTTP, a backend that counts.
local h = require "helpers"
local cjson = require "cjson.safe"

local n
-- OpenResty built without --with-http_auth_request_module has no auth_request.
local auth_request = h.nginx_has("http_auth_request_module")

local function get(path, opts)
  return assert(h.http(n.port, path, opts))
end

--- The backend's "hits max_in_flight" for key: how many requests reached it, and the most of them at once.
local function stats(key)
  local count, max = h.backend_stats(n.backend, key)
  return count, max
end

local function hits(key)
  return (stats(key))
end

local function counters(name)
  return assert(cjson.decode(get("/dlock/status").body)).guards[name]
end

local function lines(pattern)
  local _, count = n.error_log():gsub(pattern, "")
  return count
end

describe("gateway guards", function()
  setup(function()
    local own = h.free_port()
    n = h.start_nginx("spec-guards.conf", { OWN_BACKEND_PORT = own, BACKEND_PORT = own,
      AUTH_REQUEST = auth_request and "auth_request" or "root" })
    n.backend = own
  end)

  teardown(function()
    if n then n.stop() end
  end)

  local key_errors_took   -- seconds the requests of the first test took: the log may have one line per worker and second of them

  it("read a key's nginx variables as ngx.var does: set, unset, unknown, any case, a header, a name past the buffer",
     function()
    local names = { "request_method", "uri", "request_uri", "remote_addr", "http_host", "HTTP_HOST",
      "Http_X_Api_Key", "http_x_api_key", "http_x_not_sent", "arg_names", "arg_none", "cookie_none",
      "no_such_variable", "1", ("x"):rep(300) }
    local res = get("/vars?names=" .. table.concat(names, ","), { headers = { ["X-Api-Key"] = "key-1" } })
    assert.equal(200, res.status)
    local seen = 0
    for name, verdict, mine in res.body:gmatch("(%S+) (%S+) (%S+) %S+\n") do
      seen = seen + 1
      assert.equal("same", verdict, name)
      if name:lower() == "http_x_api_key" then assert.equal("key-1", mine) end
      if name == "http_x_not_sent" then assert.equal("nil", mine) end
    end
    assert.equal(#names, seen, res.body)
  end)

  it("refuse the request (on_error = deny: 503) when the key function raises or returns a table, never let it through", function()
    local t0 = h.now()
    for _, name in ipairs({ "raises", "table_key" }) do
      for _ = 1, 6 do
        assert.equal(503, get("/" .. name .. "?key=" .. name).status)
      end
      assert.equal(0, hits(name))
      assert.is_true(counters(name).key_errors >= 6)
      assert.equal(0, counters(name).missing_key)
    end
    key_errors_took = h.now() - t0
  end)

  it("log a key that cannot be computed at error level, naming the guard and the problem, once an interval per worker", function()
    local raised = lines("%[error%][^\n]*guard raises: no key: the key function raised: [^\n]*no key today")
    local tbl = lines("%[error%][^\n]*guard table_key: no key: the key function returned a table, not a string")
    -- 6 requests each, 2 workers, one line per worker and interval (1 s here), not one per request.
    local most = math.min(5, 2 * (math.ceil(key_errors_took) + 1))
    assert.is_true(raised >= 1 and raised <= most, raised .. " lines")
    assert.is_true(tbl >= 1 and tbl <= most, tbl .. " lines")
    assert.is_truthy(n.error_log():find("refused with 503 (on_error = \"deny\")", 1, true))
  end)

  it("let the request through with on_error = allow when the key is not a string (a number), counted as key_errors", function()
    assert.equal(200, get("/number_key?key=number").status)
    assert.equal(1, hits("number"))
    assert.is_true(counters("number_key").key_errors >= 1)
    assert.is_true(h.eventually(2, function() return lines("guard number_key: no key: the key function returned a number") >= 1 end))
    assert.is_truthy(n.error_log():find("let through unguarded (on_error = \"allow\")", 1, true))
  end)

  it("say at warn level, once an interval, that a guard's key was missing on every request it let through", function()
    local deadline = h.now() + 2.5
    while h.now() < deadline do
      assert.equal(200, get("/misspelt?key=misspelt", { headers = { ["Idempotency-Key"] = "k" } }).status)
      ngx.sleep(0.02)
    end
    local count = lines("%[warn%][^\n]*guard misspelt: the key %(%$http_idempotency_kye%) was missing on all %d+ " ..
      "requests of the last %d+ s in this worker; they were let through unguarded %(on_missing = \"pass\"%)")
    -- 2.5 s of requests, 1 s intervals, 2 workers: at least one line, never one per request.
    assert.is_true(count >= 1 and count <= 6, count .. " lines")
    -- Clients that send no optional header are normal operation: nothing at error level.
    assert.equal(0, lines("%[error%][^\n]*guard misspelt: the key"))
  end)

  it("say it at error level when every request without the key was refused (on_missing = \"reject\")", function()
    local deadline = h.now() + 2.5
    while h.now() < deadline do
      assert.equal(400, get("/misspelt-strict?key=strict", { headers = { ["Idempotency-Key"] = "k" } }).status)
      ngx.sleep(0.02)
    end
    local count = lines("%[error%][^\n]*guard misspelt_strict: the key %(%$http_idempotency_kye%) was missing on all %d+ " ..
      "requests of the last %d+ s in this worker; they were refused with 400 %(on_missing = \"reject\"%)")
    assert.is_true(count >= 1 and count <= 6, count .. " lines")
  end)

  it("say nothing of a key that some requests have", function()
    local deadline = h.now() + 2.5
    local i = 0
    while h.now() < deadline do
      i = i + 1
      assert.equal(200, get("/optional?key=optional" .. (i % 2 == 0 and "&k=" .. i or "")).status)
      ngx.sleep(0.02)
    end
    assert.equal(0, lines("guard optional: the key"))
  end)

  it("answer 500 when access() is called with \".\" for \":\", never let the request through, and say how to write it", function()
    for _ = 1, 3 do assert.equal(500, get("/dot?k=1").status) end
    -- log() so called does nothing: the keeper ends the lease once the request is gone.
    assert.equal(200, get("/dot-log?k=" .. h.unique("dot")).status)
    assert.is_true(h.eventually(2, function()
      local log = n.error_log()
      -- Once per worker and method, not per request.
      local said = select(2, log:gsub("guard:access%(%) was called without its guard", ""))
      return said >= 1 and said <= 2
        and log:find('guard:log() was called without its guard (with "." where ":" was meant): write guards.name:log()', 1, true) ~= nil
    end))
    assert.is_nil(n.error_log():find("failed to run log_by_lua", 1, true))
  end)

  it("refuse gateway.new inside a request, naming why", function()
    local res = get("/new")
    assert.equal("nil dlock: gateway.new in the content phase: create guards once, in init_by_lua or init_worker_by_lua, " ..
      "not per request (a guard made per request excludes nothing and adds metrics without bound)\n", res.body)
  end)

  it("never run in a subrequest from its access phase (ngx.location.capture, auth_request): nginx skips it", function()
    local before = counters("sub")
    assert.equal("200\n", get("/capture?to=/sub-access&key=sub-access").body)
    if auth_request then
      assert.equal(200, get("/auth?key=sub-access").status)
    else
      io.stdout:write("guards_spec: this nginx has no auth_request module: its case was not run\n")
    end
    local after = counters("sub")
    assert.equal(before.acquired, after.acquired)
    assert.equal(before.missing_key, after.missing_key)
    assert.equal(1, hits("sub-access"))
  end)

  it("run in the rewrite phase, of a main request and of a subrequest: two at once with one key, the second refused", function()
    for _, path in ipairs({ "/main-rewrite?key=rw-main&ms=500", "/capture?to=/sub-rewrite&key=rw-sub&ms=500" }) do
      local first = ngx.thread.spawn(get, path)
      ngx.sleep(0.1)
      local second = get(path)
      local _, res = ngx.thread.wait(first)
      assert.equal(200, res.status)
      if path:find("capture", 1, true) then
        assert.equal("200\n", res.body)
        assert.equal("503\n", second.body)
      else
        assert.equal(503, second.status)
      end
    end
    assert.equal(1, hits("rw-main"))
    assert.equal(1, hits("rw-sub"))
    -- Released when the request ends (its log phase, after the response: a request sent the moment
    -- the response arrives may still find the key taken): free again soon after.
    assert.is_true(h.eventually(1, function() return get("/main-rewrite?key=rw-main").status == 200 end))
  end)

  it("with lua_check_client_abort on, give up a waiter's place when its client leaves: the next waiter gets the key as soon as it is free", function()
    local holder = ngx.thread.spawn(get, "/queue?key=queue&ms=1000")
    ngx.sleep(0.1)
    get("/queue?key=queue&ms=3000", { abort_after = 200 })   -- waits, then its client leaves
    local t0 = h.now()
    local next_res = get("/queue?key=queue&ms=0")
    local waited = h.now() - t0
    local _, first = ngx.thread.wait(holder)
    assert.equal(200, first.status)
    assert.equal(200, next_res.status)
    -- The holder ends at about 1 s; the waiter that left never ran.
    assert.is_true(waited < 1.5, "waited " .. waited .. " s")
    assert.equal(2, hits("queue"))
  end)

  it("without lua_check_client_abort, a waiter whose client left still takes its turn, and the key stays taken for its ttl", function()
    local holder = ngx.thread.spawn(get, "/queue-unchecked?key=unchecked&ms=1000")
    ngx.sleep(0.1)
    get("/queue-unchecked?key=unchecked&ms=1000", { abort_after = 200 })
    local t0 = h.now()
    assert.equal(200, get("/queue-unchecked?key=unchecked&ms=0").status)
    ngx.thread.wait(holder)
    -- The holder ends at about 1 s; the waiter that left took the key then, and kept it (ttl 3 s).
    assert.is_true(h.now() - t0 >= 2.5, "waited " .. (h.now() - t0) .. " s")
  end)

  --- A request to the mutex guard with shared GETs (/rw), in a light thread: waits for its status and when it ended.
  local function rw(method, key, ms)
    return h.spawn(function()
      local res = assert(h.http(n.port, "/rw?key=" .. key .. "&ms=" .. ms, { method = method,
        headers = { ["Content-Length"] = "0" } }))
      return res.status, h.now()
    end)
  end

  it("mutex with shared methods: lets GETs through side by side, and a PUT alone, the GETs that came after it waiting for it", function()
    local key = h.unique("gw"):gsub(":", "_")
    local gets = {}
    for i = 1, 4 do gets[i] = rw("GET", key, 200) end
    for i = 1, 4 do assert.equal(200, (gets[i]())) end
    local count, max = stats(key)
    assert.equal(4, count)
    assert.equal(4, max)
    -- The readers gave the key back as their requests ended: a write goes through at once.
    local t0 = h.now()
    assert.equal(200, (rw("PUT", key, 0)()))
    assert.is_true(h.now() - t0 < 1, "the PUT waited " .. (h.now() - t0) .. " s")
    -- A write, then reads while it runs: they wait for it, and then share.
    key = key .. "_2"
    local put = rw("PUT", key, 300)
    ngx.sleep(0.1)
    for i = 1, 3 do gets[i] = rw("GET", key, 100) end
    local status, put_done = put()
    assert.equal(200, status)
    for i = 1, 3 do
      local s, at = gets[i]()
      assert.equal(200, s)
      assert.is_true(at > put_done - 0.05, "a GET ended before the PUT it waited for")
    end
    count, max = stats(key)
    assert.equal(4, count)
    assert.equal(3, max)
  end)

  it("mutex with shared methods: refuses shared outside mode mutex, a list that is not of methods, and under redis.redlock", function()
    local gateway = require "resty.dlock.gateway"
    local base = { mode = "dedup", key = "$arg_k", on_error = "deny", redis = h.redis_opts(), shared = { "GET" } }
    local g, err = gateway.new(base)
    assert.is_nil(g)
    assert.matches("shared applies to mode mutex only, not dedup", err, 1, true)
    base.mode = "mutex"
    base.shared = { "get" }
    g, err = gateway.new(base)
    assert.is_nil(g)
    assert.matches("shared must be a list of upper-case HTTP methods", err, 1, true)
    base.shared = "GET"
    g, err = gateway.new(base)
    assert.is_nil(g)
    assert.matches("shared must be a list of HTTP methods", err, 1, true)
    base.shared = { "GET" }
    base.redis = { redlock = { "127.0.0.1:" .. h.redis_port, "127.0.0.1:1", "127.0.0.1:2" } }
    g, err = gateway.new(base)
    assert.is_nil(g)
    assert.matches("shared = true is refused with redis.redlock", err, 1, true)
  end)
end)

h.check_error_logs({
  -- Key functions that raise or return a non-string, and a guard whose key is always missing, on purpose:
  "dlock: guard [%w_]+: no key: the key function ",
  "dlock: guard misspelt_strict: the key %(%$http_idempotency_kye%) was missing on all %d+ requests",
  -- /dot and /dot-log call the guard's methods with ".", on purpose.
  "dlock: guard:%a+%(%) was called without its guard",
})
