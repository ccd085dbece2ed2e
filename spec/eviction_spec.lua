-- A Redis that may evict keys (maxmemory with any policy but noeviction) can drop
-- a held lock and let a second holder in. lua-resty-dlock asks each Redis for its
-- memory settings once per worker and pool, on the first fresh connection, logs
-- what it found once per endpoint and worker, and shows it in status and metrics.
local h = require "helpers"
local cjson = require "cjson.safe"
local status = require "resty.dlock.status"

-- INFO calls this spec sends itself, per port, so that counts show only dlock's.
local own_info = {}
local function info(port, section)
  own_info[port] = (own_info[port] or 0) + 1
  return assert(h.cmd(port, "info", section))
end

--- INFO and CONFIG GET calls the Redis on `port` has served to others than this spec.
local function introspections(port)
  local s = info(port, "commandstats")
  local function calls(name)
    return tonumber(s:match("cmdstat_" .. name .. ":calls=(%d+)") or "0")
  end
  -- Redis counts a call once it is done: this INFO is not in its own answer.
  return calls("info") + calls("config|get") - (own_info[port] - 1)
end

local function connections(port)
  return tonumber(info(port, "stats"):match("total_connections_received:(%d+)"))
end

--- The keys Redis on `port` holds now, as a set.
local function keys_of(port)
  local set = {}
  for _, k in ipairs(assert(h.cmd(port, "keys", "*"))) do set[k] = true end
  return set
end

--- Nothing was written since `before` (keys_of): no key that was not there then. Keys may have expired
--- meanwhile (a rate limit's state lives as long as its next request's place), so DBSIZE cannot tell.
local function assert_nothing_written(port, before)
  for k in pairs(keys_of(port)) do assert.is_true(before[k], "written while out of memory: " .. k) end
end

local function locks_on(r, extra)
  local o = { port = r.port, connect_timeout = 500, read_timeout = 1000 }
  for k, v in pairs(extra or {}) do o[k] = v end
  return h.locks({ redis = o })
end

