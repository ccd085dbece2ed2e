-- The README's gateway over deploys: its "Gateway guards (nginx.conf)"
-- essentials in nginx/spec-operator.conf (a real Redis, worker_processes auto,
-- a backend nginx of its own: nginx/spec-operator-backend.conf), reloaded twice
-- as a deploy tool may. A worker that exited gracefully is no crash: what it
-- kept on purpose (a hold, a client abort's lock) stays kept, however many
-- reloads later crash recovery sweeps.
local h = require "helpers"

--- The operator's conf on Redis r (opts: dict_size, code_cache, upstream: the port of a backend
--- nginx of its own, else this nginx's own backend server): the nginx.
local function operator_nginx(r, opts)
  opts = opts or {}
  local own = h.free_port()
  return h.start_nginx("spec-operator.conf", { REDIS_PORT = r.port, BACKEND_PORT = own, UPSTREAM_PORT = opts.upstream or own,
    DICT_SIZE = opts.dict_size or "10m", CODE_CACHE = opts.code_cache or "on" })
end

--- nginx -s reload, then until the old workers are gone and new ones run.
local function reload(n)
  local old = n.workers()
  assert.is_true(n.reload())
  assert(n.replaced(old, #old))
end

local function get(n, path, headers)
  return assert(h.http(n.port, path, { headers = headers }))
end


describe("the README's gateway over deploys (nginx -s reload twice, as a deploy tool may)", function()
  local r, backend, n

  setup(function()
    r = h.start_redis()
    backend = h.start_nginx("spec-operator-backend.conf")
    n = operator_nginx(r, { upstream = backend.port })
  end)

  teardown(function()
    if n then n.stop() end
    if backend then backend.stop() end
    if r then r.stop() end
  end)

  it("keeps a dedup key taken for `hold` ms after a 2xx across the reloads: a client's retry within the hold is refused 409", function()
    local key = h.unique("order")
    local first = get(n, "/orders?key=" .. key, { ["Idempotency-Key"] = key })
    assert.equal(200, first.status)
    ngx.update_time()
    local t0 = ngx.now()
    reload(n)
    reload(n)
    ngx.sleep(0.3) -- the new workers' init_worker
    local retry = get(n, "/orders?key=" .. key, { ["Idempotency-Key"] = key })
    ngx.update_time()
    -- README table: "with hold (ms) the key stays taken after a 2xx, so immediate client retries are refused too" (hold = 5000).
    assert.is_true(ngx.now() - t0 < 4, "the reloads took too long for this test")
    assert.equal(409, retry.status)
  end)

  it("keeps a mutex key whose client went away while the backend works across the reloads: no second run of the job beside the first",
    function()
    local job = h.unique("job")
    -- The backend works 8 s on it; the client gives up after 300 ms (an abort: the key is kept, unrenewed, up to its ttl, 30 s).
    assert.is_true(h.http(n.port, "/jobs?job=" .. job .. "&ms=8000&key=" .. job, { abort_after = 300 }).aborted)
    ngx.sleep(0.3)
    assert.equal(1, h.guard_row(n.port, "jobs").aborted)
    reload(n)
    reload(n)
    ngx.sleep(0.3)
    local again = get(n, "/jobs?job=" .. job .. "&ms=10&key=" .. job)
    local _, most = h.backend_stats(backend.port, job)
    -- README "Through the life of a request", client goes away while the upstream works, mutex:
    -- "lock kept the same way: no second run beside the first"; reload: "Nothing is lost on a deploy".
    assert.equal(503, again.status)
    assert.equal(1, most, "the backend ran the job twice at once")
  end)
end)

h.check_error_logs()
