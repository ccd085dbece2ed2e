-- make bench's section 1e: the nginx worker's CPU per operation of the library
-- alone, without HTTP. One request spawns `threads` light threads that each run
-- `n` operations on distinct keys (concurrent calls, so auto-pipelining batches
-- them as it batches concurrent requests); os.clock() around them is this
-- worker's CPU, user and system; ngx.now() around them the wall time, so the
-- operations per second one worker completes (with Redis' own time in them:
-- the throughput a rate check's one round trip buys against a lock's two).
-- Best of `rounds` for each: the least disturbed by the rest of the machine. Loaded by bench.conf and by bench-before.conf, whose
-- resty.dlock is an older revision's: only the API both have.
local dlock = require "resty.dlock"

local _M = {}

local locks, limiter

local function port()
  return assert(ngx.shared.bench:get("redis_port"))
end

local ops = {
  -- acquire + release, as the /core line's handler does
  core = function()
    locks = locks or assert(dlock.new({ dict = "dlock", prefix = "libcpu:", redis = { host = "127.0.0.1", port = port() } }))
    return function(k)
      local lease = assert(locks:acquire(k, { ttl = 10000 }))
      assert(lease:release())
    end
  end,
  -- one rate decision, as the /rate-api line's handler does
  rate = function()
    local ok, rate = pcall(require, "resty.dlock.rate")
    if not ok then return nil, "resty.dlock.rate is not in this revision" end
    limiter = limiter or assert(rate.new({ dict = "dlock", name = "libcpu", rate = 100, period = 60000,
      redis = { host = "127.0.0.1", port = port() } }))
    return function(k) assert(limiter:incoming(k, true)) end
  end,
}

--- "<µs of this worker's CPU per operation> <operations per second>" for `what`; or nil, why.
function _M.run(what, n, threads, rounds)
  local make = ops[what]
  if not make then return nil, "no operation " .. tostring(what) end
  local op, err = make()
  if not op then return nil, err end
  local function work(tag, count)
    for i = 1, count do op(tag .. i) end
  end
  local ths = {}
  local function pass(tag, count)
    for j = 1, threads do ths[j] = ngx.thread.spawn(work, tag .. j .. ":", count) end
    for j = 1, threads do assert(ngx.thread.wait(ths[j])) end
  end
  ngx.update_time()
  local run = string.format("%x:%d:", ngx.worker.pid(), ngx.now() * 1000)
  pass(run .. "warm:", 20)
  local best, fastest = math.huge, 0
  for r = 1, rounds do
    ngx.update_time()
    local c0, t0 = os.clock(), ngx.now()
    pass(run .. r .. ":", n)
    local us = (os.clock() - c0) * 1e6 / (n * threads)
    ngx.update_time()
    local per_s = n * threads / math.max(ngx.now() - t0, 0.001)
    if us < best then best = us end
    if per_s > fastest then fastest = per_s end
  end
  return string.format("%.3f %.0f", best, fastest)
end

return _M