--- Eviction lines of log_file about the Redis on `port`, at `level` ("[error]", "[warn]", ...; "" for any).
local function lines(log_file, port, level)
  local out = {}
  for line in ((h.read_file(log_file) or "") .. "\n"):gmatch("([^\n]*)\n") do
    if line:find("dlock: redis 127.0.0.1:" .. port, 1, true) and line:find("evict", 1, true)
      and line:find(level, 1, true) then
      out[#out + 1] = line
    end
  end
  return out
end

local spec_log = h.prefix .. "/logs/error.log"
local notice_log = h.prefix .. "/logs/notice.log"

local function endpoint_status(port, report)
  report = report or assert(status.report({ limit = 0 }))
  return report.redis["127.0.0.1:" .. port]
end

describe("eviction check", function()
  it("logs one error per worker for a Redis with maxmemory and allkeys-lru, however many fresh connections; " ..
     "status and metrics show it", function()
    local r = h.start_redis(nil, "--maxmemory 10mb --maxmemory-policy allkeys-lru")
    finally(function() r.stop() end)
    -- Without auto-pipelining, so that concurrent calls do not share connections.
    local locks = locks_on(r, { pool_size = 1, auto_pipeline = false })
    local conns0, calls0 = connections(r.port), introspections(r.port)
    -- 40 at once with a pool of 1: nearly every call opens (and closes) a fresh connection.
    for round = 1, 5 do
      h.parallel(40, function(i)
        local lease = assert(locks:acquire("k" .. round .. ":" .. i))
        assert(lease:release())
      end)
    end
    assert.is_true(connections(r.port) - conns0 > 40, "the spec meant to open many fresh connections")
    assert.equal(calls0 + 1, introspections(r.port))

    local errs = lines(spec_log, r.port, "[error]")
    assert.equal(1, #errs)
    assert.matches("dlock: redis 127.0.0.1:" .. r.port .. " can evict lock keys (maxmemory-policy allkeys-lru, " ..
      "maxmemory 10485760): an evicted lock lets a second holder in; set maxmemory-policy noeviction, " ..
      "or give locks a Redis of their own", errs[1], 1, true)

    local s = endpoint_status(r.port)
    assert.same({ checked = true, maxmemory_policy = "allkeys-lru", maxmemory = 10485760, policy_evicts = true,
      can_evict_locks = true, checked_at = s.checked_at,
      advice = "set maxmemory-policy noeviction, or give locks a Redis of their own" }, s)
    local text = assert(status.metrics_text())
    assert.matches('\ndlock_redis_can_evict_locks{endpoint="127.0.0.1:' .. r.port .. '",policy="allkeys-lru"} 1\n',
      text .. "\n", 1, true)
  end)

  it("logs nothing for noeviction and shows that the Redis cannot evict lock keys", function()
    local r = h.start_redis(nil, "--maxmemory 10mb --maxmemory-policy noeviction")
    finally(function() r.stop() end)
    local locks = locks_on(r)
    for i = 1, 20 do assert(assert(locks:acquire("k" .. i)):release()) end
    assert.same({}, lines(spec_log, r.port, ""))
    local s = endpoint_status(r.port)
    assert.is_true(s.checked)
    assert.equal("noeviction", s.maxmemory_policy)
    assert.is_false(s.policy_evicts)
    assert.is_false(s.can_evict_locks)
    assert.is_nil(s.advice)
    assert.matches('\ndlock_redis_can_evict_locks{endpoint="127.0.0.1:' .. r.port .. '",policy="noeviction"} 0\n',
      assert(status.metrics_text()) .. "\n", 1, true)
  end)

  it("warns (not errors) for an evicting policy without maxmemory: nothing can be evicted until maxmemory is set", function()
    local r = h.start_redis(nil, "--maxmemory 0 --maxmemory-policy volatile-lru")
    finally(function() r.stop() end)
    local locks = locks_on(r)
    for i = 1, 10 do assert(assert(locks:acquire("k" .. i)):release()) end
    assert.same({}, lines(spec_log, r.port, "[error]"))
    local warns = lines(spec_log, r.port, "[warn]")
    assert.equal(1, #warns)
    assert.matches("has maxmemory-policy volatile-lru but no maxmemory: lock keys cannot be evicted yet, they can as " ..
      "soon as maxmemory is set; set maxmemory-policy noeviction, or give locks a Redis of their own", warns[1], 1, true)
    local s = endpoint_status(r.port)
    assert.equal("volatile-lru", s.maxmemory_policy)
    assert.equal(0, s.maxmemory)
    assert.is_true(s.policy_evicts)
    assert.is_false(s.can_evict_locks)
  end)

  it("checks each pool (here db 0 and db 1 of one Redis) once and logs once per endpoint", function()
    local r = h.start_redis(nil, "--maxmemory 10mb --maxmemory-policy allkeys-random")
    finally(function() r.stop() end)
    local calls0 = introspections(r.port)
    for _, db in ipairs({ 0, 1 }) do
      local locks = locks_on(r, { db = db })
      for i = 1, 10 do assert(assert(locks:acquire("k" .. i)):release()) end
    end
    assert.equal(calls0 + 2, introspections(r.port))
    assert.equal(1, #lines(spec_log, r.port, "[error]"))
  end)

  it("falls back to CONFIG GET when INFO is refused, and says once (notice) when neither answers; " ..
     "locks still work", function()
    -- ACL users: "cfg" may run CONFIG but not INFO, "none" neither.
    local r = h.start_redis(nil, "--user cfg on '>pw' '~*' '&*' '+@all' '-info'")
    finally(function() r.stop() end)
    local cfg = locks_on(r, { username = "cfg", password = "pw" })
    assert(assert(cfg:acquire("a")):release())
    local s = endpoint_status(r.port)
    assert.is_true(s.checked)
    assert.equal("noeviction", s.maxmemory_policy)

    local r2 = h.start_redis(nil, "--user none on '>pw' '~*' '&*' '+@all' '-info' '-config'")
    finally(function() r2.stop() end)
    local none = locks_on(r2, { username = "none", password = "pw" })
    for i = 1, 10 do assert(assert(none:acquire("k" .. i)):release()) end
    s = endpoint_status(r2.port)
    assert.is_false(s.checked)
    assert.is_nil(s.can_evict_locks)
    assert.matches("^INFO memory: NOPERM .*; CONFIG GET: NOPERM ", s.reason)
    local notes = lines(notice_log, r2.port, "[notice]")
    assert.equal(1, #notes)
    assert.matches(": could not check whether it can evict lock keys (INFO memory: NOPERM", notes[1], 1, true)
    assert.matches("make sure its maxmemory-policy is noeviction", notes[1], 1, true)
    assert.same({}, lines(spec_log, r2.port, "[error]"))
    -- Not checkable is not a metric value: the endpoint is left out of the gauge.
    local text = assert(status.metrics_text())
    assert.is_nil(text:find('dlock_redis_can_evict_locks{endpoint="127.0.0.1:' .. r2.port .. '"', 1, true))
    assert.truthy(text:find('dlock_redis_can_evict_locks{endpoint="127.0.0.1:' .. r.port .. '"', 1, true))
  end)

  it("asks again on the next fresh connection when the check itself timed out (Redis paused)", function()
    local r = h.start_redis(nil, "--maxmemory 10mb --maxmemory-policy allkeys-lfu")
    finally(function() r.stop() end)
    local locks = locks_on(r, { read_timeout = 200 })
    r.signal("STOP")
    local lease, err = locks:acquire("a")
    r.signal("CONT")
    assert.is_nil(lease)
    assert.equal("dlock: redis 127.0.0.1:" .. r.port .. ": timeout during the eviction check", err)
    assert.is_nil(endpoint_status(r.port))
    assert(assert(locks:acquire("b")):release())
    assert.equal("allkeys-lfu", endpoint_status(r.port).maxmemory_policy)
    assert.equal(1, #lines(spec_log, r.port, "[error]"))
  end)

  it("shares the finding through the shared dict: a worker that never connected shows it", function()
    local r = h.start_redis(nil, "--maxmemory 10mb --maxmemory-policy volatile-ttl")
    finally(function() r.stop() end)
    assert(assert(locks_on(r):acquire("a")):release())
    -- A fresh copy of the redis and status modules has no finding of its own, like another worker.
    local fresh = { "resty.dlock.redis.client", "resty.dlock.status", "resty.dlock.status.common", "resty.dlock.status.json",
      "resty.dlock.status.exposition" }
    local saved = {}
    for i, m in ipairs(fresh) do saved[i], package.loaded[m] = package.loaded[m], nil end
    local ok, other = pcall(require, "resty.dlock.status")
    for i, m in ipairs(fresh) do package.loaded[m] = saved[i] end
    assert(ok, other)
    assert.are_not.equal(status, other)
    local s = endpoint_status(r.port, assert(other.report({ limit = 0 })))
    assert.same({ "volatile-ttl", 10485760, true }, { s.maxmemory_policy, s.maxmemory, s.can_evict_locks })
  end)
end)

describe("eviction check in a gateway of 2 workers", function()
  local r, gw

  setup(function()
    r = h.start_redis(nil, "--maxmemory 10mb --maxmemory-policy allkeys-lru")
    local backend = h.free_port()
    gw = h.start_nginx("gateway.conf", { REDIS_PORT = r.port, OWN_BACKEND_PORT = backend, BACKEND_PORT = backend })
  end)

  teardown(function()
    if gw then gw.stop() end
    if r then r.stop() end
  end)

  it("logs exactly one error line per worker after many guarded requests, and every status answer shows it", function()
    local log = gw.prefix .. "/logs/error.log"
    local workers = gw.workers()
    assert.equal(2, #workers)
    local function per_worker()
      local n = {}
      for _, line in ipairs(lines(log, r.port, "[error]")) do
        local pid = tonumber(line:match("%[error%] (%d+)#"))
        n[pid] = (n[pid] or 0) + 1
      end
      return n
    end
    -- Requests until both workers have served some (nginx gives no way to pick one), then many more.
    local round = 0
    repeat
      round = round + 1
      h.parallel(50, function(i)
        local key = h.unique("ev") .. i
        local res = assert(h.http(gw.port, "/orders?key=" .. key, { headers = { ["Idempotency-Key"] = key } }))
        assert.equal(200, res.status)
      end)
      local n = per_worker()
    until (n[workers[1]] and n[workers[2]]) or round == 20
    h.parallel(100, function(i)
      assert(h.http(gw.port, "/jobs?job=" .. h.unique("j") .. i))
    end)
    local n = per_worker()
    assert.same({ [workers[1]] = 1, [workers[2]] = 1 }, n)
    for _ = 1, 10 do
      local res = assert(h.http(gw.port, "/dlock/status"))
      local s = assert(cjson.decode(res.body)).redis["127.0.0.1:" .. r.port]
      assert.same({ "allkeys-lru", 10485760, true }, { s.maxmemory_policy, s.maxmemory, s.can_evict_locks })
      local m = assert(h.http(gw.port, "/dlock/metrics")).body
      assert.matches('dlock_redis_can_evict_locks{endpoint="127.0.0.1:' .. r.port .. '",policy="allkeys-lru"} 1',
        m, 1, true)
    end
  end)
end)

describe("a Redis that refuses writes", function()
  local semaphore = require "resty.dlock.semaphore"
  local rate = require "resty.dlock.rate"

  --- A lock factory, a fenced one and a semaphore on the Redis at `port`.
  local function factories(port)
    local o = { port = port, connect_timeout = 500, read_timeout = 1000 }
    return {
      lock = h.locks({ redis = o }),
      fenced = h.locks({ redis = o, fencing = true }),
      permit = assert(semaphore.new({ dict = "dlock", permits = 3, prefix = h.unique("sem"), redis = o })),
    }
  end

  --- A fleet rate limit (100 a minute) on the Redis at `port`.
  local function limiter(port)
    return assert(rate.new({ dict = "dlock", prefix = h.unique("rate"), rate = 100, period = 60000,
      redis = { port = port, connect_timeout = 500, read_timeout = 1000 } }))
  end

  it("out of memory (maxmemory, noeviction): locks, fenced locks and permits are refused whole, waiting or not, " ..
     "and write nothing; leases taken before still extend and release", function()
    local r = h.start_redis(nil, "--maxmemory-policy noeviction")
    finally(function() r.stop() end)
    local all = factories(r.port)
    local held = {}
    for name, f in pairs(all) do held[name] = assert(f:acquire("held", { ttl = 10000 })) end
    -- Any write that needs memory is now refused: used memory is above 1 byte.
    assert.equal("OK", h.cmd(r.port, "config", "set", "maxmemory", "1"))
    local before = h.cmd(r.port, "dbsize")
    for name, f in pairs(all) do
      for _, wait in ipairs({ 0, 200 }) do
        local lease, err = f:acquire("new", { wait = wait })
        assert.is_nil(lease, name)
        assert.matches("OOM command not allowed", err, 1, true)
      end
      -- A key held by someone: busy would need no memory, but a ticket in line would.
      local lease, err = f:acquire("held", { wait = 0 })
      assert.is_nil(lease, name)
      assert.is_truthy(err == "busy" or err:find("OOM command not allowed", 1, true), name .. ": " .. tostring(err))
    end
    assert.equal(before, h.cmd(r.port, "dbsize"))
    for name, l in pairs(held) do
      assert.is_true(l:extend(20000), name)
      assert.is_true(l:release(), name)
    end
    assert.is_true(h.cmd(r.port, "dbsize") < before)
    assert.equal("OK", h.cmd(r.port, "config", "set", "maxmemory", "0"))
    for _, f in pairs(all) do assert(assert(f:acquire("new")):release()) end
  end)

  it("out of memory: a fleet rate limit refuses to decide (nil and Redis' OOM), charges nothing, and decides again " ..
     "once Redis has memory", function()
    local r = h.start_redis(nil, "--maxmemory-policy noeviction")
    finally(function() r.stop() end)
    local lim = limiter(r.port)
    assert.equal(0, (lim:incoming("seen", true)))
    local tat = h.rate_state(r.port, lim.prefix .. "seen")["1"]
    assert.equal("OK", h.cmd(r.port, "config", "set", "maxmemory", "1"))
    local before = keys_of(r.port)
    for _, key in ipairs({ "seen", "new" }) do
      local delay, err = lim:incoming(key, true)
      assert.is_nil(delay, key)
      assert.matches("OOM command not allowed", err, 1, true)
    end
    assert_nothing_written(r.port, before)
    assert.equal(tat, h.rate_state(r.port, lim.prefix .. "seen")["1"])
    assert.equal("OK", h.cmd(r.port, "config", "set", "maxmemory", "0"))
    local delay, remaining = lim:incoming("seen", true)
    assert.equal(0, delay)
    assert.equal(98, remaining)
  end)

  it("out of memory behind an operator's guards (nginx/spec-rate.conf): on_error = deny refuses with 503 and never " ..
     "lets a request through, on_error = local lets each nginx its share, and Redis decides again once it has memory",
     function()
    local r = h.start_redis(nil, "--maxmemory-policy noeviction")
    finally(function() r.stop() end)
    local backend = h.free_port()
    local n = h.start_nginx("spec-rate.conf", { REDIS_PORT = r.port, CLUSTER_SEEDS = "", DOWN_PORT = h.free_port(),
      PREFIX_KEYS = h.unique("oom"), BACKEND_PORT = backend })
    finally(function() n.stop() end)
    local function status_of(path) return assert(h.http(n.port, path)).status end
    local function row(name) return assert(cjson.decode(assert(h.http(n.port, "/dlock/status")).body)).guards[name] end
    assert.equal(200, status_of("/g/api?key=before"))

    assert.equal("OK", h.cmd(r.port, "config", "set", "maxmemory", "1"))
    local before = keys_of(r.port)
    -- A rate limit that denies: every request refused (let through, it would answer 200).
    for i = 1, 6 do assert.equal(503, status_of("/g/api?key=oom" .. i)) end
    -- A rate limit with on_error = local (20 per second, burst 10, fleet 2): this nginx's burst of 5, then refusals.
    local admitted, refused = 0, 0
    local t0 = h.now()
    for _ = 1, 12 do
      local st = status_of("/g/fallback?key=oom")
      if st == 200 then admitted = admitted + 1 elseif st == 429 then refused = refused + 1 end
    end
    local elapsed = h.now() - t0
    assert.is_true(admitted >= 5 and admitted <= 5 + 10 * elapsed + 1, admitted .. " admitted in " .. elapsed .. " s")
    assert.equal(12, admitted + refused)
    assert.is_true(row("fallback").degraded)
    -- A concurrency limit with on_error = local (4 permits, fleet 2): a request let through on its local share.
    assert.equal(200, status_of("/l/conc_local?key=oom&ms=10"))
    assert.equal(1, (h.backend_stats(backend, "oom")))
    assert.is_true(row("conc_local").degraded)
    -- Nothing was written while Redis had no memory.
    assert_nothing_written(r.port, before)

    assert.equal("OK", h.cmd(r.port, "config", "set", "maxmemory", "0"))
    -- Back on Redis within each breaker's cool-down (api: the default 5000 ms, refusing meanwhile; fallback: 1000 ms)
    -- and a margin.
    assert.is_true(h.eventually(7, function()
      local st = status_of("/g/api?key=after")
      assert.is_true(st == 200 or st == 503, "api answered " .. st)
      return st == 200
    end))
    assert.is_true(h.eventually(3, function()
      status_of("/g/fallback?key=back")
      return row("fallback").breaker == "closed" and not row("fallback").degraded
    end))
  end)

  it("read-only (a replica): locks, fenced locks, permits and rate limits answer READONLY and write nothing", function()
    local r = h.start_redis(nil, "--replicaof 127.0.0.1 " .. h.redis_port)
    finally(function() r.stop() end)
    for name, f in pairs(factories(r.port)) do
      local lease, err = f:acquire("k", { wait = 0 })
      assert.is_nil(lease, name)
      assert.matches("READONLY", err, 1, true)
    end
    local lim = limiter(r.port)
    local delay, err = lim:incoming("k", true)
    assert.is_nil(delay)
    assert.matches("READONLY", err, 1, true)
    assert.equal(0, h.cmd(r.port, "exists", lim.prefix .. "k"))
  end)
end)

h.check_error_logs({
  -- Redis servers that can evict lock keys, on purpose: the error this spec is about.
  "can evict lock keys %(maxmemory%-policy [%w-]+, maxmemory %d+%): an evicted lock lets a second holder in",
  { "lua tcp socket read timed out", max = 1 },  -- the eviction check of a paused Redis
  -- The guards in front of a Redis out of memory, on purpose: each failure is logged until the guard's breaker
  -- opens (breaker_failures of them), then none while it is open.
  { "dlock: guard [%w_]+: redis 127%.0%.0%.1:%d+: [^\n]*OOM command not allowed", max = 12 },
  { "dlock: guard [%w_]+: Redis keeps failing", max = 8 },
})
