-- Guards where an operator's nginx.conf meets them (nginx/spec-worker-handoff.conf,
-- with nginx/spec-operator-backend.conf as the application behind it): a
-- client's next request taken by another worker while its previous request's
-- release is still on its way (gateway/onway.ts); a guard under `satisfy any`;
-- proxy_ignore_client_abort beside lua_check_client_abort. Real nginx, real
-- redis-server, real HTTP.
local h = require "helpers"

local app

local function gw(vars)
  local v = { APP_PORT = app.port, WORKERS = 2, HTPASSWD = h.env.prefix .. "/handoff-htpasswd" }
  for k, x in pairs(vars or {}) do v[k] = x end
  return h.start_nginx("spec-worker-handoff.conf", v)
end

setup(function()
  local f = assert(io.open(h.env.prefix .. "/handoff-htpasswd", "w"))
  f:write("admin:{PLAIN}secret\n")
  f:close()
  app = h.start_nginx("spec-operator-backend.conf")
end)

teardown(function()
  if app then app.stop() end
end)

describe("a client's requests one after another, each on a new connection, two workers", function()
  local n
  setup(function() n = gw() end)
  teardown(function() n.stop() end)

  -- Its release leaves after the response (the log phase has no cosockets):
  -- the next request, on the other worker, can reach Redis first.
  it("are never refused as busy by a concurrency, dedup or mutex guard with wait = 0 (each starts after the answer to the one before)",
    function()
      local total, report = h.one_after_another(n.port, { "/cap", "/dd", "/jobs" }, 300)
      assert.equal(0, total, report)
    end)

  it("still refuses a request beside one in flight at once (a mutex with wait = 0 answers 503 without waiting)", function()
    local key = h.unique("beside")
    local first = h.spawn(h.http, n.port, "/jobs?key=" .. key .. "&ms=600")
    ngx.sleep(0.2)
    local took, res = h.took(h.http, n.port, "/jobs?key=" .. key)
    assert.equal(503, assert(res).status)
    -- No release of that key was on its way: nothing to wait for.
    assert.is_true(took < 0.1, "the refusal took " .. took .. " s")
    assert.equal(200, assert(first()).status)
    local _, most = h.backend_stats(app.port, key)
    assert.equal(1, most)
  end)
end)

describe("a mutex guard in an admin area under `satisfy any` (allow 127.0.0.1, or auth_basic)", function()
  local n
  setup(function() n = gw() end)
  teardown(function() n.stop() end)

  -- README, Caveats: satisfy any skips access_by_lua once allow lets a request in.
  it("runs the job once at a time with the guard in rewrite_by_lua", function()
    local key = h.unique("sat")
    local res = h.parallel(3, function() return h.http(n.port, "/sat-rw?key=" .. key .. "&ms=400") end)
    local statuses = {}
    for i, r in ipairs(res) do statuses[i] = assert(r).status end
    table.sort(statuses)
    assert.same({ 200, 503, 503 }, statuses)
    local hits, most = h.backend_stats(app.port, key)
    assert.same({ 1, 1 }, { hits, most })
  end)
end)

describe("a mutex guard where proxy_ignore_client_abort on has nginx wait for the job when its client leaves", function()
  local n
  setup(function() n = gw() end)
  teardown(function() n.stop() end)

  --- The status of the job's next run 0.5 s after the first, whose client left at 0.2 s, ended.
  local function next_run(loc, key)
    assert(h.http(n.port, "/" .. loc .. "?key=" .. key .. "&ms=800", { abort_after = 200 }))
    ngx.sleep(1.3)
    local _, _, inside = h.backend_stats(app.port, key)
    assert.equal(0, inside)
    return assert(h.http(n.port, "/" .. loc .. "?key=" .. key .. "&ms=10")).status
  end

  it("frees the key once the job ended with lua_check_client_abort off, as the README advises there", function()
    assert.equal(200, next_run("jobs-finish-nocheck", h.unique("ign")))
  end)

  -- README, Caveats: lua_check_client_abort on cuts the upstream when the client
  -- leaves, proxy_ignore_client_abort or not; the guard keeps the key to its ttl.
  it("keeps the key to its ttl with lua_check_client_abort on (nginx cut the job's connection)", function()
    assert.equal(503, next_run("jobs-finish", h.unique("ign")))
  end)
end)

h.check_error_logs({})
