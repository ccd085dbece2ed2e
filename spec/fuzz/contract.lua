-- The fuzz's contract (spec/fuzz_*_spec.lua): every call returns a result, or
-- nil and "busy", "timeout", "not_owner" or a bounded "dlock: ..." error; none
-- raises or takes longer than CALL_LIMIT_S. And what it reads of the fuzz Redis.
local h = require "helpers"
-- Busted's assert (the one its spec files see), so that a violation fails the test as theirs do.
local assert = require "luassert"
local dlock = require "resty.dlock"
local values = require "fuzz.values"
local options = require "fuzz.options"

local pack, ser = values.pack, values.ser
local target = options.target
local CALL_LIMIT_S = 2        -- no single call may take longer
local MAX_ERR_LEN = 2048      -- error strings are bounded, never an echo of a 100 KB input
local MAX_TTL = dlock.MAX_TTL
local MAX_KEY = dlock.MAX_KEY_LEN

local _M = { MAX_ERR_LEN = MAX_ERR_LEN }

local stats = { calls = 0, results = 0, errors = 0, accepted = {}, leases = 0, unknown = 0 }

local function violated(msg)
  assert.is_true(false, msg)
end

local function is_int_in(v, lo, hi)
  return type(v) == "number" and v == v and v == math.floor(v) and v >= lo and v <= hi
end

--- Call fn(...) through pcall; returns the packed pcall results.
--- Raising or taking longer than CALL_LIMIT_S is a violation.
local function call(what, fn, ...)
  ngx.update_time()
  local t0 = ngx.now()
  local r = pack(pcall(fn, ...))
  ngx.update_time()
  local dt = ngx.now() - t0
  stats.calls = stats.calls + 1
  if not r[1] then violated(what() .. " raised: " .. tostring(r[2])) end
  if dt > CALL_LIMIT_S then violated(string.format("%s took %.3f s (limit %d s)", what(), dt, CALL_LIMIT_S)) end
  return r, dt
end

--- The error half of the contract: err is "busy", "timeout", "not_owner" or "dlock: ...".
local function check_err(what, err)
  if type(err) ~= "string" then
    violated(what() .. " returned nil and a " .. type(err) .. " instead of an error string: " .. ser(err))
  end
  if not (err == "busy" or err == "timeout" or err == "not_owner" or err:sub(1, 7) == "dlock: ") then
    violated(what() .. ' returned an error that is not "busy", "timeout", "not_owner" nor "dlock: ...": ' .. ser(err))
  end
  if #err > MAX_ERR_LEN then
    violated(what() .. " returned an error of " .. #err .. " bytes: " .. ser(err))
  end
end

--- Call and check: a non-nil result, or nil and a well-formed error. Returns res, err, third.
local function kept(what, fn, ...)
  local r, dt = call(what, fn, ...)
  if r[2] ~= nil then
    stats.results = stats.results + 1
    return r[2], nil, r[4], dt
  end
  check_err(what, r[3])
  stats.errors = stats.errors + 1
  return nil, r[3], r[4], dt
end

--- obj: locks take `shared` (a boolean), semaphores do not.
local function valid_acquire(key, opts, obj)
  if type(key) ~= "string" or #key < 1 or #key > MAX_KEY then return false end
  if opts == nil then return true end -- also the FFI NULL pointer, which == nil
  if type(opts) ~= "table" then return false end
  for k in pairs(opts) do
    if k ~= "ttl" and k ~= "wait" and k ~= "shared" then return false end
  end
  if opts.shared ~= nil and (obj.permits ~= nil or type(opts.shared) ~= "boolean") then return false end
  if opts.ttl ~= nil and not is_int_in(opts.ttl, 1, MAX_TTL) then return false end
  if opts.wait ~= nil and not is_int_in(opts.wait, 0, MAX_TTL) then return false end
  return true
end

local function effective_ttl(obj, opts)
  if type(opts) == "table" and opts.ttl ~= nil then return opts.ttl end
  return obj.ttl
end

--- Shorter than a round trip may be (the clock counts whole ms): an acquire
--- whose answer comes after its ttl gives no lease (README, locks:acquire).
local SPENT_TTL = 10

--- Is err the refusal of a valid acquire of ttl ms whose answer came too late for a lease?
local function spent(err, ttl)
  return ttl <= SPENT_TTL and type(err) == "string" and err:find("took the key, but its answer came after", 1, true) ~= nil
end

--- One command to the fuzz Redis on a pooled connection (fresh connections
--- would leave thousands of sockets in TIME_WAIT).
local function rcmd(name, ...)
  local red = h.redis:new()
  red:set_timeout(2000)
  assert(red:connect("127.0.0.1", target.redis_port))
  local res, err = red[name](red, ...)
  red:set_keepalive(10000, 4)
  return res, err
end

--- Every Redis key in every database of the fuzz Redis, as { db, key }.
local function keyspace()
  local red = h.redis:new()
  red:set_timeout(2000)
  assert(red:connect("127.0.0.1", target.redis_port))
  local info = assert(red:info("keyspace"))
  local out = {}
  for db in info:gmatch("db(%d+):keys=") do
    assert(red:select(db))
    for _, k in ipairs(assert(red:keys("*"))) do out[#out + 1] = { db = tonumber(db), key = k } end
  end
  red:close()
  return out
end

--- Release a lease the fuzz got: true, or "not_owner" when its ttl was short enough to run out.
local function release_now(what, lease, live_ttl)
  local ok, err = kept(function() return what() .. " then lease:release()" end, lease.release, lease)
  if ok ~= true and not (err == "not_owner" and live_ttl <= 1000) then
    violated(what() .. " then lease:release() returned " .. ser(ok) .. ", " .. ser(err))
  end
end

_M.stats, _M.violated, _M.is_int_in, _M.call, _M.check_err, _M.kept = stats, violated, is_int_in, call, check_err, kept
_M.spent = spent
_M.valid_acquire, _M.effective_ttl, _M.rcmd, _M.keyspace, _M.release_now =
  valid_acquire, effective_ttl, rcmd, keyspace, release_now

return _M
