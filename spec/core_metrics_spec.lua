-- The metrics of locks and semaphores (status.metrics_text): valid Prometheus
-- text, acquires by outcome and factory name, the wait and hold histograms,
-- the held gauge and lost leases; counted in the worker and flushed to the
-- dict, so that an uncontended acquire + release touches the dict for its
-- record only. What a gateway's guards and dicts report is in status_spec.lua.
local h = require "helpers"
local dlock = require "resty.dlock"
local semaphore = require "resty.dlock.semaphore"
local meter = require "resty.dlock.core.meter"
local status = require "resty.dlock.status"

--- The value of the first sample line that starts with line_start.
local function metric(text, line_start)
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    if line:sub(1, #line_start) == line_start then return tonumber(line:sub(#line_start + 2)) end
  end
end

describe("metrics of the core API", function()
  local function named(kind, extra) return h.named("core", kind, extra) end

  local function value(name, series)
    return metric(assert(status.metrics_text()), series:gsub("@", name)) or 0
  end

  --- Every sample line of the scrape: { name, labels, value }, checked against the format as it goes.
  local function samples(text)
    local families, out, seen = {}, {}, {}
    for line in (text .. "\n"):gmatch("([^\n]*)\n") do
      local help = line:match("^# HELP ([%a_:][%w_:]*) .+$")
      local tname, ttype = line:match("^# TYPE ([%a_:][%w_:]*) (%a+)$")
      if tname then
        assert.is_nil(families[tname], "two TYPE lines for " .. tname)
        assert.truthy(({ counter = true, gauge = true, histogram = true })[ttype], line)
        families[tname] = ttype
      elseif not help then
        local name, labels, v = line:match("^([%a_:][%w_:]*){(.-)} (%S+)$")
        assert.truthy(name, "not a sample line: " .. line)
        assert.is_number(tonumber(v) or (v == "+Inf" and math.huge), line)
        for pair in (labels .. ","):gmatch("([^,]*),") do
          assert.truthy(pair:match('^[%a_][%w_]*="[^"]*"$'), "label " .. pair .. " in " .. line)
        end
        local base = name:gsub("_bucket$", ""):gsub("_sum$", ""):gsub("_count$", "")
        assert.truthy(families[name] or families[base] == "histogram", "no TYPE before " .. line)
        assert.is_nil(seen[name .. "{" .. labels .. "}"], "a series twice: " .. line)
        seen[name .. "{" .. labels .. "}"] = true
        out[#out + 1] = { name = name, labels = labels, value = tonumber(v) }
      end
    end
    return out
  end

  it("are valid Prometheus text: TYPE before samples, well-formed labels, no series twice, cumulative buckets " ..
     "ending in +Inf = _count", function()
    local locks = named("lock")
    for i = 1, 5 do
      local l = assert(locks:acquire("v" .. i))
      ngx.sleep(0.002 * i)
      assert(l:release())
    end
    local all = samples(assert(status.metrics_text()))
    assert.is_true(#all > 20)
    local hist = 0
    for _, family in ipairs({ "dlock_acquire_wait_seconds", "dlock_lease_hold_seconds" }) do
      local last, count, inf = {}, {}, {}
      for _, sm in ipairs(all) do
        if sm.name == family .. "_bucket" then
          local series = sm.labels:gsub(',le="[^"]*"', "")
          assert.is_true(sm.value >= (last[series] or 0), "buckets of " .. series .. " not cumulative")
          last[series] = sm.value
          if sm.labels:find('le="+Inf"', 1, true) then inf[series] = sm.value end
        elseif sm.name == family .. "_count" then
          count[sm.labels] = sm.value
        end
      end
      for series, n in pairs(count) do
        hist = hist + 1
        assert.equal(n, inf[series], family .. "{" .. series .. "}")
      end
    end
    assert.is_true(hist >= 2)
  end)

  it("count acquired, busy, timeout and error per factory name, and the wait and hold histograms", function()
    local locks, name = named("lock")
    local other, other_name = named("lock")
    local l = assert(locks:acquire("k", { ttl = 5000 }))
    assert.equal(1, value(name, 'dlock_acquires_total{factory="@",outcome="acquired"}'))
    assert.equal(1, value(name, 'dlock_acquire_wait_seconds_count{factory="@"}'))
    assert.equal(nil, locks:acquire("k", { wait = 0 }))
    assert.equal(1, value(name, 'dlock_acquires_total{factory="@",outcome="busy"}'))
    local _, err = locks:acquire("k", { wait = 50 })
    assert.equal("timeout", err)
    assert.equal(1, value(name, 'dlock_acquires_total{factory="@",outcome="timeout"}'))
    ngx.sleep(0.02)
    assert(l:release())
    assert.equal(1, value(name, 'dlock_lease_hold_seconds_count{factory="@"}'))
    local sum = value(name, 'dlock_lease_hold_seconds_sum{factory="@"}')
    assert.is_true(sum >= 0.07 and sum < 1, tostring(sum))
    -- Held 70 ms and more (the timeout waited 50): not in the buckets up to 50 ms, in those from 100 ms.
    assert.equal(0, value(name, 'dlock_lease_hold_seconds_bucket{factory="@",le="0.05"}'))
    assert.equal(1, value(name, 'dlock_lease_hold_seconds_bucket{factory="@",le="0.5"}'))
    -- Another name counts on its own.
    assert.equal(0, value(other_name, 'dlock_acquires_total{factory="@",outcome="acquired"}'))
    assert(assert(other:acquire("k")):release())
    assert.equal(1, value(other_name, 'dlock_acquires_total{factory="@",outcome="acquired"}'))
    assert.equal(1, value(name, 'dlock_acquires_total{factory="@",outcome="acquired"}'))
    -- A Redis that is not there: error.
    local dead, dead_name = named("lock", { redis = { port = h.free_port(), connect_timeout = 100 } })
    assert.is_nil(dead:acquire("k"))
    assert.equal(1, value(dead_name, 'dlock_acquires_total{factory="@",outcome="error"}'))
    local r = assert(status.report({ limit = 0 }))
    assert.same({ held = 0, acquired = 1, busy = 1, timeout = 1, error = 0, lost = 0 }, {
      held = r.factories[name].held, acquired = r.factories[name].acquired, busy = r.factories[name].busy,
      timeout = r.factories[name].timeout, error = r.factories[name].error, lost = r.factories[name].lost })
  end)

  it("count a wait in the wait histogram: a lock that came after 100 ms lands above 0.1 s", function()
    local locks, name = named("lock")
    local l = assert(locks:acquire("w", { ttl = 5000 }))
    local waiter = ngx.thread.spawn(function() return locks:acquire("w", { wait = 2000 }) end)
    ngx.sleep(0.15)
    assert(l:release())
    local _, got = ngx.thread.wait(waiter)
    assert(got)
    assert(got:release())
    assert.equal(1, value(name, 'dlock_acquire_wait_seconds_bucket{factory="@",le="0.1"}'))
    assert.equal(2, value(name, 'dlock_acquire_wait_seconds_bucket{factory="@",le="0.25"}'))
    assert.is_true(value(name, 'dlock_acquire_wait_seconds_sum{factory="@"}') >= 0.15)
  end)

  it("count in the worker first: an uncontended acquire + release calls the dict for its record only, and its counts reach the dict within FLUSH without a scrape", function()
    local locks, name = named("lock")
    assert(assert(locks:acquire("warm")):release())
    ngx.sleep(meter.FLUSH + 0.1)
    local calls = {}
    local dicts = {}
    local mine = coroutine.running()
    for _, d in pairs(ngx.shared) do
      local methods = getmetatable(d).__index
      dicts[#dicts + 1] = d
      for _, m in ipairs({ "get", "set", "safe_set", "add", "safe_add", "incr", "delete" }) do
        rawset(d, m, function(self, ...)
          -- This request's calls, not those of timers that run while it waits for Redis.
          if coroutine.running() == mine then calls[m] = (calls[m] or 0) + 1 end
          return methods[m](self, ...)
        end)
      end
    end
    local ok, err = pcall(function() assert(assert(locks:acquire("once", { ttl = 10000 })):release()) end)
    for _, d in ipairs(dicts) do
      for _, m in ipairs({ "get", "set", "safe_set", "add", "safe_add", "incr", "delete" }) do rawset(d, m, nil) end
    end
    assert(ok, err)
    -- The record: written at the acquire, deleted at the release (Redis said the key was still ours: no read first).
    assert.same({ safe_set = 1, delete = 1 }, calls)
    local dict = ngx.shared.dlock
    local prefix = "m:" .. name .. ":"
    local function sum(bucket)
      local n = 0
      for i = 1, 11 do n = n + (dict:get(prefix .. bucket .. i) or 0) end
      return n
    end
    -- The warm-up's counts are in; this one's are not yet.
    assert.equal(1, sum("w"))
    assert.equal(1, sum("h"))
    ngx.sleep(meter.FLUSH + 0.1)
    assert.equal(2, sum("w"))
    assert.equal(2, sum("h"))
    assert.equal(0, dict:get(prefix .. "held"))
  end)

  it("leave the held gauge alone for records that moved in and out of an expiry second already swept", function()
    local dict = ngx.shared.dlock
    local name = "core-" .. ngx.worker.pid() .. "-swept"
    local m = meter.make(dict, name)
    local now = math.floor(ngx.now())
    -- Swept up to the second before the meter was made: a record of 10 s ago was counted gone already.
    meter.recorded(m, (now - 10) * 1000)
    meter.forgotten(m, (now - 20) * 1000)
    meter.moved(m, (now - 30) * 1000, (now + 60) * 1000)
    meter.flush()
    -- Only the move out to a second to come counts: that record lives until then.
    assert.equal(1, dict:get("m:" .. name .. ":held"))
    assert.equal(1, dict:get("m:" .. name .. ":e" .. (now + 60)))
    assert.is_nil(dict:get("m:" .. name .. ":e" .. (now - 10)))
    meter.forgotten(m, (now + 60) * 1000)
    meter.flush()
    assert.equal(0, dict:get("m:" .. name .. ":held"))
  end)

  it("move the held gauge up and down: acquire, release, and a lease left to expire leaves it too", function()
    local sem, name = named("semaphore", { permits = 3 })
    -- The page's total adds up every factory's gauge, earlier files' too (whose leases may expire meanwhile):
    -- this factory's share of it, read from the same report.
    local function share()
      local r = assert(status.report({ limit = 0 }))
      local others = 0
      for n, f in pairs(r.factories) do if n ~= name then others = others + f.held end end
      return r.held_total - others
    end
    local a = assert(sem:acquire("g", { ttl = 10000 }))
    local b = assert(sem:acquire("g", { ttl = 300 }))
    assert.equal(2, value(name, 'dlock_held_leases{factory="@"}'))
    assert.equal(2, share())
    assert(a:release())
    assert.equal(1, value(name, 'dlock_held_leases{factory="@"}'))
    assert.equal(1, share())
    -- b is never released: its record expires after 300 ms, and the gauge lets it go once its second is past.
    assert.is_true(h.eventually(5, function() return value(name, 'dlock_held_leases{factory="@"}') == 0 end))
    assert.equal(0, share())
    assert.is_nil(b:release())
  end)

  it("leave no expiry second in the dict once it has passed, though no status page or scrape reads them", function()
    local locks, name = named("lock")
    local dict = ngx.shared.dlock
    local prefix = "m:" .. name .. ":e"
    --- The expiry seconds of this factory in the dict, older than `before`.
    local function stale(before)
      local n = 0
      for _, k in ipairs(dict:get_keys(0)) do
        local s = k:sub(1, #prefix) == prefix and tonumber(k:sub(#prefix + 1))
        if s and s < before then n = n + 1 end
      end
      return n
    end
    -- Leases of many ttls over 3 s, each in a second of its own: released ones, and ones left to expire.
    local t0 = ngx.now()
    for i = 1, 30 do
      local l = assert(locks:acquire("s" .. i, { ttl = 200 + 100 * i }))
      if i % 2 == 0 then assert(l:release()) end
      ngx.sleep(0.1)
    end
    assert.is_true(stale(math.huge) > 0)
    -- Every one of those seconds has passed (the last lease: 3.2 s of ttl, plus the 2 s of grace):
    -- the workers' own flushes sweep them as leases go on coming and going.
    local horizon = t0 + 3 + 3.2 + 2 + 1
    while ngx.now() < horizon + 0.5 do
      assert(assert(locks:acquire("later", { ttl = 100 })):release())
      ngx.sleep(0.3)
    end
    assert.equal(0, stale(math.floor(horizon)))
  end)

  it("count a lease lost: its release found the key no longer ours", function()
    local locks, name = named("lock")
    local l = assert(locks:acquire("x", { ttl = 50 }))
    ngx.sleep(0.1)
    local ok, err = l:release()
    assert.is_nil(ok)
    assert.equal("not_owner", err)
    assert.equal(1, value(name, 'dlock_leases_lost_total{factory="@"}'))
    assert.equal(0, value(name, 'dlock_lease_hold_seconds_count{factory="@"}'))
  end)

  it("count factories of one name together, and refuse names that are no label", function()
    local a, name = named("lock")
    local b = assert(dlock.new({ dict = "dlock", name = name, prefix = h.unique("same"), redis = h.redis_opts() }))
    assert(assert(a:acquire("n")):release())
    assert(assert(b:acquire("n")):release())
    assert.equal(2, value(name, 'dlock_acquires_total{factory="@",outcome="acquired"}'))
    assert.same({ nil, "dlock: name may hold letters, digits, '_', '-' and '.' only, got \"a b\"" },
      { dlock.new({ dict = "dlock", name = "a b" }) })
    assert.same({ nil, "dlock: name must be a string, got 5" }, { semaphore.new({ dict = "dlock", permits = 1, name = 5 }) })
  end)
end)

h.check_error_logs({
  -- The Redis that is not there, asked on purpose for an "error" outcome (one batch's sender).
  { "connect%(%) failed %(111: Connection refused%), context: ngx%.timer", max = 1 },
})
