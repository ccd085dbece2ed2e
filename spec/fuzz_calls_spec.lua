-- Fuzzing the calls on factories and leases with hostile input from a
-- fixed-seed PRNG (spec/fuzz/suite.lua says what is promised): acquire and
-- acquire_all on free and held keys, extend, and with().
local h = require "helpers"
local dlock = require "resty.dlock"

local inputs = require "fuzz.values"
local optgen = require "fuzz.options"
local contract = require "fuzz.contract"
local suite = require "fuzz.suite"

local SEED = inputs.SEED
local MAX_TTL = dlock.MAX_TTL
local MAX_KEY = dlock.MAX_KEY_LEN

local N_ACQUIRE, N_SEM_ACQUIRE = 1500, 1500
local N_HELD_KEY = 200
local N_EXTEND = 500
local N_WITH = 1000
local N_ALL = 500

local reseed, int, chance, pick = inputs.reseed, inputs.int, inputs.chance, inputs.pick
local NAMES, pack, ser, args_of = inputs.NAMES, inputs.pack, inputs.ser, inputs.args_of
local hostile = inputs.hostile
local valid_ttl, valid_key, any_key = optgen.valid_ttl, optgen.valid_key, optgen.any_key
local gen_acquire_opts = optgen.gen_acquire_opts
local violated, is_int_in, call, check_err, kept = contract.violated, contract.is_int_in, contract.call,
  contract.check_err, contract.kept
local valid_acquire, effective_ttl, rcmd, release_now = contract.valid_acquire, contract.effective_ttl,
  contract.rcmd, contract.release_now

describe("the public API under fuzzing (seed " .. SEED .. "): acquire, leases, with", function()
  local o = suite.objects()

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
        local ttl = effective_ttl(obj, opts)
        if valid_acquire(key, opts, obj) and not lease and contract.spent(err, ttl) then
          granted = granted + 1
        elseif valid_acquire(key, opts, obj) then
          if not lease then violated(what() .. " refused a valid call on a free key: " .. ser(err)) end
          granted = granted + 1
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
          if not lease and not contract.spent(err, effective_ttl(obj, opts)) then
            violated(what() .. " refused a valid call on a free key: " .. ser(err))
          end
          if lease then release_now(what, lease, effective_ttl(obj, opts)) end
        elseif lease then
          lease:release()
          violated(what() .. " accepted an invalid call")
        end
      end
    end

    it("locks:acquire gives a lease for each valid key and options and a \"dlock: \" error for each " ..
       "invalid one, on " .. N_ACQUIRE .. " random calls", function()
      fuzz_acquire(o.locks, N_ACQUIRE * 2 / 3, 10)
      fuzz_acquire(o.wlocks, N_ACQUIRE / 3, 11)
    end)

    it("sem:acquire does the same on " .. N_SEM_ACQUIRE .. " random calls", function()
      fuzz_acquire(o.sem, N_SEM_ACQUIRE, 12)
    end)

    it("never hands out a held lock: " .. N_HELD_KEY .. " random calls answer busy, timeout or a \"dlock: \" error", function()
      local holder = assert(o.locks:acquire("held", { ttl = 60000 }))
      finally(function() holder:release() end)
      fuzz_held(o.locks, N_HELD_KEY, 13)
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
        local lease, err = kept(what, o.locks.acquire_all, o.locks, keys, opts)
        local valid = valid_keys(keys) and valid_acquire("k", opts, o.locks) and not (type(opts) == "table" and opts.shared == true)
        if valid then
          if not lease then violated(what() .. " refused a valid call on free keys: " .. ser(err)) end
          granted = granted + 1
          if #lease.keys ~= #keys or lease.key ~= keys[1] or lease.ttl ~= effective_ttl(o.locks, opts) then
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
      local a = assert(o.sem:acquire("held", { ttl = 60000 }))
      local b = assert(o.sem:acquire("held", { ttl = 60000 }))
      finally(function() a:release() b:release() end)
      fuzz_held(o.sem, N_HELD_KEY, 14)
    end)
  end)

  describe("leases", function()
    it("extend with random ttls on " .. N_EXTEND .. " real leases and permits returns true, \"not_owner\" or a " ..
       "\"dlock: \" error, and bad input leaves the lease as it was", function()
      reseed(20)
      for i = 1, N_EXTEND do
        local obj = pick({ o.locks, o.wlocks, o.sem })
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
        local obj = pick({ o.locks, o.wlocks, o.sem })
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
        elseif not rec.ran and contract.spent(r[3], effective_ttl(obj, opts)) then
          if r[2] ~= nil then violated(what() .. " returned a result without running fn: " .. ser(r[2])) end
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
          if rec.inside ~= nil and obj ~= o.sem and rec.inside ~= "busy" and ttl >= 1000 then
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

  suite.keyspace_checks(o, "acquire, leases, with")
end)

h.check_error_logs(suite.EXPECTED_ERRORS)
