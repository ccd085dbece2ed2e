-- What the fuzz spec files (spec/fuzz_*_spec.lua) share. The promise under
-- test: every call returns a result, or nil and an error string that is
-- exactly "busy", "timeout" or "not_owner", or starts with "dlock: ". Nothing
-- raises, nothing hangs (each call returns within 2 s), and no Redis key
-- outside the configured prefix is ever created.
--
-- Each `it` reseeds the PRNG with SEED + its own number, so every test
-- replays the same inputs on every run, alone or with the others; another
-- seed explores other inputs: DLOCK_FUZZ_SEED=n spec/runner/run spec/fuzz_calls_spec.lua.
-- A failure message shows the offending call with its arguments (cycles and
-- binary bytes escaped). Each file uses a redis-server of its own, so that
-- the keyspace check at its end sees only what its own calls wrote.
local h = require "helpers"
local dlock = require "resty.dlock"
local semaphore = require "resty.dlock.semaphore"
local inputs = require "fuzz.values"
local contract = require "fuzz.contract"
local target = require("fuzz.options").target

local PREFIX = "fz:"   -- every object that talks to the fuzz Redis lives under it
local _M = { PREFIX = PREFIX }

local stats = contract.stats
local dead_added = false

--- In the calling describe: a setup that starts the file's Redis, points the
--- generators at it and makes the objects the calls use; a teardown that
--- stops it. Returns the table they go in: { locks, wlocks, sem, started }.
function _M.objects()
  local busted = getfenv(2)
  local o = {}
  busted.setup(function()
    if not dead_added then
      -- A finished coroutine among the hostile values (made here: ngx_lua's resume cannot run inside require).
      local dead = coroutine.create(function() end)
      coroutine.resume(dead)
      inputs.MISC[#inputs.MISC + 1] = inputs.named("dead coroutine", dead)
      dead_added = true
    end
    -- The counts of this file's calls, for its summary line.
    stats.calls, stats.results, stats.errors, stats.leases, stats.unknown = 0, 0, 0, 0, 0
    for i = #stats.accepted, 1, -1 do stats.accepted[i] = nil end
    o.server = h.start_redis()
    target.redis_port = o.server.port
    target.closed_port = h.free_port()
    local ropts = { port = target.redis_port, connect_timeout = 1000, read_timeout = 1000 }
    o.locks = assert(dlock.new({ dict = "dlock", redis = ropts, prefix = PREFIX .. "lock:" }))
    o.wlocks = assert(dlock.new({ dict = "dlock_other", redis = ropts, prefix = PREFIX .. "wlock:", owner = "worker" }))
    o.sem = assert(semaphore.new({ dict = "dlock", redis = ropts, prefix = PREFIX .. "sem:", permits = 2 }))
    inputs.NAMES[o.locks], inputs.NAMES[o.wlocks], inputs.NAMES[o.sem] = "locks", "worker_locks", "sem"
    ngx.update_time()
    o.started = ngx.now()
  end)
  busted.teardown(function()
    if o.server then o.server.stop() end
  end)
  return o
end

--- In the calling describe, after its tests: what the Redis keyspace holds
--- after all of them, and the file's summary line (`what`: its subject).
function _M.keyspace_checks(o, what)
  local busted = getfenv(2)
  local ser, keyspace = inputs.ser, contract.keyspace
  busted.describe("the Redis keyspace after all of the above", function()
    busted.it("holds no key outside the prefix " .. PREFIX .. " in any database", function()
      local outside = {}
      for _, e in ipairs(keyspace()) do
        if e.key:sub(1, #PREFIX) ~= PREFIX then outside[#outside + 1] = "db" .. e.db .. " " .. ser(e.key) end
      end
      assert(#outside == 0, #outside .. " keys outside " .. PREFIX .. ": " .. table.concat(outside, ", ", 1, math.min(#outside, 20)))
    end)

    busted.it("holds nothing under the prefixes of the objects whose leases were all released", function()
      local left = {}
      for _, e in ipairs(keyspace()) do
        for _, obj in ipairs({ o.locks, o.wlocks, o.sem }) do
          if e.db == 0 and e.key:sub(1, #obj.prefix) == obj.prefix then left[#left + 1] = ser(e.key) end
        end
      end
      assert(#left == 0, #left .. " keys left: " .. table.concat(left, ", ", 1, math.min(#left, 20)))
      ngx.update_time()
      local factories = #stats.accepted == 0 and "" or string.format("; accepted %s; %d leases and %d lost replies " ..
        "from fuzzed factories", table.concat(stats.accepted, ", "), stats.leases, stats.unknown)
      io.stdout:write(string.format("fuzz (%s): seed %d, %d calls (%d results, %d errors) in %.1f s%s\n", what,
        inputs.SEED, stats.calls, stats.results, stats.errors, ngx.now() - o.started, factories))
    end)
  end)
end

--- The error lines the fuzzed calls cause on purpose, for h.check_error_logs.
_M.EXPECTED_ERRORS = {
  -- Random endpoints: nobody listens there.
  "connect%(%) to unix:/nonexistent/fz%-redis%.sock failed %(2: No such file or directory%)",
  "connect%(%) failed %(111: Connection refused%), context: ngx%.timer",
  -- Random read_timeout values down to 1 ms: replies that come later time out.
  "lua tcp socket read timed out,[^\n]* context: ngx%.timer",
  -- The file's Redis, stopped at its end under a connection a timer reads (a wake-up subscriber, a batch's sender): nginx's line
  -- when the server's RST beats its FIN to that read (seen with lua-nginx-module 0.10.30, as in sentinel_spec).
  { "recv%(%) failed %(104: Connection reset by peer%),[^\n]* context: ngx%.timer", max = 2 },
}

return _M
