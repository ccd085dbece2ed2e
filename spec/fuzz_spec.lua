-- Fuzzing the public API with hostile input from a fixed-seed PRNG.
--
-- The promise under test: every call returns a result, or nil and an error
-- string that is exactly "busy", "timeout" or "not_owner", or starts with
-- "dlock: ". Nothing raises, nothing hangs (each call returns within 2 s), and
-- no Redis key outside the configured prefix is ever created.
--
-- Each `it` reseeds the PRNG with SEED + its own number, so every test replays
-- the same inputs on every run, alone or with the others. A failure message
-- shows the offending call with its arguments (cycles and binary bytes escaped).
-- The specs use a redis-server of their own so the keyspace check at the end
-- sees only what these calls wrote.
local h = require "helpers"
local ffi = require "ffi"
local dlock = require "resty.dlock"
local semaphore = require "resty.dlock.semaphore"
local resty_lock = require "resty.dlock.compat"
local gateway = require "resty.dlock.gateway"
local status = require "resty.dlock.status"

local inputs = require "fuzz.values"
local optgen = require "fuzz.options"
local contract = require "fuzz.contract"

-- Another seed explores other inputs: DLOCK_FUZZ_SEED=n spec/runner/run spec/fuzz_spec.lua
local SEED = inputs.SEED
local MAX_ERR_LEN = contract.MAX_ERR_LEN
local MAX_TTL = dlock.MAX_TTL
local MAX_KEY = dlock.MAX_KEY_LEN
local PREFIX = "fz:"          -- every object that talks to the fuzz Redis lives under it

local N_NEW, N_SEM_NEW, N_GW_NEW = 1000, 1000, 1000
local N_TOPO = 1000
local N_ACQUIRE, N_SEM_ACQUIRE = 1500, 1500
local N_HELD_KEY = 200
local N_EXTEND = 500
local N_WITH = 1000
local N_STATUS = 500
local N_COMPAT = 500
local N_ALL = 500

local reseed, int, chance, pick = inputs.reseed, inputs.int, inputs.chance, inputs.pick
local NAMES, named, pack, ser, args_of = inputs.NAMES, inputs.named, inputs.pack, inputs.ser, inputs.args_of
local TYPOS, MISC, hostile = inputs.TYPOS, inputs.MISC, inputs.hostile
local SAFE, valid_ttl, valid_wait, valid_key, any_key = optgen.SAFE, optgen.valid_ttl, optgen.valid_wait,
  optgen.valid_key, optgen.any_key
local safe_redis, any_redis, gen_opts, gen_acquire_opts = optgen.safe_redis, optgen.any_redis, optgen.gen_opts,
  optgen.gen_acquire_opts
local stats, violated, is_int_in, call, check_err, kept = contract.stats, contract.violated, contract.is_int_in,
  contract.call, contract.check_err, contract.kept
local valid_acquire, effective_ttl, rcmd, keyspace, release_now = contract.valid_acquire, contract.effective_ttl,
  contract.rcmd, contract.keyspace, contract.release_now
