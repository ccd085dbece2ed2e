-- The README's option tables say what the schemas say (src/resty/dlock/core/options.ts,
-- src/resty/dlock/core/rate.ts, src/resty/dlock/gateway/options.ts): every option of a table is in its README table
-- with the schema's default, and a README table names no option its schema lacks.
-- Each README table follows a marker line `<!-- options: <table> -->`.
local h = require "helpers"
local options = require "resty.dlock.core.options"
local gateway = require "resty.dlock.gateway.options"
local rate = require "resty.dlock.core.rate"
local modes = require "resty.dlock.core.schema.modes"
local compat = require "resty.dlock.compat"
local client = require "resty.dlock.redis.client"
local sentinel = require "resty.dlock.redis.sentinel"

local readme = assert(h.read_file(h.root .. "/README.md"), "cannot read README.md")

--- The rows of the README table after `<!-- options: <name> ...-->`: { names = { ... }, meaning, default, line }.
local function rows_of(name)
  local lines, at = {}, nil
  for line in (readme .. "\n"):gmatch("([^\n]*)\n") do lines[#lines + 1] = line end
  for i, line in ipairs(lines) do
    if line:match("^<!%-%- options: (.-) %-%->$") == name or line:match("^<!%-%- options: (.-) %(") == name then
      at = i
      break
    end
  end
  assert(at, "README.md has no table marked <!-- options: " .. name .. " -->")
  local rows = {}
  -- The header and the |---| line, then the rows up to the first line that is not one.
  for i = at + 3, #lines do
    local cells = {}
    local line = lines[i]
    if line:sub(1, 1) ~= "|" then break end
    for cell in line:gmatch("|([^|]*)") do cells[#cells + 1] = cell:match("^%s*(.-)%s*$") end
    local names = {}
    for n in cells[1]:gmatch("`([%w_]+)`") do names[#names + 1] = n end
    rows[#rows + 1] = { names = names, meaning = cells[2], default = cells[3], line = i }
  end
  assert.is_true(#rows > 0, "the table " .. name .. " has no rows")
  return rows
end

--- The row naming `option`, or nil.
local function row_of(rows, option)
  for _, r in ipairs(rows) do
    for _, n in ipairs(r.names) do
      if n == option then return r end
    end
  end
end

--- The default as the README must show it.
local function shown(spec)
  if spec.doc then return spec.doc end
  if spec.required then return "required" end
  local d = spec.default
  if d == nil then return "none" end
  if type(d) == "string" then return '"' .. d .. '"' end
  if type(d) == "table" then
    local q = {}
    for i, v in ipairs(d) do q[i] = '"' .. v .. '"' end
    return "{ " .. table.concat(q, ", ") .. " }"
  end
  return tostring(d)
end

--- Whether the default cell shows `text`: a number or a word as a whole word, anything else as it is.
local function shows(cell, text)
  if text:match("^[%w]+$") then return cell:find("%f[%w]" .. text .. "%f[%W]") ~= nil end
  return cell:find(text, 1, true) ~= nil
end

--- The specs of `list` that apply to any of the modes `names` (all of them when names is nil).
local function applying(list, names)
  local out = {}
  for _, spec in ipairs(list) do
    local yes = names == nil
    for _, m in ipairs(names or {}) do
      if modes.applies(spec, m) then yes = true end
    end
    if yes then out[#out + 1] = spec end
  end
  return out
end

--- Every spec is in `rows`, with its default; every name of `rows` is a spec. `skip`: names not in the table.
local function agree(table_name, rows, specs, skip, elsewhere)
  local known = {}
  for _, spec in ipairs(specs) do
    known[spec.name] = true
    if not (skip and skip[spec.name]) then
      local r = row_of(rows, spec.name)
      assert.is_truthy(r, "README table " .. table_name .. " lacks option " .. spec.name)
      if r.default == "" and elsewhere and r.meaning:find("as for the other modes", 1, true) then
        -- Shown once, in the table of the other modes: the same default there.
        local there = row_of(elsewhere.rows, spec.name)
        assert.is_truthy(there, spec.name .. " is \"as for the other modes\" but not in their table")
        assert.is_true(shows(there.default, shown(spec)), string.format(
          "README line %d: the default of %s is %s in the schema of %s, not in %q", there.line, spec.name, shown(spec),
          table_name, there.default))
      else
        assert.is_true(shows(r.default, shown(spec)), string.format(
          "README line %d (%s): the default of %s is %s in the schema, not in %q", r.line, table_name, spec.name,
          shown(spec), r.default))
      end
    end
  end
  for _, r in ipairs(rows) do
    for _, n in ipairs(r.names) do
      assert.is_true(known[n] == true, string.format("README line %d (%s) names %s, which the schema lacks", r.line, table_name, n))
    end
  end
end

describe("the README's option tables", function()
  it("list every option of dlock.new with its default, and no other", function()
    agree("dlock.new", rows_of("dlock.new"), options.NEW_LOCKS)
  end)

  it("list every option of semaphore.new with its default, and no other", function()
    agree("semaphore.new", rows_of("semaphore.new"), options.NEW_SEMAPHORE)
  end)

  it("list every option of redis, redis.sentinel and redis.cluster with its default, and no other", function()
    agree("redis", rows_of("redis"), client.REDIS)
    agree("redis.sentinel", rows_of("redis.sentinel"), sentinel.SENTINEL)
    agree("redis.cluster", rows_of("redis.cluster"), client.CLUSTER)
  end)

  it("list every option of the lua-resty-lock facade's new and configure with its default, and no other", function()
    agree("compat.new", rows_of("compat.new"), compat.NEW)
    agree("compat.configure", rows_of("compat.configure"), compat.CONFIGURE)
  end)

  it("list every option of rate.new with its default, and no other", function()
    agree("rate.new", rows_of("rate.new"), rate.NEW_RATE)
  end)

  it("list every option of acquire with its default, and no other", function()
    agree("acquire", rows_of("acquire"), options.ACQUIRE)
  end)

  it("list every option of acquire_all with its default, and no other", function()
    agree("acquire_all", rows_of("acquire_all"), options.ACQUIRE_ALL)
  end)

  local locking, apart = {}, {}
  for _, m in ipairs(gateway.MODES) do
    if m.apart then apart[#apart + 1] = m.name else locking[#locking + 1] = m.name end
  end

  it("list every option of the gateway's locking modes with its default, and no other", function()
    agree("gateway.new", rows_of("gateway.new"), applying(gateway.SPECS, locking))
  end)

  it("list every option of each mode of its own (idempotency, rate) with its default, and no other", function()
    assert.same({ "idempotency", "rate" }, apart)
    for _, m in ipairs(apart) do
      agree("gateway.new mode " .. m, rows_of("gateway.new mode " .. m), applying(gateway.SPECS, { m }),
        { mode = true }, { rows = rows_of("gateway.new") })
    end
  end)

  it("are checked against tables that would fail on a missing option or a wrong default", function()
    -- The checks above can fail: an option the README lacks, and a default it does not show.
    local rows = rows_of("acquire")
    assert.has_error(function() agree("acquire", rows, { { name = "ttl_ms", kind = "boolean", default = false } }) end)
    assert.has_error(function() agree("acquire", rows, { { name = "renew", kind = "boolean", default = true } }) end)
    assert.has_error(function()
      agree("acquire", rows, { options.ACQUIRE[1], options.ACQUIRE[2], options.ACQUIRE[3] })
    end)
  end)
end)

h.check_error_logs()
