-- Fuzzing the constructors with hostile input from a fixed-seed PRNG
-- (spec/fuzz/suite.lua says what is promised): dlock.new, semaphore.new and
-- gateway.new with random option tables, and the redis.cluster and
-- redis.redlock tables against an oracle written apart from their schema.
local h = require "helpers"
local dlock = require "resty.dlock"
local semaphore = require "resty.dlock.semaphore"
local gateway = require "resty.dlock.gateway"
local status = require "resty.dlock.status"

local inputs = require "fuzz.values"
local optgen = require "fuzz.options"
local contract = require "fuzz.contract"
local suite = require "fuzz.suite"

local SEED = inputs.SEED
local MAX_TTL = dlock.MAX_TTL
local PREFIX = suite.PREFIX

local N_NEW, N_SEM_NEW, N_GW_NEW = 1000, 1000, 1000
local N_TOPO = 1000

local reseed, int, chance, pick = inputs.reseed, inputs.int, inputs.chance, inputs.pick
local named, ser = inputs.named, inputs.ser
local TYPOS, hostile = inputs.TYPOS, inputs.hostile
local SAFE, valid_ttl, valid_wait = optgen.SAFE, optgen.valid_ttl, optgen.valid_wait
local safe_redis, any_redis, gen_opts = optgen.safe_redis, optgen.any_redis, optgen.gen_opts
local stats, violated, is_int_in, kept = contract.stats, contract.violated, contract.is_int_in, contract.kept
local target = optgen.target

describe("the public API under fuzzing (seed " .. SEED .. "): the constructors", function()
  local o = suite.objects()

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
      local status_code = function() return int(300, 599) end
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
      -- Each guard makes its counters and breaker in its dict: hundreds of them would leave the
      -- runner's 1m dicts, which the later specs keep their leases in, full.
      for _, d in ipairs({ ngx.shared.dlock, ngx.shared.dlock_other }) do
        for _, k in ipairs(d:get_keys(0)) do
          if k:find("fz-gw-", 1, true) then d:delete(k) end
        end
      end
    end)
  end)

  suite.keyspace_checks(o, "the constructors")
end)

h.check_error_logs(suite.EXPECTED_ERRORS)