local target = optgen.target
do -- a finished coroutine among the hostile values (made here: ngx_lua's resume cannot run inside require)
  local dead = coroutine.create(function() end)
  coroutine.resume(dead)
  MISC[#MISC + 1] = named("dead coroutine", dead)
end

------------------------------------------------------------------------------
-- The specs.
------------------------------------------------------------------------------
describe("the public API under fuzzing (seed " .. SEED .. ")", function()
  local server, locks, wlocks, sem
  local started

  setup(function()
    server = h.start_redis()
    target.redis_port = server.port
    target.closed_port = h.free_port()
    local ropts = { port = target.redis_port, connect_timeout = 1000, read_timeout = 1000 }
    locks = assert(dlock.new({ dict = "dlock", redis = ropts, prefix = PREFIX .. "lock:" }))
    wlocks = assert(dlock.new({ dict = "dlock_other", redis = ropts, prefix = PREFIX .. "wlock:", owner = "worker" }))
    sem = assert(semaphore.new({ dict = "dlock", redis = ropts, prefix = PREFIX .. "sem:", permits = 2 }))
    NAMES[locks], NAMES[wlocks], NAMES[sem] = "locks", "worker_locks", "sem"
    ngx.update_time()
    started = ngx.now()
  end)

  teardown(function()
    if server then server.stop() end
  end)

  describe("factories", function()
    local NEW_FIELDS = {
      { "dict", function() return pick({ "dlock", "dlock_other" }) end, true },
      { "redis", safe_redis, false, 0.8, any_redis },
      { "prefix", function() return PREFIX .. "new:" .. pick({ "", "a:", "\0\255:", "%s:", int(1, 99) .. ":" }) end, false, 0.8 },
      { "owner", function() return pick({ "random", "worker" }) end },
      { "name", function() return pick({ "orders", "a.b-c_1", "n" .. int(1, 9) }) end },
      { "ttl", valid_ttl },
      { "wait", valid_wait },
    }
    local SEM_FIELDS = {
      { "dict", function() return pick({ "dlock", "dlock_other" }) end, true },
      { "permits", function() return pick({ 1, 2, semaphore.MAX_PERMITS, int(1, semaphore.MAX_PERMITS) }) end, true },
      { "name", function() return pick({ "reports", "s.1", "n" .. int(1, 9) }) end },
      { "redis", safe_redis, false, 0.8, any_redis },
      { "prefix", function() return PREFIX .. "new:sem:" .. pick({ "", "b:", "\0:" }) end, false, 0.8 },
      { "ttl", valid_ttl },
      { "wait", valid_wait },
    }

    --- One acquire and release on a factory the fuzz created, when its options
    --- point at the fuzz Redis (or nowhere) under PREFIX: a lease, or an error.
    local function try_factory(kind, i, opts, obj)
      if type(opts) ~= "table" or not SAFE[opts.redis] then return end
      if type(opts.prefix) ~= "string" or opts.prefix:sub(1, #PREFIX) ~= PREFIX then return end
      local key = "n" .. kind .. i
      local what = function() return kind .. ".new(" .. ser(opts) .. "):acquire(" .. ser(key) .. ", { wait = 0 })" end
      local lease, err = kept(what, obj.acquire, obj, key, { wait = 0 })
      if lease then
        stats.leases = stats.leases + 1
        -- A fuzzed Redis config may time out here (read_timeout = 1): any kept promise will do.
        kept(function() return what() .. " then lease:release()" end, lease.release, lease)
      elseif err == "busy" or err == "timeout" or err == "not_owner" then
        violated(what() .. " said " .. err .. " on a key nobody holds")
      elseif err:find("outcome unknown", 1, true) then
        stats.unknown = stats.unknown + 1
      end
      local pw = opts.redis.password
      if err and pw and err:find(pw, 1, true) then
        violated(what() .. " put the password in its error: " .. ser(err))
      end
    end

    local function fuzz_factory(kind, new, fields, n, base)
      reseed(base)
      local accepted = 0
      for i = 1, n do
        local opts, valid, typo = gen_opts(fields, 0.4, 0.3)
        local what = function() return kind .. ".new(" .. ser(opts) .. ")" end
        local obj, err = kept(what, new, opts)
        if obj then
          accepted = accepted + 1
          if type(obj) ~= "table" or type(obj.acquire) ~= "function" or type(obj.with) ~= "function" then
            violated(what() .. " returned " .. ser(obj) .. " instead of a factory")
          end
          if typo then violated(what() .. " ignored an unknown option") end
          try_factory(kind, i, opts, obj)
        else
          if valid then violated(what() .. " refused valid options: " .. err) end
          if typo and not err:find("^dlock: unknown option") then
            violated(what() .. ' should name the unknown option, said: ' .. err)
          end
        end
      end
      stats.accepted[#stats.accepted + 1] = kind .. ".new " .. accepted .. "/" .. n
      assert.is_true(accepted > n / 10, kind .. ".new accepted only " .. accepted .. " of " .. n)
    end

    it("dlock.new answers " .. N_NEW .. " random option tables with a factory or a \"dlock: \" error, " ..
       "accepts every valid one, names every unknown option", function()
      fuzz_factory("dlock", dlock.new, NEW_FIELDS, N_NEW, 1)
    end)

    it("semaphore.new answers " .. N_SEM_NEW .. " random option tables the same way", function()
      fuzz_factory("semaphore", semaphore.new, SEM_FIELDS, N_SEM_NEW, 2)
    end)

    --- An oracle for redis.cluster and redis.redlock, written apart from the schema that checks them.
    local function is_node(v)
      if type(v) ~= "string" then return false end
      local host, port = v:match("^%[([%x:%.]+)%]:(%d+)$")
      if not host then host, port = v:match("^([%w%.%-_]+):(%d+)$") end
      port = tonumber(port)
      return host ~= nil and port ~= nil and port >= 1 and port <= 65535
    end
    local function nodes_ok(list, min)
      if type(list) ~= "table" or #list == 0 then return false end
      local n = 0
      for _, v in ipairs(list) do
        if not is_node(v) then return false end
        n = n + 1
      end
      return n >= min
    end
    local function cluster_ok(c)
      if c == nil then return true end -- also the FFI NULL pointer: no cluster at all
      if type(c) ~= "table" then return false end
      for k in pairs(c) do
        if k ~= "nodes" and k ~= "max_redirects" then return false end
      end
      return nodes_ok(c.nodes, 1) and (c.max_redirects == nil or is_int_in(c.max_redirects, 1, 16))
    end
    local function redlock_ok(list)
      if list == nil then return true end
      if not nodes_ok(list, 3) then return false end
      local seen = {}
      for _, v in ipairs(list) do
        local host, port = v:match("^%[([%x:%.]+)%]:(%d+)$")
        if not host then host, port = v:match("^(.+):(%d+)$") end
        local name = host .. ":" .. tonumber(port)
        if seen[name] then return false end -- one master named twice is not independent
        seen[name] = true
      end
      return true
    end

    local function any_nodes(lo, hi)
      local t = {}
      for i = 1, int(lo, hi) do
        if chance(0.85) then
          t[i] = pick({ "127.0.0.1:" .. target.closed_port, "[::1]:" .. int(1, 65535), "redis-" .. i .. ".example:" .. int(1, 65535) })
        else
          t[i] = pick({ "h:0", "h:65536", "h:" .. string.rep("9", 40), "[::1]", "h:", ":1", "h :1", "h:1x", "[zz]:1",
                        "h:-1", "h:1.5", "h:0x10", hostile(1) })
        end
      end
      return t
    end
    local function any_cluster()
      if chance(0.1) then return hostile(1) end
      local c = {}
      if chance(0.9) then c.nodes = chance(0.85) and any_nodes(0, 4) or hostile(1) end
      if chance(0.5) then c.max_redirects = chance(0.6) and int(0, 17) or hostile(1) end
      if chance(0.05) then c[pick(TYPOS)] = 1 end
      return c
    end

    it("refuses every bad redis.cluster and redis.redlock table with nil and a \"dlock: \" error naming it, " ..
       "accepts every good one, never raises", function()
      reseed(4)
      local accepted, refused = 0, 0
      for i = 1, N_TOPO do
        local r, ok = {}
        if chance(0.5) then
          r.cluster = any_cluster()
          ok = cluster_ok(r.cluster)
        else
          r.redlock = chance(0.9) and any_nodes(0, 5) or hostile(1)
          ok = redlock_ok(r.redlock)
        end
        if chance(0.1) then -- one address only
          r.host = "127.0.0.1"
          if r.cluster ~= nil or r.redlock ~= nil then ok = false end
        end
        if chance(0.2) then -- a cluster has one database
          r.db = int(0, 2)
          if r.cluster ~= nil and r.db ~= 0 then ok = false end
        end
        if chance(0.2) then -- a Redlock majority does not WAIT
          r.replicas = int(0, 2)
          if r.redlock ~= nil and r.replicas ~= 0 then ok = false end
        end
        if chance(0.1) then r.ssl = true end
        local opts = { dict = "dlock", redis = r, prefix = PREFIX .. "topo:" }
        local what = function() return "dlock.new(" .. ser(opts) .. ")" end
        local obj, err = kept(what, dlock.new, opts)
        if obj then
          accepted = accepted + 1
          if not ok then violated(what() .. " accepted a bad redis table") end
        else
          refused = refused + 1
          if ok then violated(what() .. " refused a good redis table: " .. err) end
          if not err:find("redis", 1, true) then violated(what() .. " did not name the redis option: " .. err) end
        end
      end
      stats.accepted[#stats.accepted + 1] = "dlock.new (cluster/redlock) " .. accepted .. "/" .. N_TOPO
      assert.is_true(accepted > N_TOPO / 10, "only " .. accepted .. " of " .. N_TOPO .. " accepted")
      assert.is_true(refused > N_TOPO / 4, "only " .. refused .. " of " .. N_TOPO .. " refused")
    end)

    it("gateway.new answers " .. N_GW_NEW .. " random guard definitions with a guard or a \"dlock: \" error, " ..
       "accepts every valid one", function()
      reseed(3)
      local seq = 0
      local names = {}
      local function fresh_name()
        if #names > 0 and chance(0.05) then return names[int(1, #names)] end -- taken already
        seq = seq + 1
        return "fz-gw-" .. seq
      end
      local status_code = function() return int(200, 599) end
      local COMMON = {
        { "name", fresh_name },
        { "key", function() return pick({ "$http_idempotency_key", "$remote_addr:$uri", "job:$arg_job",
                                            named("key fn", function() return "k" end) }) end, true },
        { "on_error", function() return pick({ "allow", "deny" }) end, true },
        { "on_missing", function() return pick({ "pass", "reject" }) end },
        { "dict", function() return pick({ "dlock", "dlock_other" }) end },
        { "redis", safe_redis, false, nil, any_redis },
        { "prefix", function() return PREFIX .. "gw:" end },
        { "ttl", valid_ttl },
        { "reject_status", status_code },
        { "missing_status", status_code },
        { "error_status", status_code },
        { "headers", function() return pick({ {}, { ["X-Fz"] = "1" }, { ["Retry-Reason"] = "busy", A = "" } }) end },
        { "breaker_failures", function() return int(1, 1000000) end },
        { "breaker_cooldown", function() return int(1, 3600000) end },
      }
      local PER_MODE = {
        dedup = { { "hold", function() return int(0, MAX_TTL) end }, { "renew", function() return chance(0.5) end } },
        concurrency = { { "permits", function() return int(1, 100000) end, true }, { "wait", valid_wait },
                        { "renew", function() return chance(0.5) end } },
        throttle = {},
        mutex = { { "wait", valid_wait }, { "renew", function() return chance(0.5) end },
                  { "shared", function() return pick({ { "GET" }, { "GET", "HEAD" }, { "PROPFIND" } }) end } },
      }
      local accepted = 0
      for i = 1, N_GW_NEW do
        local mode = pick({ "dedup", "concurrency", "throttle", "mutex" })
        local fields = {}
        for _, f in ipairs(COMMON) do fields[#fields + 1] = f end
        for _, f in ipairs(PER_MODE[mode]) do fields[#fields + 1] = f end
        local opts, valid, typo = gen_opts(fields, 0.25, 0.25)
        if type(opts) == "table" then
          if chance(0.9) then opts.mode = mode else opts.mode = hostile(); valid = false end
          if chance(0.05) then -- an option of another mode
            local f = pick({ "hold", "permits", "wait", "renew", "shared" })
            local applies = (f == "hold" and mode == "dedup") or (f == "permits" and mode == "concurrency")
              or (f == "wait" and (mode == "concurrency" or mode == "mutex")) or (f == "renew" and mode ~= "throttle")
              or (f == "shared" and mode == "mutex")
            if not applies then
              opts[f] = f == "renew" and true or f == "shared" and { "GET" } or 1
              valid = false
            end
          end
          if valid and type(opts.name) == "string" then
            for _, n in ipairs(names) do if n == opts.name then valid = false end end
          end
        end
        local what = function() return "gateway.new(" .. ser(opts) .. ")" end
        local g, err = kept(what, gateway.new, opts)
        if g then
          accepted = accepted + 1
          if typo then violated(what() .. " ignored an unknown option") end
          if type(g.access) ~= "function" or type(g.log) ~= "function" then
            violated(what() .. " returned " .. ser(g) .. " instead of a guard")
          end
          names[#names + 1] = g.name
        elseif valid then
          violated(what() .. " refused a valid guard: " .. err)
        end
        if i % 100 == 0 then
          local report = kept(function() return "status.report() after " .. i .. " guards" end, status.report)
          assert.is_table(report)
        end
      end
      stats.accepted[#stats.accepted + 1] = "gateway.new " .. accepted .. "/" .. N_GW_NEW
      assert.is_true(accepted > N_GW_NEW / 20, "gateway.new accepted only " .. accepted)
    end)
  end)

  describe("acquire", function()
    --- n random acquire calls on obj while nothing is held: every valid call
    --- gets a lease (released at once), every invalid one a "dlock: " error.
    local function fuzz_acquire(obj, n, base)
      reseed(base)
      local granted = 0
      for i = 1, n do
        local key, opts = any_key(), gen_acquire_opts()
        local what = function() return NAMES[obj] .. ":acquire(" .. ser(key) .. ", " .. ser(opts) .. ")" end
        local lease, err = kept(what, obj.acquire, obj, key, opts)
        if valid_acquire(key, opts, obj) then
          if not lease then violated(what() .. " refused a valid call on a free key: " .. ser(err)) end
          granted = granted + 1
          local ttl = effective_ttl(obj, opts)
          if lease.key ~= key or lease.ttl ~= ttl or type(lease.token) ~= "string" then
            violated(what() .. " returned a lease with key " .. ser(lease.key) .. ", ttl " .. ser(lease.ttl))
          end
          if i % 10 == 0 and ttl > 1000 then
            local n_ = rcmd("exists", obj.prefix .. key)
            if n_ ~= 1 then violated(what() .. " left no key " .. ser(obj.prefix .. key) .. " in Redis") end
          end
          release_now(what, lease, ttl)
        elseif lease then
          release_now(what, lease, lease.ttl)
          violated(what() .. " accepted an invalid call")
        elseif err == "busy" or err == "timeout" or err == "not_owner" then
          violated(what() .. " answered " .. err .. " to invalid input instead of a \"dlock: \" error")
        end
      end
      assert.is_true(granted > n / 5, "only " .. granted .. " of " .. n .. " calls were valid")
    end

    --- n random calls on a key that is held: valid ones answer "busy" (wait 0)
    --- or "timeout" (wait > 0) with the holder's remaining ttl, never a lease.
    local function fuzz_held(obj, n, base)
      reseed(base)
      for i = 1, n do
        local key = chance(0.75) and "held" or any_key()
        local opts = gen_acquire_opts()
        if type(opts) == "table" and is_int_in(opts.wait, 51, math.huge) then opts.wait = int(0, 50) end
        local what = function() return NAMES[obj] .. ":acquire(" .. ser(key) .. ", " .. ser(opts) .. ") on a held key" end
        local lease, err, retry_after, dt = kept(what, obj.acquire, obj, key, opts)
        local valid = valid_acquire(key, opts, obj)
        if valid and key == "held" then
          local wait = type(opts) == "table" and opts.wait ~= nil and opts.wait or 0 -- the FFI NULL == nil
          local expect = wait == 0 and "busy" or "timeout"
          if lease then
            lease:release()
            violated(what() .. " handed out a held key")
          end
          if err ~= expect then violated(what() .. " said " .. ser(err) .. ", expected " .. expect) end
          if not (type(retry_after) == "number" and retry_after > 0 and retry_after <= 60000) then
            violated(what() .. " gave retry_after " .. ser(retry_after))
          end
          if dt > wait / 1000 + 0.5 then violated(what() .. " waited " .. dt .. " s") end
        elseif valid then
          if not lease then violated(what() .. " refused a valid call on a free key: " .. ser(err)) end
          release_now(what, lease, effective_ttl(obj, opts))
        elseif lease then
          lease:release()
          violated(what() .. " accepted an invalid call")
        end
      end
    end

    it("locks:acquire gives a lease for each valid key and options and a \"dlock: \" error for each " ..
       "invalid one, on " .. N_ACQUIRE .. " random calls", function()
      fuzz_acquire(locks, N_ACQUIRE * 2 / 3, 10)
      fuzz_acquire(wlocks, N_ACQUIRE / 3, 11)
    end)

    it("sem:acquire does the same on " .. N_SEM_ACQUIRE .. " random calls", function()
      fuzz_acquire(sem, N_SEM_ACQUIRE, 12)
    end)

    it("never hands out a held lock: " .. N_HELD_KEY .. " random calls answer busy, timeout or a \"dlock: \" error", function()
      local holder = assert(locks:acquire("held", { ttl = 60000 }))
      finally(function() holder:release() end)
      fuzz_held(locks, N_HELD_KEY, 13)
    end)

    --- A key list for acquire_all: mostly 1 to 5 valid keys, else something hostile.
    local function any_keys()
      local k = int(1, 10)
      if k == 1 then return hostile() end
      if k == 2 then return {} end
      if k == 3 then
        local many = {}
        for i = 1, int(60, 70) do many[i] = "m" .. i end
        return many
      end
      local list = {}
      for i = 1, int(1, 5) do list[i] = chance(0.9) and valid_key() or hostile() end
      if chance(0.05) then list[#list + 2] = "hole" end
      if chance(0.05) then list.x = "field" end
      if chance(0.05) then list[#list + 1] = list[1] end
      return list
    end

    local function valid_keys(keys)
      if type(keys) ~= "table" or #keys < 1 or #keys > 64 then return false end
      local n, seen = 0, {}
      for k, v in pairs(keys) do
        if type(k) ~= "number" or k < 1 or k > #keys or k ~= math.floor(k) then return false end
        if type(v) ~= "string" or #v < 1 or #v > MAX_KEY or seen[v] then return false end
        seen[v] = true
        n = n + 1
      end
      return n == #keys
    end

    it("locks:acquire_all gives a lease for each valid key list and options and a \"dlock: \" error for each " ..
       "invalid one, on " .. N_ALL .. " random calls", function()
      reseed(15)
      local granted = 0
      for _ = 1, N_ALL do
        local keys, opts = any_keys(), gen_acquire_opts()
        local what = function() return "locks:acquire_all(" .. ser(keys) .. ", " .. ser(opts) .. ")" end
        local lease, err = kept(what, locks.acquire_all, locks, keys, opts)
        local valid = valid_keys(keys) and valid_acquire("k", opts, locks) and not (type(opts) == "table" and opts.shared == true)
        if valid then
          if not lease then violated(what() .. " refused a valid call on free keys: " .. ser(err)) end
          granted = granted + 1
          if #lease.keys ~= #keys or lease.key ~= keys[1] or lease.ttl ~= effective_ttl(locks, opts) then
            violated(what() .. " returned a lease with keys " .. ser(lease.keys) .. ", ttl " .. ser(lease.ttl))
          end
          release_now(what, lease, lease.ttl)
        elseif lease then
          release_now(what, lease, lease.ttl)
          violated(what() .. " accepted an invalid call")
        elseif err == "busy" or err == "timeout" or err == "not_owner" then
          violated(what() .. " answered " .. err .. " to invalid input instead of a \"dlock: \" error")
        end
      end
      assert.is_true(granted > N_ALL / 5, "only " .. granted .. " of " .. N_ALL .. " calls were valid")
    end)

    it("never hands out a permit beyond the limit: " .. N_HELD_KEY .. " random calls on a full semaphore", function()
      local a = assert(sem:acquire("held", { ttl = 60000 }))
      local b = assert(sem:acquire("held", { ttl = 60000 }))
      finally(function() a:release() b:release() end)
      fuzz_held(sem, N_HELD_KEY, 14)
    end)
  end)

  describe("leases", function()
    it("extend with random ttls on " .. N_EXTEND .. " real leases and permits returns true, \"not_owner\" or a " ..
       "\"dlock: \" error, and bad input leaves the lease as it was", function()
      reseed(20)
      for i = 1, N_EXTEND do
        local obj = pick({ locks, wlocks, sem })
        local key = "ext:" .. i
        local lease = assert(obj:acquire(key, { ttl = 5000 }))
        local live = 5000
        local log = { NAMES[obj] .. ":acquire(" .. ser(key) .. ", { ttl = 5000 })" }
        local what = function() return table.concat(log, " then ") end
        for _ = 1, int(1, 3) do
          local ttl = chance(0.15) and nil or (chance(0.5) and valid_ttl() or hostile(1))
          log[#log + 1] = "lease:extend(" .. ser(ttl) .. ")"
          local before = lease.ttl
          local ok, err = kept(what, lease.extend, lease, ttl)
          if ttl == nil or is_int_in(ttl, 1, MAX_TTL) then
            if ok == true then
              live = ttl == nil and before or ttl -- ttl may be the FFI NULL, which == nil
              if lease.ttl ~= live then violated(what() .. " left lease.ttl at " .. ser(lease.ttl)) end
            elseif not (err == "not_owner" and live <= 1000) then
              violated(what() .. " returned " .. ser(ok) .. ", " .. ser(err))
            end
          else
            if ok ~= nil or not err:find("^dlock: ttl must be") then
              violated(what() .. " accepted a bad ttl or named another problem: " .. ser(ok) .. ", " .. ser(err))
            end
            if lease.ttl ~= before then violated(what() .. " changed lease.ttl to " .. ser(lease.ttl)) end
          end
        end
        log[#log + 1] = "lease:release()"
        release_now(what, lease, live)
        if chance(0.3) then -- a released lease is no longer ours
          local again = pick({ "release", "extend" })
          log[#log + 1] = "lease:" .. again .. "()"
          local ok, err = kept(what, lease[again], lease)
          if ok ~= nil or err ~= "not_owner" then
            violated(what() .. " on a released lease returned " .. ser(ok) .. ", " .. ser(err))
          end
        end
      end
    end)
  end)

  describe("with", function()
    it("runs fn under the lock and hands back its results or its error, releases the key whatever fn does, " ..
       "refuses what is not a function, on " .. N_WITH .. " random calls", function()
      reseed(30)
      -- Callbacks; each call wraps one so the spec knows whether it ran, what it
      -- returned and whether it raised.
      local FNS = {
        { "echo", function() return function(...) return ... end end },
        { "constant", function() return function() return "done", 42 end end },
        { "nothing", function() return function() end end },
        { "raise a string", function() return function() error("boom %s \0\255", 0) end end },
        { "raise a table", function() return function() error({ code = 1 }) end end },
        { "raise nil", function() return function() error(nil) end end },
        { "raise a number", function() return function() error(42) end end },
        { "sleep 1 ms", function() return function() ngx.sleep(0.001) return true end end },
        { "try the key again", function(rec, obj, key)
          return function()
            local l2, e2 = obj:acquire(key, { wait = 0 })
            rec.inside = l2 and "lease" or e2
            if l2 then l2:release() end
            return "checked"
          end
        end },
        { "nested with", function(_, obj, key)
          return function() return obj:with(key .. ":inner", nil, function() return "inner" end) end
        end },
      }
      local function watched(rec, inner)
        return function(...)
          rec.ran = true
          local res = pack(pcall(inner, ...))
          if not res[1] then
            rec.raised = true
            error(res[2], 0)
          end
          rec.results = pack(unpack(res, 2, res.n))
          return unpack(res, 2, res.n)
        end
      end
      local freed = 0
      for i = 1, N_WITH do
        local obj = pick({ locks, wlocks, sem })
        local key = chance(0.8) and valid_key() or hostile()
        local opts = gen_acquire_opts()
        local rec = {}
        local fn, fname
        if chance(0.85) then
          local f = pick(FNS)
          fname, fn = f[1], watched(rec, f[2](rec, obj, key))
        else
          fn = hostile(1)
          fname = ser(fn)
          if type(fn) == "function" then fn = watched(rec, fn) end
        end
        local args = {}
        local nargs = int(0, 4)
        for j = 1, nargs do args[j] = hostile(1) end
        local what = function()
          return string.format("%s:with(%s, %s, <%s>%s)", NAMES[obj], ser(key), ser(opts), fname,
            nargs > 0 and ", " .. args_of({ n = nargs, unpack(args, 1, nargs) }) or "")
        end
        local r = call(what, obj.with, obj, key, opts, fn, unpack(args, 1, nargs))
        if type(fn) ~= "function" then
          if r[2] ~= nil or type(r[3]) ~= "string" or not r[3]:find("^dlock: with needs a function") then
            violated(what() .. " returned " .. args_of({ n = r.n - 1, unpack(r, 2, r.n) }))
          end
        elseif not valid_acquire(key, opts, obj) then
          if rec.ran then violated(what() .. " ran fn on invalid input") end
          if r[2] ~= nil then violated(what() .. " returned a result for invalid input: " .. ser(r[2])) end
          check_err(what, r[3])
        else
          if not rec.ran then violated(what() .. " did not run fn on a free key: " .. ser(r[3])) end
          if rec.raised then
            local prefix = "dlock: callback failed while holding " .. key .. ": "
            if r[2] ~= nil or type(r[3]) ~= "string" or r[3]:sub(1, #prefix) ~= prefix then
              violated(what() .. " should report fn's error, returned " .. args_of({ n = r.n - 1, unpack(r, 2, r.n) }))
            end
          else
            local want = rec.results
            local same = r.n - 1 == want.n
            for j = 1, want.n do
              local a, b = r[j + 1], want[j]
              if not (a == b or (a ~= a and b ~= b)) then same = false end
            end
            if not same then
              violated(what() .. " returned " .. args_of({ n = r.n - 1, unpack(r, 2, r.n) }) ..
                " instead of fn's " .. args_of(want))
            end
          end
          -- A lease of a few ms may run out while fn runs; then the key is free, as it should be.
          local ttl = type(opts) == "table" and type(opts.ttl) == "number" and opts.ttl or obj.ttl
          if rec.inside ~= nil and obj ~= sem and rec.inside ~= "busy" and ttl >= 1000 then
            violated(what() .. ": inside fn the key was not held, acquire said " .. ser(rec.inside))
          end
          -- Released whatever fn did: the key is free again at once.
          local again, aerr = kept(function() return what() .. " then acquire again" end, obj.acquire, obj, key, { wait = 0 })
          if not again then violated(what() .. " left the key held: " .. ser(aerr)) end
          release_now(what, again, again.ttl)
          freed = freed + 1
        end
      end
      assert.is_true(freed > N_WITH / 5, "only " .. freed .. " with() calls ran fn")
    end)
  end)

  describe("held and status.report", function()
    it("held() lists well-formed leases and status.report answers " .. N_STATUS .. " random option tables " ..
       "with a report without tokens or a \"dlock: \" error", function()
      reseed(40)
      local DICTS = { dlock = true, dlock_other = true }
      for i = 1, N_STATUS do
        local opts
        local k = int(1, 10)
        if k <= 2 then opts = nil
        elseif k <= 4 then opts = hostile()
        else
          local list = {}
          for j = 1, int(0, 3) do list[j] = chance(0.7) and pick({ "dlock", "dlock_other" }) or hostile(1) end
          opts = (gen_opts({ { "dicts", function() return list end } }, 0.8, 0.15))
        end
        local what = function() return "status.report(" .. ser(opts) .. ")" end
        local valid = opts == nil
        if type(opts) == "table" then
          valid = true
          for name in pairs(opts) do if name ~= "dicts" then valid = false end end
          local d = opts.dicts
          if d ~= nil then
            if type(d) ~= "table" then valid = false
            else
              for _, n in ipairs(d) do if type(n) ~= "string" or not DICTS[n] then valid = false end end
            end
          end
        end
        local report, err = kept(what, status.report, opts)
        if valid then
          if not report then violated(what() .. " refused valid options: " .. ser(err)) end
          if type(report.dicts) ~= "table" or type(report.held) ~= "table" or type(report.guards) ~= "table" then
            violated(what() .. " returned " .. ser(report))
          end
          for _, l in ipairs(report.held) do
            if l.token ~= nil then violated(what() .. " shows a lease token") end
          end
        elseif report then
          violated(what() .. " accepted invalid options")
        end
        if i % 10 == 0 then
          local obj = pick({ locks, wlocks, sem })
          local list = kept(function() return NAMES[obj] .. ":held()" end, obj.held, obj, hostile(1))
          for _, l in ipairs(list) do
            if type(l.key) ~= "string" or type(l.token) ~= "string" or type(l.pid) ~= "number"
              or type(l.ttl) ~= "number" or l.ttl < 0 or type(l.expires_at) ~= "number" then
              violated(NAMES[obj] .. ":held() listed " .. ser(l))
            end
          end
        end
      end
    end)
  end)

  -- Found by this fuzzing (and fixed): values whose tostring misbehaves.
  describe("values whose __tostring misbehaves", function()
    --- Run every case; collect the broken promises so the message shows them all.
    local function all_kept(cases)
      local broken = {}
      for _, c in ipairs(cases) do
        local r = pack(pcall(c[2]))
        if not r[1] then
          broken[#broken + 1] = c[1] .. " raised: " .. tostring(r[2])
        elseif r[2] == nil and not (type(r[3]) == "string" and r[3]:sub(1, 7) == "dlock: ") then
          broken[#broken + 1] = c[1] .. " returned " .. ser(r[2]) .. ", " .. ser(r[3])
        end
      end
      assert.is_true(#broken == 0, #broken .. " of " .. #cases .. " calls broke the contract:\n  " ..
        table.concat(broken, "\n  "))
    end

    it("with() returns nil, \"dlock: callback failed ...\" when fn raises an error value whose __tostring " ..
       "returns nil, returns a table or raises, and releases the lease", function()
      local values = {
        { "__tostring returns nil", setmetatable({}, { __tostring = function() end }) },
        { "__tostring returns a table", setmetatable({}, { __tostring = function() return {} end }) },
        { "__tostring raises", setmetatable({}, { __tostring = function() error("tostring failed") end }) },
      }
      local cases = {}
      for i, v in ipairs(values) do
        cases[i] = { 'locks:with("bug:' .. i .. '", nil, function() error(<' .. v[1] .. '>) end)',
          function() return locks:with("bug:" .. i, nil, function() error(v[2]) end) end }
      end
      all_kept(cases)
      for i = 1, #values do -- what works: the key was released before the raise
        assert(locks:acquire("bug:" .. i, { wait = 0 })):release()
      end
    end)

    it("every validation error is returned, not raised, when the bad value is FFI cdata whose " ..
       "__tostring raises or returns nil", function()
      local raising = ffi.metatype("struct { int fz_raise; }", { __tostring = function() error("tostring failed") end })
      local silent = ffi.metatype("struct { int fz_nil; }", { __tostring = function() return nil end })
      local cases = {}
      for _, c in ipairs({ { "<cdata, __tostring raises>", raising() }, { "<cdata, __tostring returns nil>", silent() } }) do
        local label, v = c[1], c[2]
        local calls = {
          { "dlock.new({ dict = %s })", function() return dlock.new({ dict = v }) end },
          { "locks:acquire(%s)", function() return locks:acquire(v) end },
          { 'locks:acquire("k", { ttl = %s })', function() return locks:acquire("k", { ttl = v }) end },
          { 'semaphore.new({ dict = "dlock", permits = %s })', function() return semaphore.new({ dict = "dlock", permits = v }) end },
          { "gateway.new({ mode = %s })", function() return gateway.new({ mode = v }) end },
          { "status.report({ dicts = { %s } })", function() return status.report({ dicts = { v } }) end },
          { "lease:extend(%s)", function()
            local lease = assert(locks:acquire("bug:extend"))
            local r = pack(pcall(lease.extend, lease, v))
            lease:release()
            if not r[1] then error(r[2], 0) end
            return unpack(r, 2, r.n)
          end },
        }
        for _, k in ipairs(calls) do cases[#cases + 1] = { k[1]:format(label), k[2] } end
      end
      all_kept(cases)
    end)
  end)

  describe("the lua-resty-lock facade", function()
    -- lua-resty-lock's own answers, plus ours ("not_owner", "dlock: ...").
    local COMPAT_ERRORS = { ["timeout"] = true, ["locked"] = true, ["nil key"] = true, ["unlocked"] = true,
                            ["not_owner"] = true, ["dictionary not found"] = true }

    local function compat_kept(what, fn, ...)
      local r = call(what, fn, ...)
      if r[2] ~= nil then return r[2], nil end
      local err = r[3]
      if type(err) ~= "string" or not (COMPAT_ERRORS[err] or err:sub(1, 7) == "dlock: ") or #err > MAX_ERR_LEN then
        violated(what() .. " returned nil and " .. ser(err))
      end
      return nil, err
    end

    it("new, lock, expire and unlock with " .. N_COMPAT .. " random inputs return a result or one of its errors, " ..
       "and never leave a key behind", function()
      reseed(40)
      local taken = 0
      assert(resty_lock.configure({ redis = { port = target.redis_port }, prefix = PREFIX .. "compat:" }))
      for i = 1, N_COMPAT do
        local dict = chance(0.8) and pick({ "dlock", "dlock_other" }) or hostile(1)
        local opts = gen_opts({
          { "exptime", function() return pick({ 0.001, 0.5, 5, 30, int(1, 86400) }) end },
          { "timeout", function() return pick({ 0, 0.01, 0.1 }) end },
          { "step", function() return pick({ 0.001, 0.1 }) end },
          { "ratio", function() return pick({ 1, 2 }) end },
          { "max_step", function() return pick({ 0.5 }) end },
        }, 0.5, 0.3)
        local log = { "resty_lock:new(" .. ser(dict) .. ", " .. ser(opts) .. ")" }
        local what = function() return table.concat(log, " then ") end
        local lock = compat_kept(what, resty_lock.new, resty_lock, dict, opts)
        if lock then
          local key = chance(0.8) and ("c" .. int(1, 20)) or hostile(1)
          log[#log + 1] = "lock(" .. ser(key) .. ")"
          local elapsed = compat_kept(what, lock.lock, lock, key)
          if elapsed ~= nil then taken = taken + 1 end
          if elapsed ~= nil and not (type(elapsed) == "number" and elapsed >= 0) then
            violated(what() .. " returned " .. ser(elapsed))
          end
          if chance(0.5) then
            local t = hostile(1)
            if chance(0.5) then t = pick({ 1, 30 }) elseif chance(0.3) then t = nil end
            log[#log + 1] = "expire(" .. ser(t) .. ")"
            compat_kept(what, lock.expire, lock, t)
          end
          log[#log + 1] = "unlock()"
          local ok, err = compat_kept(what, lock.unlock, lock)
          if elapsed ~= nil and ok ~= 1 and err ~= "not_owner" then
            violated(what() .. " held the key but unlock returned " .. ser(ok) .. ", " .. ser(err))
          end
          if elapsed == nil and ok ~= nil then violated(what() .. " unlocked what it never held") end
        end
      end
      local left = {}
      for _, e in ipairs(keyspace()) do
        if e.key:sub(1, #PREFIX + 7) == PREFIX .. "compat:" then left[#left + 1] = ser(e.key) end
      end
      assert.is_true(#left == 0, #left .. " keys left: " .. table.concat(left, ", ", 1, math.min(#left, 20)))
      -- Valid inputs are common enough that real locks were taken and freed.
      assert.is_true(taken >= N_COMPAT / 10, "only " .. taken .. " locks taken")
      io.stdout:write("fuzz: compat ", taken, " locks taken of ", N_COMPAT, "\n")
    end)
  end)

  describe("every declared option (names and bad values drawn from the schemas)", function()
    local options = require "resty.dlock.core.options"
    local gwoptions = require "resty.dlock.gateway.options"
    local modes = require "resty.dlock.core.schema.modes"

    --- Values the declaration of spec refuses: out of its range, of another type, too long.
    local function bad_values(spec)
      if spec.kind == "integer" then
        return { spec.min - 1, spec.max + 1, spec.min + 0.5, 0 / 0, math.huge, -math.huge, tostring(spec.min), true, {} }
      elseif spec.kind == "boolean" then
        return { 0, 1, "true", "no", {}, MISC[1] }
      elseif spec.kind == "enum" then
        return { "", spec.values[1]:upper() .. "x", spec.values[1] .. " ", 1, false, {} }
      elseif spec.kind == "function" then
        return { "function", 1, true, {} }
      elseif spec.kind == "string" then
        local t = { 1, false, {}, MISC[1] }
        if spec.maxLen then t[#t + 1] = string.rep("x", spec.maxLen + 1) end
        if spec.maxLen and not spec.empty then t[#t + 1] = "" end
        return t
      end
      return {} -- a check of its own (dict, redis, key...): the generators above fuzz those
    end
    --- Values at the edges of the declaration that it takes.
    local function edge_values(spec)
      if spec.kind == "integer" then return { spec.min, spec.max } end
      if spec.kind == "enum" then return spec.values end
      if spec.kind == "boolean" then return { true, false } end
      return {}
    end

    local function copy(t, k, v)
      local o = {}
      for a, b in pairs(t) do o[a] = b end
      o[k] = v
      return o
    end

    --- Every option of `specs` alone at each bad value: nil and an error that names it; at each edge
    --- value: accepted; misspelt: "unknown option in <path>". `make(opts)` makes one.
    local function declared(what, specs, base, path, make, edges)
      local n = 0
      for _, spec in ipairs(specs) do
        for _, v in ipairs(bad_values(spec)) do
          local opts = copy(base(), spec.name, v)
          local show = function() return what .. "(" .. ser(opts) .. ")" end
          local res, err = kept(show, make, opts)
          if res ~= nil then violated(show() .. " accepted a bad " .. spec.name) end
          if err:sub(1, 7 + #spec.name) ~= "dlock: " .. spec.name then
            violated(show() .. " did not name " .. spec.name .. ": " .. err)
          end
          n = n + 1
        end
        if edges then
          for _, v in ipairs(edge_values(spec)) do
            local opts = copy(base(), spec.name, v)
            local res, err = kept(function() return what .. "(" .. ser(opts) .. ")" end, make, opts)
            if res == nil then violated(what .. "(" .. ser(opts) .. ") refused an edge value of " .. spec.name .. ": " .. err) end
          end
        end
        local typo = spec.name .. "s"
        local opts = copy(base(), typo, 1)
        local _, err = kept(function() return what .. "(" .. ser(opts) .. ")" end, make, opts)
        if err ~= 'dlock: unknown option in ' .. path .. ', got "' .. typo .. '"' then
          violated(what .. "(" .. ser(opts) .. ") should name the unknown option " .. typo .. ", said: " .. ser(err))
        end
      end
      assert.is_true(n > 0, what .. ": no bad value drawn")
    end

    it("dlock.new and semaphore.new refuse each bad value, naming the option, and take each edge value", function()
      local redis = { port = target.redis_port }
      declared("dlock.new", options.NEW_LOCKS, function() return { dict = "dlock", redis = redis, prefix = PREFIX .. "decl:" } end,
        "dlock.new options", dlock.new, true)
      declared("semaphore.new", options.NEW_SEMAPHORE,
        function() return { dict = "dlock", redis = redis, prefix = PREFIX .. "decl:sem:", permits = 2 } end,
        "semaphore.new options", semaphore.new, true)
    end)

    it("acquire refuses each bad value of its options, naming the option", function()
      declared("locks:acquire", options.ACQUIRE, function() return { wait = 0 } end, "acquire options",
        function(opts) return locks:acquire("decl", opts) end, false)
    end)

    it("gateway.new refuses, in every mode, each bad value of the options that apply to it, naming the option", function()
      local seq = 0
      for _, m in ipairs(gwoptions.MODES) do
        local specs = {}
        for _, spec in ipairs(gwoptions.SPECS) do
          if spec.name ~= "mode" and modes.applies(spec, m.name) then specs[#specs + 1] = spec end
        end
        local function base()
          seq = seq + 1
          return { mode = m.name, name = "fz-decl-" .. seq, key = "$http_k", on_error = "allow", redis = { port = target.redis_port },
                   prefix = PREFIX .. "decl:gw:", permits = m.name == "concurrency" and 2 or nil,
                   scope = m.name == "idempotency" and "$http_authorization" or nil,
                   rate = m.name == "rate" and 10 or nil }
        end
        -- on_error = "local" (mode rate) needs fleet, which every other on_error refuses.
        local function new(opts)
          if opts.on_error == "local" and opts.fleet == nil then opts.fleet = 2 end
          return gateway.new(opts)
        end
        declared("gateway.new", specs, base, "gateway.new options", new, true)
      end
    end)
  end)

  describe("the Redis keyspace after all of the above", function()
    it("holds no key outside the prefix " .. PREFIX .. " in any database", function()
      local outside = {}
      for _, e in ipairs(keyspace()) do
        if e.key:sub(1, #PREFIX) ~= PREFIX then outside[#outside + 1] = "db" .. e.db .. " " .. ser(e.key) end
      end
      assert.is_true(#outside == 0, #outside .. " keys outside " .. PREFIX .. ": " .. table.concat(outside, ", ", 1, math.min(#outside, 20)))
    end)

    it("holds nothing under the prefixes of the objects whose leases were all released", function()
      local left = {}
      for _, e in ipairs(keyspace()) do
        for _, o in ipairs({ locks, wlocks, sem }) do
          if e.db == 0 and e.key:sub(1, #o.prefix) == o.prefix then left[#left + 1] = ser(e.key) end
        end
      end
      assert.is_true(#left == 0, #left .. " keys left: " .. table.concat(left, ", ", 1, math.min(#left, 20)))
      ngx.update_time()
      io.stdout:write(string.format("fuzz: seed %d, %d calls (%d results, %d errors) in %.1f s; accepted %s; " ..
        "%d leases and %d lost replies from fuzzed factories\n", SEED, stats.calls, stats.results, stats.errors,
        ngx.now() - started, table.concat(stats.accepted, ", "), stats.leases, stats.unknown))
    end)
  end)
end)

h.check_error_logs({
  -- Random endpoints: nobody listens there.
  "connect%(%) to unix:/nonexistent/fz%-redis%.sock failed %(2: No such file or directory%)",
  "connect%(%) failed %(111: Connection refused%), context: ngx%.timer",
  -- Random read_timeout values down to 1 ms: replies that come later time out.
  "lua tcp socket read timed out,[^\n]* context: ngx%.timer",
  -- The file's Redis, stopped at its end under a connection a timer reads (a wake-up subscriber, a batch's sender): nginx's line
  -- when the server's RST beats its FIN to that read (seen with lua-nginx-module 0.10.30, as in sentinel_spec).
  { "recv%(%) failed %(104: Connection reset by peer%),[^\n]* context: ngx%.timer", max = 2 },
})
