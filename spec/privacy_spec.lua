-- What a holder can see: the fields README ("## Lua API", "## Semaphores") and
-- the typed API (api/index.d.ts) document, and nothing else but the library's
-- own, named with a leading "_". Nothing else is a promise.
local h = require "helpers"
local dlock = require "resty.dlock"
local semaphore = require "resty.dlock.semaphore"

--- The names in t (its own fields, then those of its metatable's __index) that
--- are neither in `public` nor start with "_".
local function undocumented(t, public)
  local out = {}
  local function look(tbl)
    for k in pairs(tbl) do
      if not public[k] and not (type(k) == "string" and k:sub(1, 1) == "_") then out[#out + 1] = tostring(k) end
    end
  end
  look(t)
  local mt = getmetatable(t)
  if mt and type(mt.__index) == "table" then look(mt.__index) end
  table.sort(out)
  return out
end

local function set(...)
  local s = {}
  for _, k in ipairs({ ... }) do s[k] = true end
  return s
end

local LEASE = set("key", "token", "ttl", "fence", "shared", "release", "extend", "valid")
local LOCKS = set("acquire", "acquire_all", "with", "held", "prefix", "ttl", "wait", "owner", "reentrant")
local MULTI = set("key", "keys", "token", "ttl", "fence", "fences", "shared", "release", "extend", "valid")
local SEMAPHORE = set("acquire", "with", "held", "prefix", "ttl", "wait", "permits")
local GUARD = set("name", "mode", "access", "log")
local IDEM_GUARD = set("name", "mode", "access", "log", "header_filter", "body_filter")
local LIMITER = set("name", "prefix", "incoming", "uncommit")

describe("privacy", function()
  it("a lease shows key, token, ttl, fence and its methods; the rest is _-prefixed", function()
    local locks = h.locks({ fencing = true })
    local lease = assert(locks:acquire("a", { ttl = 5000 }))
    assert.is_number(lease.fence)
    assert.same({}, undocumented(lease, LEASE))
    assert.is_true(lease:release())
    -- Released, and renewed by the watchdog: the same names.
    local renewed = assert(locks:acquire("b", { ttl = 5000, renew = true, on_lost = function() end }))
    assert.same({}, undocumented(renewed, LEASE))
    assert.is_true(renewed:release())
    assert.same({}, undocumented(renewed, LEASE))
  end)

  it("a lease of several keys (acquire_all) shows keys and fences besides a lease's names; the rest is _-prefixed", function()
    local locks = h.locks({ fencing = true })
    local lease = assert(locks:acquire_all({ "a", "b" }, { ttl = 5000, renew = true }))
    assert.same({}, undocumented(lease, MULTI))
    assert.is_true(lease:release())
    assert.same({}, undocumented(lease, MULTI))
  end)

  it("a nested lease of a reentrant factory shows the same names", function()
    local locks = h.locks({ reentrant = true })
    local outer = assert(locks:acquire("r", { ttl = 5000 }))
    local inner = assert(locks:acquire("r", { ttl = 5000 }))
    assert.same({}, undocumented(outer, LEASE))
    assert.same({}, undocumented(inner, LEASE))
    assert.is_true(inner:release())
    assert.is_true(outer:release())
  end)

  it("a permit shows key, token, ttl and its methods; the rest is _-prefixed", function()
    local sem = assert(semaphore.new({ dict = "dlock", permits = 2, redis = h.redis_opts(), prefix = h.unique("priv") }))
    local permit = assert(sem:acquire("p", { ttl = 5000 }))
    assert.same({}, undocumented(permit, LEASE))
    assert.is_true(permit:release())
  end)

  it("lock and semaphore factories show their methods and their options; the rest is _-prefixed", function()
    local locks = assert(dlock.new({ dict = "dlock", redis = h.redis_opts(), fencing = true,
      reentrant = true, owner = "worker", name = "privacy" }))
    assert.same({}, undocumented(locks, LOCKS))
    assert.same({ "dlock:", 30000, 0, "worker", true }, { locks.prefix, locks.ttl, locks.wait, locks.owner, locks.reentrant })
    local sem = assert(semaphore.new({ dict = "dlock", permits = 2, redis = h.redis_opts() }))
    assert.same({}, undocumented(sem, SEMAPHORE))
    assert.same({ "dlock:sem:", 30000, 0, 2 }, { sem.prefix, sem.ttl, sem.wait, sem.permits })
    -- The Redis configuration (its password) is not among them.
    for _, f in ipairs({ locks, sem }) do
      for k, v in pairs(f) do
        if type(k) == "string" and k:sub(1, 1) ~= "_" then assert.is_not_table(v, k) end
      end
    end
  end)

  it("a guard of every mode shows its name, its mode and its methods; the rest is _-prefixed", function()
    local gateway = require "resty.dlock.gateway"
    local base = { key = "$arg_k", redis = h.redis_opts(), on_error = "deny" }
    local n = 0
    local function guard(mode, extra)
      n = n + 1
      local o = { name = "priv-" .. mode .. "-" .. ngx.worker.pid() .. "-" .. n, mode = mode }
      for k, v in pairs(base) do o[k] = v end
      for k, v in pairs(extra or {}) do o[k] = v end
      return assert(gateway.new(o))
    end
    local guards = {
      guard("dedup"), guard("concurrency", { permits = 2 }), guard("throttle"), guard("mutex"),
      guard("mutex", { on_error = "local", fleet = 2 }), guard("rate", { rate = 10, period = 1000 }),
      guard("rate", { rate = 10, period = 1000, on_error = "local", fleet = 2 }),
    }
    for _, g in ipairs(guards) do
      assert.same({}, undocumented(g, GUARD), g.mode)
      assert.matches("^priv%-", g.name)
    end
    local idem = guard("idempotency", { key = "$http_idempotency_key", scope = "$http_authorization" })
    assert.same({}, undocumented(idem, IDEM_GUARD))
    assert.equal("idempotency", idem.mode)
    -- Nor does a readable field hand out the Redis configuration.
    for _, g in ipairs(guards) do
      for k, v in pairs(g) do
        if type(k) == "string" and k:sub(1, 1) ~= "_" then assert.is_not_table(v, k) end
      end
    end
  end)

  it("a rate limiter shows its name, its prefix and its methods; the rest is _-prefixed", function()
    local lim = assert(require("resty.dlock.rate").new({ dict = "dlock", name = "privacy", rate = 5, period = 1000,
      redis = h.redis_opts() }))
    assert.same({}, undocumented(lim, LIMITER))
    assert.same({ "privacy", "dlock:rate:privacy:" }, { lim.name, lim.prefix })
  end)

  it("the gateway module shows new, its phase handlers and _VERSION; the guards it made are not handed out", function()
    local gateway = require "resty.dlock.gateway"
    assert.same({}, undocumented(gateway, set("new", "log", "header_filter", "body_filter")))
  end)

  it("the option fields are there to read: writing one changes nothing the object does", function()
    local sem = assert(semaphore.new({ dict = "dlock", permits = 1, prefix = "dlock:privacy:" .. ngx.now() .. ":",
      redis = h.redis_opts() }))
    sem.permits = 1e9
    local one = assert(sem:acquire("copies", { ttl = 5000 }))
    local two, err = sem:acquire("copies", { ttl = 5000 })
    one:release()
    if two then two:release() end
    assert.is_nil(two, "a second permit of one after permits = 1e9 was written")
    assert.equal("busy", err)

    local locks = assert(dlock.new({ dict = "dlock", redis = h.redis_opts(), prefix = "dlock:privacy:" .. ngx.now() .. ":" }))
    locks.reentrant = true
    local held = assert(locks:acquire("copies", { ttl = 5000 }))
    local again, aerr = locks:acquire("copies", { ttl = 5000 })
    held:release()
    if again then again:release() end
    assert.is_nil(again, "a nested lease after reentrant = true was written")
    assert.equal("busy", aerr)

    local lim = assert(require("resty.dlock.rate").new({ dict = "dlock", name = "copies", rate = 1, period = 60000,
      redis = h.redis_opts() }))
    local key = "copies:" .. ngx.now()
    assert(lim:incoming(key, true))
    lim.prefix = "dlock:elsewhere:"
    local delay, lerr = lim:incoming(key, true)
    assert.is_nil(delay, "the limit was counted afresh under a written prefix")
    assert.equal("rejected", lerr)
  end)
end)

h.check_error_logs({})
