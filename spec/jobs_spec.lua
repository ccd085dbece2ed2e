-- A job that runs once at a time across the fleet, from a timer in every
-- worker (ngx.timer.every in init_worker_by_lua, the way an operator runs a
-- cleanup or a cache warm-up): nginx/spec-jobs.conf, two nginx of two workers
-- each, one Redis, the overlap witness around each run.
local h = require "helpers"

local redis

local function counter(name)
  return tonumber(h.cmd(redis.port, "get", name) or "0") or 0
end

--- Two nginx whose workers run `job` (ms each run) from their timers.
local function fleet(job, ms)
  local vars = { REDIS_PORT = redis.port, JOB = job, JOB_MS = ms }
  return h.start_nginx("spec-jobs.conf", vars), h.start_nginx("spec-jobs.conf", vars)
end

describe("a fleet's timer job", function()
  setup(function()
    redis = h.start_redis()
  end)

  it("runs one at a time across two nginx, and again and again", function()
    local job = h.unique("job")
    local a, b = fleet(job, 200)
    ngx.sleep(2.5)
    a.stop(); b.stop()
    local runs = counter("witness:" .. job .. ":runs")
    assert.is_true(runs >= 8, "only " .. runs .. " runs in 2.5 s of 200 ms jobs")
    assert.equal(0, counter("witness:" .. job .. ":overlaps"))
  end)

  it("goes on in the old worker through nginx -s reload, renewed past its ttl, with no second run beside it", function()
    local job = h.unique("job")
    local a, b = fleet(job, 2500)
    ngx.sleep(0.5)
    local old = a.workers()
    assert(a.reload())
    assert(b.reload())
    ngx.sleep(5.5)
    local runs = counter("witness:" .. job .. ":runs")
    assert.is_true(runs >= 2, "only " .. runs .. " runs")
    assert.equal(0, counter("witness:" .. job .. ":overlaps"))
    assert.is_true(a.exited(old, 3))
    a.stop(); b.stop()
  end)

  it("keeps its lock through nginx -s quit until the run ends, releases it then, and lets nginx exit", function()
    local job = h.unique("job")
    local key = "dlock:job:" .. job
    local a = h.start_nginx("spec-jobs.conf", { REDIS_PORT = redis.port, JOB = job, JOB_MS = 2000 })
    assert(h.eventually(1, function() return counter("witness:" .. job .. ":runs") == 1 end))
    local t0 = h.now()
    assert(h.sh("kill -QUIT " .. a.pid))
    ngx.sleep(1.5)   -- past the 1 s ttl: the quitting worker's renewals hold the key
    assert.equal(1, h.cmd(redis.port, "exists", key))
    assert(h.eventually(2, function() return h.cmd(redis.port, "exists", key) == 0 end))
    assert.is_true(h.now() - t0 < 2.5, "the key outlived the run by " .. (h.now() - t0 - 2) .. " s")
    assert.is_true(a.exited({ a.pid }, 2), "the quitting nginx did not exit after its job")
    local b = h.start_nginx("spec-jobs.conf", { REDIS_PORT = redis.port, JOB = job, JOB_MS = 100 })
    assert(h.eventually(2, function() return counter("witness:" .. job .. ":runs") >= 3 end))
    b.stop()
    assert.equal(0, counter("witness:" .. job .. ":overlaps"))
  end)
end)

h.check_error_logs()
