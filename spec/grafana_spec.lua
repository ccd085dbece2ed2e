-- nginx/grafana-dlock.json asks Prometheus only for what /dlock/metrics
-- really serves: the demo gateway (nginx/gateway.conf) gets some traffic, and
-- every metric, event and label its queries name must be in the scrape.
local h = require "helpers"
local cjson = require "cjson.safe"

local dashboard = assert(cjson.decode((assert(h.read_file(h.root .. "/nginx/grafana-dlock.json")))))

--- Every PromQL expression in the dashboard: panel targets (rows' panels too) and variable queries.
local function expressions()
  local out = {}
  local function walk(panels)
    for _, p in ipairs(panels or {}) do
      for _, t in ipairs(p.targets or {}) do out[#out + 1] = t.expr end
      walk(p.panels)
    end
  end
  walk(dashboard.panels)
  for _, v in ipairs(dashboard.templating.list) do
    if type(v.query) == "table" then out[#out + 1] = v.query.query end
  end
  return out
end

-- Labels Prometheus adds to every scraped series.
local TARGET_LABELS = { instance = true, job = true }

--- { [metric] = { [label] = { [value] = true } } } from a Prometheus text scrape.
local function parse(text)
  local series = {}
  for name, labels in text:gmatch("\n(dlock_[%w_]+){([^}]*)}") do
    local m = series[name] or {}
    series[name] = m
    for k, v in labels:gmatch('([%w_]+)="([^"]*)"') do
      m[k] = m[k] or {}
      m[k][v] = true
    end
  end
  return series
end

--- The metric a dashboard name stands for: histograms are queried by _bucket, _sum and _count.
local function served(series, name)
  if series[name] then return name end
  local base = name:gsub("_bucket$", ""):gsub("_sum$", ""):gsub("_count$", "")
  if series[base] then return base end
end

describe("the Grafana dashboard", function()
  local redis, gw, scrape

  setup(function()
    redis = h.start_redis()
    local backend = h.free_port()
    gw = h.start_nginx("gateway.conf", { REDIS_PORT = redis.port, OWN_BACKEND_PORT = backend, BACKEND_PORT = backend })
    local key = h.unique("graf")
    for _, path in ipairs({ "/jobs?ms=0&job=" .. key, "/reports?ms=0&user=" .. key, "/refresh?ms=0&user=" .. key,
                            "/refresh?ms=0&user=" .. key, "/api?ms=0&x=" .. key }) do
      assert(h.http(gw.port, path))
    end
    assert(h.http(gw.port, "/orders?ms=0", { headers = { ["Idempotency-Key"] = key } }))
    -- The eviction gauge shows once a worker has checked its Redis (on its first connection).
    assert(h.eventually(5, function()
      scrape = assert(h.http(gw.port, "/dlock/metrics")).body
      return scrape:find("\ndlock_redis_can_evict_locks{", 1, true) ~= nil
    end), "no eviction gauge in:\n" .. tostring(scrape))
    scrape = "\n" .. scrape
  end)

  teardown(function()
    if gw then gw.stop() end
    if redis then redis.stop() end
  end)

  it("queries only metrics /dlock/metrics serves", function()
    local series = parse(scrape)
    local asked = 0
    for _, expr in ipairs(expressions()) do
      for name in expr:gmatch("[%a_:][%w_:]*") do
        if name:match("^dlock_") then
          asked = asked + 1
          assert.is_not_nil(served(series, name), name .. " (in " .. expr .. ") is not in /dlock/metrics")
        end
      end
    end
    assert.is_true(asked > 10)
  end)

  it("asks for events and labels that the metrics carry", function()
    local series = parse(scrape)
    for _, expr in ipairs(expressions()) do
      local names = {}
      for name in expr:gmatch("dlock_[%w_]+") do names[#names + 1] = served(series, name) end
      local function carried(label, value)
        for _, n in ipairs(names) do
          local values = series[n][label]
          if values and (value == nil or values[value]) then return true end
        end
        return TARGET_LABELS[label] and value == nil
      end
      for label, value in expr:gmatch('([%w_]+)%s*=~?%s*"([^"]*)"') do
        if not TARGET_LABELS[label] then
          assert.is_true(carried(label), label .. " (in " .. expr .. ")")
          if label == "event" then
            for ev in (value .. "|"):gmatch("([^|]+)|") do
              assert.is_true(carried("event", ev), "event " .. ev .. " (in " .. expr .. ")")
            end
          end
        end
      end
      for list in expr:gmatch("by%s*%(([^)]*)%)") do
        for label in list:gmatch("[%w_]+") do
          assert.is_true(carried(label), label .. " (in " .. expr .. ")")
        end
      end
    end
  end)

  it("shows acquisitions, busy and timeout rates, held leases, lost renewals and breaker state, per guard", function()
    local all = table.concat(expressions(), "\n")
    for _, ev in ipairs({ "acquired", "rejected", "timed_out", "lost" }) do
      assert.matches('event="' .. ev .. '"', all, 1, true)
    end
    assert.matches("dlock_guard_in_flight", all, 1, true)
    assert.matches("dlock_guard_breaker_open", all, 1, true)
    assert.matches("label_values(dlock_guard_events_total", all, 1, true)
    for _, p in ipairs(dashboard.panels) do
      for _, t in ipairs(p.targets or {}) do
        if t.expr:find("dlock_guard_", 1, true) then assert.matches("by (guard)", t.expr, 1, true) end
      end
    end
  end)

  it("shows admitted and refused per rate guard, and whether a guard decides on its local share", function()
    local all = table.concat(expressions(), "\n")
    for _, needle in ipairs({ 'mode="rate", event=~"acquired|local_admitted"', 'mode="rate", event=~"rejected|local_rejected"',
                              "dlock_guard_degraded", 'event="local_admitted"', 'event="local_rejected"' }) do
      assert.matches(needle, all, 1, true)
    end
    -- The demo gateway has a rate guard: its series are in the scrape the queries were checked against.
    assert.matches('\ndlock_guard_events_total{guard="api",mode="rate",event="acquired"} ', scrape, 1, true)
    assert.matches('\ndlock_guard_degraded{guard="api"} 0', scrape, 1, true)
  end)

  it("shows the core API per factory: acquires by outcome, held leases, wait and hold time quantiles, lost leases", function()
    local all = table.concat(expressions(), "\n")
    for _, needle in ipairs({ "dlock_acquires_total", "dlock_held_leases", "dlock_leases_lost_total",
                              "dlock_acquire_wait_seconds_bucket", "dlock_lease_hold_seconds_bucket",
                              'outcome="error"', "label_values(dlock_acquires_total" }) do
      assert.matches(needle, all, 1, true)
    end
    assert.matches("histogram_quantile(0.99, sum by (factory, le) (rate(dlock_acquire_wait_seconds_bucket", all, 1, true)
    assert.matches("histogram_quantile(0.99, sum by (factory, le) (rate(dlock_lease_hold_seconds_bucket", all, 1, true)
    for _, expr in ipairs(expressions()) do
      if not expr:find("^label_values") and (expr:find("dlock_acquire", 1, true) or expr:find("dlock_lease", 1, true)
          or expr:find("dlock_held", 1, true)) then
        assert.matches("by (factory", expr, 1, true)
      end
    end
    -- The guards of the demo gateway show as factories of their names.
    assert.matches('\ndlock_acquires_total{factory="jobs",outcome="acquired"} ', scrape, 1, true)
  end)
end)

h.check_error_logs()
