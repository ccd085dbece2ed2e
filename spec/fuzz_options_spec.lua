-- Fuzzing every declared option (spec/fuzz/suite.lua says what is
-- promised): each option of each schema (dlock.new, semaphore.new, acquire,
-- every gateway mode) alone at values its declaration refuses, at its edges,
-- and misspelt.
local h = require "helpers"
local dlock = require "resty.dlock"
local semaphore = require "resty.dlock.semaphore"
local gateway = require "resty.dlock.gateway"

local inputs = require "fuzz.values"
local optgen = require "fuzz.options"
local contract = require "fuzz.contract"
local suite = require "fuzz.suite"

local SEED = inputs.SEED
local PREFIX = suite.PREFIX

local ser = inputs.ser
local MISC = inputs.MISC
local violated, kept = contract.violated, contract.kept
local target = optgen.target

describe("the public API under fuzzing (seed " .. SEED .. "): declared options", function()
  local o = suite.objects()

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
      local out = {}
      for a, b in pairs(t) do out[a] = b end
      out[k] = v
      return out
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
        function(opts) return o.locks:acquire("decl", opts) end, false)
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

  suite.keyspace_checks(o, "declared options")
end)

h.check_error_logs(suite.EXPECTED_ERRORS)
