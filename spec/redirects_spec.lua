-- Guards across nginx's internal redirects and subrequests, as an operator's
-- nginx.conf uses them (nginx/spec-redirects.conf, 2 workers; the
-- application another nginx, nginx/spec-operator-backend.conf). Real nginx,
-- real redis-server of its own (to count lock keys), real HTTP.
local h = require "helpers"
local cjson = require "cjson.safe"

local app, redis, n
-- OpenResty built without --with-http_auth_request_module has no auth_request.
local auth_request = h.nginx_has("http_auth_request_module")

local function get(path, opts)
  local res, err = h.http(n.port, path, opts)
  assert(res, err)
  return res
end

local function row(name)
  return assert(cjson.decode(get("/dlock/status").body)).guards[name]
end

local function lock_keys(name)
  return h.cmd(redis.port, "keys", "dlock:gw:" .. name .. ":*")
end

--- Seconds until no lock key of guard `name` is left in Redis, or nil after `within` s.
local function released_within(name, within)
  local t0 = h.now()
  repeat
    if #lock_keys(name) == 0 then return h.now() - t0 end
    ngx.sleep(0.01)
  until h.now() - t0 > within
  return nil
end

--- An HTTP/1.1 GET read as a browser reads it: up to the end of its Content-Length
--- (not to the connection's close). Returns { status, body, sock } (sock left open).
local function fetch(path, headers)
  local sock = ngx.socket.tcp()
  sock:settimeout(10000)
  assert(sock:connect("127.0.0.1", n.port))
  local lines = { "GET " .. path .. " HTTP/1.1", "Host: localhost" }
  for k, v in pairs(headers or {}) do lines[#lines + 1] = k .. ": " .. v end
  assert(sock:send(table.concat(lines, "\r\n") .. "\r\n\r\n"))
  local status = tonumber(assert(sock:receive("*l")):match("^HTTP/1%.%d (%d+)"))
  local len
  while true do
    local line = assert(sock:receive("*l"))
    if line == "" then break end
    local v = line:lower():match("^content%-length:%s*(%d+)")
    if v then len = tonumber(v) end
  end
  local body = len and len > 0 and assert(sock:receive(len)) or ""
  return { status = status, body = body, sock = sock }
end

describe("guards across redirects and subrequests", function()
setup(function()
  redis = h.start_redis()
  app = h.start_nginx("spec-operator-backend.conf")
  n = h.start_nginx("spec-redirects.conf", { APP_PORT = app.port, REDIS_PORT = redis.port,
    AUTH_REQUEST = auth_request and "auth_request" or "root" })
end)

teardown(function()
  if n then n.stop() end
  if app then app.stop() end
  if redis then redis.stop() end
end)

describe("one request per client and endpoint (key \"$remote_addr:$uri\", README), the application's 404 " ..
         "answered by the search endpoint under the same location (error_page 404 = /api/search...)", function()
  it("never has two of one client's requests in the search endpoint at once", function()
    local key = h.unique("ep")
    -- The client's search, straight to it: holds 127.0.0.1:/api/search.
    local direct = h.spawn(get, "/api/search?key=" .. key .. "&ms=800")
    ngx.sleep(0.2)
    -- An item the application does not have: its 404 goes on to /api/search, the same endpoint.
    local via = get("/api/item?key=" .. h.unique("item") .. "&status=404&to=" .. key .. "&ms=300")
    local d = assert(direct())
    assert.equal(200, d.status)
    local hits, most = h.backend_stats(app.port, key)
    assert.equal(1, most, "two requests of one client ran in /api/search at once (hits " .. hits ..
      "; the redirected one answered " .. via.status .. ")")
  end)
end)

describe("a client's requests one after another (each on a new connection, 2 workers), ending in another " ..
         "location than the guarded one", function()
  for _, path in ipairs({ "/seq-files", "/seq-err", "/seq-exec", "/seq-rewrite" }) do
    it("are never refused by the client's previous request: " .. path, function()
      local before = row("jobs")
      local key = h.unique("seq")
      local refused, first = 0, {}
      for i = 1, 60 do
        local res = get(path .. "?key=" .. key)
        if res.status ~= 200 then
          refused = refused + 1
          if #first < 5 then first[#first + 1] = i .. ":" .. res.status end
        end
      end
      assert.equal(0, refused, path .. " refused " .. refused .. " of 60 (" .. table.concat(first, " ") .. ")")
      assert.is_truthy(released_within("jobs", 0.3), "a lock key of jobs still in Redis 300 ms after the last answer")
      local after = row("jobs")
      assert.equal(before.unlogged, after.unlogged)
      assert.equal(0, after.in_flight)
    end)
  end
end)

describe("auth_request to a location guarded in rewrite_by_lua (README, Caveats), one request per user", function()
  if not auth_request then
    io.stdout:write("redirects_spec: this nginx has no auth_request module: its cases were not run\n")
    return
  end
  it("never refuses a user's request because of the user's previous one, ended before it was sent", function()
    local user = h.unique("user")
    local refused, first = 0, {}
    for i = 1, 30 do
      local res = get("/authed403?key=" .. user .. "&ms=0", { headers = { ["X-User"] = user } })
      if res.status ~= 200 then
        refused = refused + 1
        if #first < 5 then first[#first + 1] = i .. ":" .. res.status end
      end
    end
    -- Once the request has ended, how long does its auth lease stay in Redis?
    ngx.sleep(0.6)
    local t0 = h.now()
    get("/authed403?key=" .. user .. "&ms=0", { headers = { ["X-User"] = user } })
    local answered = h.now() - t0
    local gone = released_within("auth403", 2)
    assert.equal(0, refused, "refused " .. refused .. " of 30 (" .. table.concat(first, " ") .. "); after an answer in " ..
      string.format("%.3f", answered) .. " s the auth lease left Redis " .. tostring(gone and string.format("%.3f s", gone)) ..
      " later; unlogged " .. row("auth403").unlogged)
  end)

  it("does not tell an operator with gateway.log() at http level to add it, for a lease a subrequest took", function()
    local user = h.unique("adv")
    get("/authed403?key=" .. user .. "&ms=0", { headers = { ["X-User"] = user } })
    assert.is_truthy(released_within("auth403", 1.5))
    local wrong = {}
    for line in n.error_log():gmatch("[^\n]+") do
      if line:find("at http level", 1, true) and line:find('subrequest: "', 1, true) then wrong[#wrong + 1] = line end
    end
    assert.equal(0, #wrong, wrong[1])
  end)

  it("lets one of a user's requests in at a time, the other refused with reject_status = 403 (auth_request passes 401/403 on)",
    function()
      local user = h.unique("user403")
      local first = h.spawn(get, "/authed403?key=" .. user .. "&ms=600", { headers = { ["X-User"] = user } })
      ngx.sleep(0.2)
      local second = get("/authed403?key=" .. user .. "&ms=0", { headers = { ["X-User"] = user } })
      assert.equal(200, assert(first()).status)
      assert.equal(403, second.status)
      local hits, most = h.backend_stats(app.port, user)
      assert.same({ 1, 1 }, { hits, most })
    end)
end)

describe("ngx.location.capture of a location guarded in rewrite_by_lua", function()
  it("keeps a subrequest's key for its main request: a second capture of that key in the same request is refused", function()
    -- nginx runs no log phase for a subrequest and says nothing when one is over:
    -- its lease ends with its main request's log() (README, Caveats).
    local key = h.unique("twice")
    local res = get("/capture-twice?key=" .. key .. "&ms=50")
    assert.equal(200, res.status)
    assert.equal("200 429\n", res.body)
    assert.is_truthy(released_within("cap", 0.3), "the key still in Redis 300 ms after the main request's answer")
  end)

  it("runs capture_multi of two keys side by side", function()
    local res = get("/capture-multi?key=" .. h.unique("multi"))
    assert.equal("200 200\n", res.body)
  end)

  it("does not refuse a client's next request because of the subrequest of its previous one", function()
    local key = h.unique("capseq")
    local refused, first = 0, {}
    for i = 1, 20 do
      local res = get("/capture-once?key=" .. key)
      if res.body ~= "200\n" then
        refused = refused + 1
        if #first < 5 then first[#first + 1] = i .. ":" .. res.body:gsub("\n", "") end
      end
    end
    assert.equal(0, refused, "refused " .. refused .. " of 20 (" .. table.concat(first, " ") .. ")")
  end)
end)

describe("a dedup guard on a location mirrored to a shadow backend (mirror)", function()
  it("keeps the key until the shadow copy is done (nginx logs the request only then), and frees it then", function()
    local key = h.unique("mir")
    local a = fetch("/mirrored?key=" .. key .. "&shadow=800")
    assert.equal(200, a.status)
    ngx.sleep(0.1)
    local b = fetch("/mirrored?key=" .. key .. "&shadow=0")
    b.sock:close()
    assert.equal(409, b.status, "the client's next request while the shadow ran")
    assert.is_truthy(released_within("dd", 1.5), "the key still in Redis 1.5 s after the answer")
    local c = fetch("/mirrored?key=" .. key .. "&shadow=0")
    a.sock:close()
    c.sock:close()
    assert.equal(200, c.status)
  end)
end)

describe("a dedup guard on a location with post_action", function()
  it("releases the key when the post_action ends, with no error line, nothing left in Redis", function()
    local key = h.unique("pa")
    local before = row("dd")
    local a = fetch("/pa?key=" .. key .. "&after=300")
    assert.equal(200, a.status)
    a.sock:close()
    assert.is_truthy(released_within("dd", 1.5), "a dd key still in Redis 1.5 s after the answer")
    local after = row("dd")
    assert.equal(before.unlogged, after.unlogged)
    assert.equal(before.aborted, after.aborted)
    assert.equal(0, after.in_flight)
  end)

  it("keeps the key while the post_action runs (nginx logs the request only then)", function()
    local key = h.unique("pa")
    local a = fetch("/pa?key=" .. key .. "&after=600")
    ngx.sleep(0.1)
    local b = fetch("/pa?key=" .. key .. "&after=0")
    a.sock:close()
    b.sock:close()
    assert.equal(409, b.status)
  end)
end)

describe("a concurrency guard with wait over the whole site, its busy page (error_page 429) a path of the site", function()
  it("answers a request it refused with the busy page, after one wait, not a second", function()
    local user = h.unique("q")
    local before = row("q")
    local holder = h.spawn(get, "/q/x?key=" .. user .. "&ms=2000", { headers = { ["X-User"] = user } })
    ngx.sleep(0.2)
    local took, res = h.took(get, "/q/x?key=" .. user, { headers = { ["X-User"] = user } })
    assert(holder())
    local after = row("q")
    assert.same({ 429, "served busy-page\n", 1 },
      { res.status, res.body, after.timed_out - before.timed_out },
      string.format("took %.2f s", took))
  end)
end)

describe("limit_except, HEAD, return at server level", function()
  it("guards a POST that limit_except lets in like a GET: one at a time", function()
    local key = h.unique("le")
    local first = h.spawn(get, "/ro?key=" .. key .. "&ms=600", { method = "POST", body = "x" })
    ngx.sleep(0.2)
    assert.equal(503, get("/ro?key=" .. key).status)
    assert.equal(503, get("/ro?key=" .. key, { method = "POST", body = "y" }).status)
    assert.equal(200, assert(first()).status)
    local _, most = h.backend_stats(app.port, key)
    assert.equal(1, most)
  end)

  it("releases a HEAD's key at once: HEADs and GETs one after another are never refused, none kept as aborted", function()
    local key = h.unique("head")
    local before = row("jobs")
    local refused = 0
    for i = 1, 30 do
      local res = get("/ro?key=" .. key, { method = (i % 2 == 1) and "HEAD" or "GET" })
      if res.status ~= 200 then refused = refused + 1 end
    end
    assert.equal(0, refused)
    assert.is_truthy(released_within("jobs", 0.3))
    local after = row("jobs")
    assert.equal(before.aborted, after.aborted)
    assert.equal(before.acquired + 30, after.acquired)
  end)

  it("takes nothing for a request answered by `return` in the server block", function()
    local before = row("jobs")
    assert.equal(403, get("/ro?key=" .. h.unique("ret") .. "&blocked=1").status)
    local after = row("jobs")
    assert.equal(before.acquired, after.acquired)
    assert.equal(0, after.in_flight)
  end)
end)

describe("nginx -s reload between a request's redirect steps (a long application call, then error_page " ..
         "to a location with another guard)", function()
  it("keeps both keys excluded through the reload, releases both when the request ends, the old worker exits", function()
    local key = h.unique("rl")
    local before_cap = row("cap")
    local slow = h.spawn(get, "/two-step?key=" .. key .. "&ms=1000&ms2=400")
    ngx.sleep(0.3)
    local old = n.workers()
    assert.is_true(n.reload())
    ngx.sleep(0.4)
    -- In the first step, after the reload: the new workers see the old worker's lease in Redis.
    assert.equal(503, get("/two-step?key=" .. key .. "&ms=0&ms2=0").status)
    ngx.sleep(0.45)
    -- In the second step (@step2, guard cap), taken by the old worker after the reload.
    assert.equal("429\n", get("/capture-once?key=" .. key).body)
    local res = assert(slow())
    assert.equal(200, res.status)
    assert.equal("served " .. key .. "\n", res.body)
    assert.is_truthy(released_within("jobs", 0.5), "jobs key left")
    assert.is_truthy(released_within("cap", 0.5), "cap key left")
    local ok, why = n.replaced(old, 2)
    assert.is_true(ok, why)
    local _, most = h.backend_stats(app.port, key)
    assert.equal(1, most)
    assert.equal(before_cap.unlogged, row("cap").unlogged)
  end)
end)

end)

h.check_error_logs()
