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

--- Bytes per call of the two script calls an uncontended acquire + release makes, through the transport
--- alone (no lease, no bookkeeping): what Redis calls cost, without the lock around them.
local function transport_bytes(store, acquire_script, acquire_args, release_script)
  local conf = store.redis
  local tok = string.rep("a", 32)
  local rkeys = {}
  for i = 1, N do rkeys[i] = store.prefix .. "t" .. i end
  return bytes_per_call(function(i)
    assert(backend.call(conf, acquire_script, rkeys[i], acquire_args(rkeys[i], tok)))
    assert(backend.own(conf, release_script, rkeys[i], tok))
  end)
end

describe("the uncontended hot path", function()
  local keys = {}
  for i = 1, N do keys[i] = "k" .. i end

  -- The lease (one table) and its strings (token, Redis keys, the ledger record) cost about 900 bytes;
  -- before the hot path was reworked, 1,350.
  local CORE_BOUND = 1100

  it("allocates little more than the lease around the Redis calls of an acquire + release of a lock", function()
    local locks = h.locks()
    local opts = { ttl = 5000 }
    local pair = bytes_per_call(function(i)
      local lease = assert(locks:acquire(keys[i], opts))
      assert(lease:release())
    end)
    local slotted = locks._store.redis.slotted
    local transport = transport_bytes(locks._store, scripts.ACQUIRE_QUEUED, function(rkey, tok)
      return scripts.queueKey(rkey, slotted), tok, 5000, 0, ""
    end, scripts.RELEASE_QUEUED)
    report("lock acquire + release", pair)
    report("its two Redis calls alone", transport)
    report("the lock around them", pair - transport)
    assert.is_true(pair - transport < CORE_BOUND, "bytes per lock acquire + release besides Redis calls: " .. (pair - transport))
  end)

  it("allocates little more than the lease around the Redis calls of an acquire + release of a permit", function()
    local sem = assert(require("resty.dlock.semaphore").new({ dict = "dlock", permits = 2,
      redis = h.redis_opts(), prefix = h.unique("spec-sem") }))
    local opts = { ttl = 5000 }
    local pair = bytes_per_call(function(i)
      local permit = assert(sem:acquire(keys[i], opts))
      assert(permit:release())
    end)
    local transport = transport_bytes(sem._store, scripts.SEM_ACQUIRE, function(_, tok)
      return tok, 5000, 2
    end, scripts.SEM_RELEASE)
    report("permit acquire + release", pair)
    report("its two Redis calls alone", transport)
    report("the semaphore around them", pair - transport)
    assert.is_true(pair - transport < CORE_BOUND, "bytes per permit acquire + release besides Redis calls: " .. (pair - transport))
  end)
end)

h.check_error_logs({})
