-- Fuzzing what reports and adapts with hostile input from a fixed-seed PRNG
-- (spec/fuzz/suite.lua says what is promised): held() and status.report,
-- values whose __tostring misbehaves, and the lua-resty-lock facade.
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
local suite = require "fuzz.suite"

local SEED = inputs.SEED
local MAX_ERR_LEN = contract.MAX_ERR_LEN
local PREFIX = suite.PREFIX

local N_STATUS = 500
local N_COMPAT = 500

local reseed, int, chance, pick = inputs.reseed, inputs.int, inputs.chance, inputs.pick
local NAMES, pack, ser = inputs.NAMES, inputs.pack, inputs.ser
local hostile = inputs.hostile
local gen_opts = optgen.gen_opts
local violated, call, kept = contract.violated, contract.call, contract.kept
local keyspace = contract.keyspace
local target = optgen.target

describe("the public API under fuzzing (seed " .. SEED .. "): reports, tostring, facade", function()
  local o = suite.objects()

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
              -- A list: 1..n and nothing else (names under other keys would go unread).
              local n = 0
              for _ in pairs(d) do n = n + 1 end
              for j = 1, n do if d[j] == nil then valid = false end end
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
          local obj = pick({ o.locks, o.wlocks, o.sem })
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
          function() return o.locks:with("bug:" .. i, nil, function() error(v[2]) end) end }
      end
      all_kept(cases)
      for i = 1, #values do -- what works: the key was released before the raise
        assert(o.locks:acquire("bug:" .. i, { wait = 0 })):release()
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
          { "locks:acquire(%s)", function() return o.locks:acquire(v) end },
          { 'locks:acquire("k", { ttl = %s })', function() return o.locks:acquire("k", { ttl = v }) end },
          { 'semaphore.new({ dict = "dlock", permits = %s })', function() return semaphore.new({ dict = "dlock", permits = v }) end },
          { "gateway.new({ mode = %s })", function() return gateway.new({ mode = v }) end },
          { "status.report({ dicts = { %s } })", function() return status.report({ dicts = { v } }) end },
          { "lease:extend(%s)", function()
            local lease = assert(o.locks:acquire("bug:extend"))
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

  suite.keyspace_checks(o, "reports, tostring, facade")
end)

h.check_error_logs(suite.EXPECTED_ERRORS)
