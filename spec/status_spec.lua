-- The status page and the metrics a busy gateway can afford: metrics read a fixed
-- number of dict keys per guard, dict and Redis (never the held leases); the
-- status page lists at most `limit` leases and says when it cut the list. The
-- metrics of locks and semaphores themselves are in core_metrics_spec.lua.
local h = require "helpers"
local cjson = require "cjson.safe"
local gateway = require "resty.dlock.gateway"
local ledger = require "resty.dlock.core.ledger"
local stats = require "resty.dlock.gateway.stats"
local status = require "resty.dlock.status"

local guard_seq = 0
--- A guard in this worker (status and metrics list the guards of the worker they run in).
local function new_guard()
  guard_seq = guard_seq + 1
  local name = "st-" .. ngx.worker.pid() .. "-" .. guard_seq
  return assert(gateway.new({ name = name, mode = "mutex", key = "$arg_job", on_error = "deny",
    redis = h.redis_opts() }))
end

--- Run fn with dict method `name` of every shared dict replaced by `replacement`; the originals come back after.
local function with_dict_method(name, replacement, fn)
  local dicts = {}
  for _, d in pairs(ngx.shared) do
    dicts[#dicts + 1] = d
    rawset(d, name, replacement)
  end
  local ok, a, b = pcall(fn)
  for _, d in ipairs(dicts) do rawset(d, name, nil) end
  assert(ok, a)
  return a, b
end

local function metric(text, line_start)
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    if line:sub(1, #line_start) == line_start then return tonumber(line:sub(#line_start + 2)) end
  end
end

describe("metrics", function()
  it("never call get_keys (a scrape is O(guards), not O(leases))", function()
    local g = new_guard()
    local locks = h.locks()
    local leases = {}
    for i = 1, 50 do leases[i] = assert(locks:acquire("m" .. i)) end
    finally(function() for _, l in ipairs(leases) do l:release() end end)
    local calls = 0
    local trap = function() calls = calls + 1; error("get_keys on the scrape path", 2) end
    local text, err = with_dict_method("get_keys", trap, function() return status.metrics_text() end)
    assert.is_nil(err)
    assert.equal(0, calls)
    assert.is_string(text)
    assert.matches('dlock_guard_events_total{guard="' .. g.name .. '",mode="mutex",event="acquired"} 0', text, 1, true)
    -- The held leases are counted, not walked.
    assert.is_true(metric(text, 'dlock_held_leases{factory="dlock"}') >= 50)
    -- The trap does catch a walk: the status page (which lists leases) trips it.
    assert.has_error(function()
      with_dict_method("get_keys", trap, function() return status.report() end)
    end)
    assert.is_true(calls > 0)
  end)

  it("read as many dict keys with 500 leases held as with none", function()
    new_guard()
    local function gets()
      local n = 0
      -- Not the held gauge's sweep (its mark and expiry seconds): how many of those a
      -- scrape reads depends on the time since the last one (at most 3600 seconds a
      -- factory), not on how many leases are held.
      with_dict_method("get", function(d, k)
        if not k:match("^m:.*:e%d+$") and not k:match("^m:.*:swept$") then n = n + 1 end
        return getmetatable(d).__index.get(d, k)
      end,
        function() assert(status.metrics_text()) end)
      return n
    end
    local before = gets()
    local locks = h.locks()
    local leases = {}
    for i = 1, 500 do leases[i] = assert(locks:acquire("n" .. i)) end
    finally(function() for _, l in ipairs(leases) do l:release() end end)
    assert.is_true(before > 0)
    assert.equal(before, gets())
  end)

  it("show each guard's in-flight gauge and each dict's unrecorded leases", function()
    local g = new_guard()
    stats.adjust(g._dict, g.name, "in_flight", 3)
    stats.adjust(g._dict, g.name, "in_flight", -1)
    local text = assert(status.metrics_text({ dicts = { "dlock_other" } }))
    assert.equal(2, metric(text, 'dlock_guard_in_flight{guard="' .. g.name .. '"}'))
    assert.equal(ledger.unrecorded(ngx.shared.dlock_other), metric(text, 'dlock_unrecorded_leases_total{dict="dlock_other"}'))
    assert.equal(ledger.unrecorded(ngx.shared.dlock), metric(text, 'dlock_unrecorded_leases_total{dict="dlock"}'))
    local r = assert(status.report({ limit = 0 }))
    assert.equal(2, r.guards[g.name].in_flight)
    stats.adjust(g._dict, g.name, "in_flight", -2)
  end)

  it("count the leases a full dict could not record, in status and metrics", function()
    -- A dict of its own (nginx/spec.conf): what other specs leave in a dict, and
    -- when it expires, would decide whether a record still fits.
    local d = ngx.shared.dlock_full
    local locks = h.locks({ dict = "dlock_full" })   -- made before the dict fills up, like at init
    -- Its first acquire starts the crash-recovery sweep: let it finish before the dict is filled.
    assert(assert(locks:acquire("warm")):release())
    ngx.sleep(0.1)
    local junk = {}
    finally(function() for _, k in ipairs(junk) do d:delete(k) end end)
    -- Fill the dict (safe_add never evicts), then acquire: the locks work, their records do not fit.
    -- Big values first, then smaller ones, down to a byte: no size class keeps a free chunk.
    for _, size in ipairs({ 2000, 1000, 400, 150, 60, 20, 1 }) do
      local v = string.rep("x", size)
      while true do
        local k = "status-spec-junk:" .. #junk
        if not d:safe_add(k, v) then break end
        junk[#junk + 1] = k
      end
    end
    assert.is_falsy(d:safe_add("probe", "x"), "the dict is not full")
    local before = ledger.unrecorded(d)
    for i = 1, 3 do assert(assert(locks:acquire("full" .. i)):release()) end
    assert.equal(before + 3, ledger.unrecorded(d))
    local r = assert(status.report({ dicts = { "dlock_full" }, limit = 0 }))
    assert.equal(before + 3, r.dicts.dlock_full.unrecorded_leases)
    assert.equal(before + 3, metric(assert(status.metrics_text({ dicts = { "dlock_full" } })),
      'dlock_unrecorded_leases_total{dict="dlock_full"}'))
  end)

  --- Fill d (safe_add never evicts), big values first, down to a byte: no size class keeps a free chunk.
  local function fill(d, tag)
    local junk = {}
    finally(function() for _, k in ipairs(junk) do d:delete(k) end end)
    for _, size in ipairs({ 2000, 1000, 400, 150, 60, 20, 1 }) do
      local v = string.rep("x", size)
      while true do
        local k = tag .. #junk
        if not d:safe_add(k, v) then break end
        junk[#junk + 1] = k
      end
    end
    assert.is_falsy(d:safe_add(tag .. "probe", "x"), "the dict is not full")
  end

  --- The dict key of the record of the held lease on `key` (found without reading it: a get would make it recent).
  local function record_of(d, key)
    for _, k in ipairs(d:get_keys(0)) do
      if k:sub(1, 2) == "l:" and k:find(key, 1, true) then return k end
    end
  end

  --- Make every key of d but `rec` more recently used than it: the first a forced eviction would take.
  local function oldest(d, rec)
    for _, k in ipairs(d:get_keys(0)) do if k ~= rec then d:get(k) end end
  end

  -- In dlock_status (1m), not dlock_full: the test above leaves no free page in that one.
  it("never evict the record of a held lease in a full dict to make room for a count", function()
    local d = ngx.shared.dlock_status
    local locks = h.locks({ dict = "dlock_status", name = "full-count" })
    assert(assert(locks:acquire("warm")):release())
    ngx.sleep(0.1)   -- the crash-recovery sweep of the dict's first acquire
    local lease = assert(locks:acquire("old", { ttl = 30000 }))
    finally(function() lease:release() end)
    assert(status.metrics_text({ dicts = { "dlock_status" } }))   -- its counts flushed now
    local rec = assert(record_of(d, "old"), "recorded")
    fill(d, "count-junk:")
    oldest(d, rec)
    -- A busy answer is the factory's first: its counter is a key the dict does not have yet.
    local none, err = locks:acquire("old", { wait = 0 })
    assert.is_nil(none)
    assert.equal("busy", err)
    assert(status.metrics_text({ dicts = { "dlock_status" } }))   -- the scrape flushes the count
    assert.equal(rec, record_of(d, "old"), "the record of a held lease was evicted")
    assert.is_not_nil(d:get(rec))
  end)

  it("never evict the record of a held lease in a full dict when a scrape sweeps the held gauge", function()
    local d = ngx.shared.dlock_status
    local locks = h.locks({ dict = "dlock_status", name = "full-sweep" })
    local lease = assert(locks:acquire("kept", { ttl = 30000 }))
    finally(function() lease:release() end)
    assert(status.metrics_text({ dicts = { "dlock_status" } }))
    local rec = assert(record_of(d, "kept"), "recorded")
    fill(d, "sweep-junk:")
    ngx.sleep(3.1)   -- past the sweep's grace: the next scrape sweeps
    oldest(d, rec)
    assert(status.metrics_text({ dicts = { "dlock_status" } }))
    assert.equal(rec, record_of(d, "kept"), "the scrape evicted the record of a held lease")
  end)
end)

describe("status.report", function()
  local d = ngx.shared.dlock_status

  --- Hold n leases in dlock_status; released when the test ends.
  local function hold(n)
    local locks = h.locks({ dict = "dlock_status" })
    local leases = {}
    for i = 1, n do leases[i] = assert(locks:acquire("s" .. i, { ttl = 20000 })) end
    finally(function() for _, l in ipairs(leases) do l:release() end end)
    return leases
  end

  it("lists at most `limit` leases and says the list was cut", function()
    hold(5)
    local r = assert(status.report({ dicts = { "dlock_status" }, limit = 3 }))
    assert.equal(3, #r.held)
    assert.equal(3, r.held_listed)
    assert.equal(3, r.held_limit)
    assert.is_true(r.held_truncated)
    for _, l in ipairs(r.held) do
      assert.equal("dlock_status", l.dict)
      assert.is_nil(l.token)
    end
  end)

  it("lists every lease when they fit in the limit, and says the list is whole", function()
    local mine = hold(5)
    -- The guards' dicts are reported too: count what all of them hold, with a
    -- full walk, before and after the report (leases of earlier specs expire
    -- meanwhile: then count again).
    local function count()
      local n = 0
      for name in pairs(assert(status.report({ dicts = { "dlock_status" }, limit = 0 })).dicts) do
        n = n + #ledger.held(ngx.shared[name])
      end
      return n
    end
    local all, r, cut
    for _ = 1, 5 do
      all = count()
      r = assert(status.report({ dicts = { "dlock_status" }, limit = all }))
      cut = assert(status.report({ dicts = { "dlock_status" }, limit = all - 1 }))
      if count() == all then break end
    end
    assert.equal(all, r.held_listed)
    assert.is_false(r.held_truncated)
    local keys = {}
    for _, l in ipairs(r.held) do keys[l.key] = true end
    for _, l in ipairs(mine) do assert.is_true(keys[l.key], l.key .. " not listed") end
    assert.equal(all - 1, cut.held_listed)
    assert.is_true(cut.held_truncated)
  end)

  it("finds the leases behind other keys of the dict (get_keys(n) counts every key)", function()
    local junk = {}
    finally(function() for _, k in ipairs(junk) do d:delete(k) end end)
    local function add_junk(n)
      for _ = 1, n do
        junk[#junk + 1] = "c:status-spec:" .. #junk
        assert(d:safe_set(junk[#junk], 1, 60))
      end
    end
    -- Counters set before and after the leases: whichever end get_keys starts from, they come first.
    add_junk(300)
    hold(5)
    add_junk(300)
    local r = assert(status.report({ dicts = { "dlock_status" }, limit = 4 }))
    assert.equal(4, r.held_listed)
    assert.is_true(r.held_truncated)
  end)

  it("with limit 0 lists nothing but still says whether anything is held", function()
    hold(1)
    local r = assert(status.report({ dicts = { "dlock_status" }, limit = 0 }))
    assert.same({}, r.held)
    assert.is_true(r.held_truncated)
  end)

  it("refuses a dicts table that is not a list: the names under other keys would be skipped", function()
    for _, fn in ipairs({ status.report, status.metrics_text }) do
      local r, err = fn({ dicts = { other = "dlock_other" } })
      assert.is_nil(r)
      assert.equal("dlock: dicts must be a list of lua_shared_dict names, got a table", err)
    end
  end)

  it("shows a Cluster's masters as a list, [] before its slot map is read", function()
    -- A Cluster endpoint this worker has never called: no slot map yet.
    assert(require("resty.dlock").new({ dict = "dlock_status", prefix = "status-unread:",
      redis = { cluster = { nodes = { "127.0.0.1:" .. h.free_port() } } } }))
    local res = assert(h.http(h.env.http_port, "/dlock/status"))
    assert.equal(200, res.status)
    assert.is_truthy(res.body:find('"masters":[]', 1, true), res.body)
    assert.is_falsy(res.body:find('"masters":{}', 1, true), res.body)
  end)

  it("serves valid UTF-8 JSON (RFC 8259) when a held key is not: its bad bytes as U+FFFD", function()
    local locks = h.locks({ dict = "dlock_status", name = "utf8" })
    local lease = assert(locks:acquire("order-\xff\xfe-\xc3\xa9", { ttl = 20000 }))
    finally(function() lease:release() end)
    local res = assert(h.http(h.env.http_port, "/dlock/status"))
    assert.equal(200, res.status)
    local keys = {}
    for _, l in ipairs(assert(cjson.decode(res.body)).held) do keys[l.key] = true end
    -- Each bad byte one U+FFFD; a well-formed character (é) as it was.
    assert.is_true(keys["order-\239\191\189\239\191\189-\xc3\xa9"], res.body)
  end)

  it("is the report serve() answers, as a Lua table: the same members, dicts and factories by name", function()
    local locks = h.locks({ dict = "dlock_status", name = "shape" })
    local lease = assert(locks:acquire("shape", { ttl = 20000 }))
    finally(function() lease:release() end)
    local opts = { dicts = { "dlock_status", "dlock_full" } }
    local r = assert(status.report(opts))
    local served = assert(cjson.decode(assert(h.http(h.env.http_port, "/dlock/status")).body))
    local function names(t)
      local out = {}
      for k in pairs(t) do out[#out + 1] = k end
      table.sort(out)
      return out
    end
    assert.same(names(served), names(r))
    assert.same(names(served.dicts), names(r.dicts))
    assert.same(served.dicts.dlock_status, r.dicts.dlock_status)
    assert.is_number(r.dicts.dlock_status.unrecorded_leases)
    assert.same(names(served.factories.shape), names(r.factories.shape))
    assert.equal(1, r.factories.shape.held)
  end)

  it("defaults to 100 and refuses limits outside 0..10000 with a dlock error", function()
    assert.equal(100, assert(status.report()).held_limit)
    for v, msg in pairs({
      [-1] = "dlock: limit must be an integer from 0 to 10000, got -1",
      [10001] = "dlock: limit must be at most 10000, got 10001",
      [1.5] = "dlock: limit must be an integer from 0 to 10000, got 1.5",
      ["10"] = 'dlock: limit must be an integer from 0 to 10000, got "10"',
    }) do
      local r, err = status.report({ limit = v })
      assert.is_nil(r)
      assert.equal(msg, err)
    end
  end)
end)

describe("/dlock/status and /dlock/metrics over HTTP", function()
  local redis, gw, backend

  setup(function()
    redis = h.start_redis()
    backend = h.free_port()
    gw = h.start_nginx("gateway.conf", { REDIS_PORT = redis.port, OWN_BACKEND_PORT = backend, BACKEND_PORT = backend })
  end)

  teardown(function()
    if gw then gw.stop() end
    if redis then redis.stop() end
  end)

  local function get(path)
    return assert(h.http(gw.port, path))
  end

  --- The status report once `done(report)` holds, polling for up to 2 s (releases go out after the response).
  local function status_when(done)
    local s
    for _ = 1, 40 do
      s = assert(cjson.decode(get("/dlock/status").body))
      if done(s) then return s end
      ngx.sleep(0.05)
    end
    return s
  end

  it("answers \"held\": [] (a JSON list) when nothing is held, with Debian's lua-cjson too", function()
    local res = get("/dlock/status")
    assert.equal(200, res.status)
    assert.matches('^{"held":%[%],"held_listed":0,"held_limit":100,"held_truncated":false,', res.body)
    assert.same({}, assert(cjson.decode(res.body)).held)
    -- Still a list after a lease came and went.
    local key = h.unique("once")
    assert.equal(200, get("/jobs?job=" .. key .. "&key=" .. key .. "&ms=0").status)
    assert.equal(0, status_when(function(s) return s.guards.jobs.acquired == 1 and s.held_listed == 0 end).held_listed)
    assert.matches('^{"held":%[%],', get("/dlock/status").body)
  end)

  it("lists up to ?limit=N held leases, says how many and whether the list was cut; " ..
     "in-flight and unrecorded counts alongside", function()
    local keys = {}
    local slow = {}
    for i = 1, 5 do
      keys[i] = h.unique("lim")
      slow[i] = ngx.thread.spawn(h.http, gw.port, "/jobs?ms=1500&job=" .. keys[i] .. "&key=" .. keys[i])
    end
    ngx.sleep(0.5)
    local cut = assert(cjson.decode(get("/dlock/status?limit=2").body))
    assert.equal(2, #cut.held)
    assert.same({ 2, 2, true }, { cut.held_listed, cut.held_limit, cut.held_truncated })
    local whole = assert(cjson.decode(get("/dlock/status").body))
    assert.same({ 5, 5, 100, false }, { #whole.held, whole.held_listed, whole.held_limit, whole.held_truncated })
    for _, l in ipairs(whole.held) do
      assert.equal("dlock", l.dict)
      assert.is_nil(l.token)
    end
    assert.equal(5, whole.guards.jobs.in_flight)
    assert.same({ unrecorded_leases = 0, replica_shortfalls = 0 }, whole.dicts.dlock)
    local m = get("/dlock/metrics").body
    assert.equal(5, metric(m, 'dlock_guard_in_flight{guard="jobs"}'))
    assert.equal(0, metric(m, 'dlock_unrecorded_leases_total{dict="dlock"}'))
    for i = 1, 5 do
      local ok, res = ngx.thread.wait(slow[i])
      assert(ok and res and res.status == 200)
    end
    local after = status_when(function(s) return s.held_listed == 0 end)
    assert.same({ 0, 0 }, { after.held_listed, after.guards.jobs.in_flight })
  end)

  it("refuses a bad ?limit with 400 and a dlock error", function()
    local res = get("/dlock/status?limit=abc")
    assert.equal(400, res.status)
    assert.same({ error = 'dlock: limit must be an integer from 0 to 10000, got "abc"' }, cjson.decode(res.body))
    res = get("/dlock/status?limit=10001")
    assert.equal(400, res.status)
    assert.same({ error = "dlock: limit must be at most 10000, got 10001" }, cjson.decode(res.body))
  end)
end)

h.check_error_logs()
