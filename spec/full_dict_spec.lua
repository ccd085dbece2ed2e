-- The README's gateway with its dlock dict full of held leases (lua_shared_dict
-- dlock 1m, the README's first example, filled by the operator's own locks
-- through the Lua API): the dict is bookkeeping, and a full one must not turn
-- off what the guards keep there. Their counters and breakers are made with
-- the guards, while the dict has room, as numbers an incr or a number replaces
-- without memory (nginx/spec-operator.conf, real nginx, real Redis paused).
local h = require "helpers"

local r, n

local function get(path, headers)
  return assert(h.http(n.port, path, { headers = headers }))
end

local function row(name) return h.guard_row(n.port, name) end

describe("a gateway whose dict is full of held leases", function()
  setup(function()
    r = h.start_redis()
    local own = h.free_port()
    n = h.start_nginx("spec-operator.conf", { REDIS_PORT = r.port, BACKEND_PORT = own, UPSTREAM_PORT = own,
      DICT_SIZE = "1m", CODE_CACHE = "on" })
    -- More locks than 1m of records: the dict is full, some go unrecorded.
    local filled = get("/fill?n=6000&ttl=120000&p=" .. h.unique("fill"))
    local taken, unrecorded = filled.body:match("^(%d+) (%d+)")
    assert.equal(6000, tonumber(taken))
    assert.is_true(tonumber(unrecorded) > 0, "the dict did not fill: " .. filled.body)
  end)
  teardown(function()
    if r then r.signal("CONT") end
    if n then n.stop() end
    if r then r.stop() end
  end)

  it("counts what its guards decide: acquired, rejected", function()
    local before = row("orders")
    local key = h.unique("order")
    local first = h.spawn(get, "/orders?ms=400", { ["Idempotency-Key"] = key })
    ngx.sleep(0.1)
    assert.equal(409, get("/orders", { ["Idempotency-Key"] = key }).status)
    assert.equal(200, first().status)
    local after = row("orders")
    assert.equal(1, after.acquired - before.acquired)
    assert.equal(1, after.rejected - before.rejected)
  end)

  it("opens a guard's breaker after breaker_failures (3) Redis timeouts in a row: the requests after them are refused " ..
     "at once, and every failure is counted", function()
    local before = row("jobs")
    r.signal("STOP")
    finally(function() r.signal("CONT") end)
    for _ = 1, 3 do assert.equal(503, get("/jobs?job=" .. h.unique("j")).status) end
    local during = row("jobs")
    assert.equal("open", during.breaker)
    assert.equal(3, during.redis_errors - before.redis_errors)
    assert.equal(3, during.failed_closed - before.failed_closed)
    for _ = 1, 3 do
      local t0 = h.now()
      assert.equal(503, get("/jobs?job=" .. h.unique("j")).status)
      assert.is_true(h.now() - t0 < 0.2, "a request waited " .. (h.now() - t0) .. " s on the paused Redis")
    end
    assert.equal(3, row("jobs").short_circuited - before.short_circuited)
  end)
end)

h.check_error_logs({
  -- Redis paused on purpose: the guard and nginx say so.
  "lua tcp socket read timed out",
  "dlock: guard jobs: redis 127%.0%.0%.1:%d+: timeout during acquire",
  "dlock: guard jobs: Redis keeps failing",
})
