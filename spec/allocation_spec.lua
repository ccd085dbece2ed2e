-- What the hot path costs the garbage collector: bytes allocated per
-- uncontended acquire + release, in this nginx worker against the real test
-- Redis, with the collector stopped while it runs (collectgarbage("count") is
-- exact then). Allocation is deterministic where timing is not: these bounds
-- are asserted, loosely. The numbers go to the notice log (DLOCK_KEEP=1 keeps it).
local h = require "helpers"
local backend = require "resty.dlock.redis.backend"
local scripts = require "resty.dlock.redis.scripts"

local N = 2000

--- Bytes allocated per call of fn(i), i = 1..N, after a warm-up (traces compiled, pools and timers settled).
local function bytes_per_call(fn)
  for i = 1, 200 do fn(i) end
  collectgarbage("collect")
  collectgarbage("stop")
  local before = collectgarbage("count")
  for i = 1, N do fn(i) end
  local after = collectgarbage("count")
  collectgarbage("restart")
  return (after - before) * 1024 / N
end

local function report(what, bytes)
  ngx.log(ngx.NOTICE, string.format("allocation: %s: %.0f bytes per call", what, bytes))
end

describe("the uncontended hot path", function()
  local keys = {}
  for i = 1, N do keys[i] = "k" .. i end

  it("allocates a bounded number of bytes per acquire + release of a lock", function()
    local locks = h.locks()
    local opts = { ttl = 5000 }
    local pair = bytes_per_call(function(i)
      local lease = assert(locks:acquire(keys[i], opts))
      assert(lease:release())
    end)
    report("lock acquire + release", pair)
    -- The same two script calls through the transport alone: what Redis calls cost, without the lock around them.
    local store = locks._store
    local conf = store.redis
    local prefix = store.prefix
    local tok = string.rep("a", 32)
    local rkeys, qkeys = {}, {}
    for i = 1, N do
      rkeys[i] = prefix .. "t" .. i
      qkeys[i] = scripts.queueKey(rkeys[i], conf.slotted)
    end
    local transport = bytes_per_call(function(i)
      assert(backend.call(conf, scripts.ACQUIRE_QUEUED, rkeys[i], qkeys[i], tok, 5000, 0, ""))
      assert(backend.own(conf, scripts.RELEASE_QUEUED, rkeys[i], tok))
    end)
    report("the two Redis calls alone", transport)
    report("the lock around them", pair - transport)
    assert.is_true(pair < 4096, "bytes per acquire + release: " .. pair)
  end)

  it("allocates a bounded number of bytes per acquire + release of a permit", function()
    local sem = assert(require("resty.dlock.semaphore").new({ dict = "dlock", permits = 2,
      redis = h.redis_opts(), prefix = h.unique("spec-sem") }))
    local opts = { ttl = 5000 }
    local pair = bytes_per_call(function(i)
      local permit = assert(sem:acquire(keys[i], opts))
      assert(permit:release())
    end)
    report("permit acquire + release", pair)
    assert.is_true(pair < 4096, "bytes per acquire + release: " .. pair)
  end)
end)

h.check_error_logs({})
