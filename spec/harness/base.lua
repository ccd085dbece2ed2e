-- The harness underneath every spec: the runner's environment, key
-- namespaces unique for the whole run, raw Redis commands and waiting
-- (processes and ports: process.lua).
local env = require "testenv"
-- OpenResty ships resty.redis, Debian nginx.redis: the same client library.
local found, redis = pcall(require, "resty.redis")
if not found then redis = require "nginx.redis" end

local _M = { env = env, root = env.root, prefix = env.prefix, redis_port = env.redis_port, redis = redis }

-- Busted loads this module afresh for each spec file: what must stay unique
-- for the whole run (key namespaces, nginx prefixes) is counted in a
-- shared dict of the runner's nginx, not in module locals.
local harness = ngx.shared.spec_harness

local function next_seq()
  return assert(harness:incr("seq", 1, 0))
end

_M.next_seq = next_seq

--- A key namespace of its own for each call, so specs never see each other's keys.
function _M.unique(name)
  return (name or "t") .. ":" .. ngx.worker.pid() .. ":" .. next_seq() .. ":"
end

function _M.redis_opts(extra)
  local o = { host = "127.0.0.1", port = env.redis_port, connect_timeout = 500, read_timeout = 1000 }
  for k, v in pairs(extra or {}) do o[k] = v end
  return o
end

local named_seq = 0
--- A lock factory (kind "lock") or a semaphore ("semaphore", 1 permit unless told) with a metrics
--- name of its own ("<tag>-<pid>-<n>"), on the test Redis: factory, name.
function _M.named(tag, kind, extra)
  named_seq = named_seq + 1
  local name = tag .. "-" .. ngx.worker.pid() .. "-" .. named_seq
  local o = { dict = "dlock", name = name, prefix = _M.unique(tag), redis = _M.redis_opts() }
  for k, v in pairs(extra or {}) do o[k] = v end
  if kind == "semaphore" then
    o.permits = o.permits or 1
    return assert(require("resty.dlock.semaphore").new(o)), name
  end
  return assert(require("resty.dlock").new(o)), name
end

--- dlock.new with the test Redis, the "dlock" dict and a fresh prefix.
function _M.locks(opts)
  local dlock = require "resty.dlock"
  local o = { dict = "dlock", redis = _M.redis_opts(), prefix = _M.unique("spec") }
  for k, v in pairs(opts or {}) do o[k] = v end
  return assert(dlock.new(o))
end

-- Per port, the password a server was started with (--requirepass): specs
-- administer it with that, as its operator would.
local passwords = {}
-- Per TLS port, the plaintext port of the same server: specs name a server by the
-- port the sentinels or its replicas name, and administer it in plaintext.
local plaintext = {}

_M.passwords = passwords
_M.plaintext = plaintext

-- A fresh connection to the server at port, signed in as its operator.
local function admin(port)
  port = plaintext[port] or port
  local red = redis:new()
  red:set_timeout(2000)
  local ok, err = red:connect("127.0.0.1", port or env.redis_port)
  if not ok then return nil, err end
  if passwords[port] then
    ok, err = red:auth(passwords[port])
    if not ok then red:close() return nil, err end
  end
  return red
end

_M.admin = admin

local function command(port, readonly, name, ...)
  local red, err = admin(port)
  if not red then return nil, err end
  if readonly then red:readonly() end
  local res, cerr = red[name](red, ...)
  red:close()
  return res, cerr
end

--- One raw Redis command on a fresh connection (not through dlock).
function _M.cmd(port, name, ...) return command(port, false, name, ...) end

--- The same on a replica of a Cluster, which answers reads only after READONLY
--- (a server outside a Cluster refuses READONLY, and needs none).
function _M.cmd_readonly(port, name, ...) return command(port, true, name, ...) end

--- `n` copies of v (what every holder of a key should say, for assert.same).
function _M.rep(v, n)
  local out = {}
  for i = 1, n do out[i] = v end
  return out
end

--- ngx.now() with a fresh clock.
function _M.now()
  ngx.update_time()
  return ngx.now()
end

--- Seconds fn(...) took, then what it returned.
function _M.took(fn, ...)
  ngx.update_time()
  local t0 = ngx.now()
  local res = { fn(...) }
  ngx.update_time()
  return ngx.now() - t0, unpack(res, 1, table.maxn(res))
end

--- Wait up to `s` seconds for fn() to be truthy; returns its last answer.
function _M.eventually(s, fn)
  local deadline = _M.now() + s
  while _M.now() < deadline do
    if fn() then return true end
    ngx.sleep(0.01)
  end
  return fn()
end

--- Call fn until Redis decides: a lease (or any first result), or "busy", "timeout" or "rejected". The first
--- calls after a failover may meet the demoted master (READONLY) or a connection the old one left. fn's first
--- three results, and when they came (h.now()).
function _M.decided(seconds, fn)
  local deadline = _M.now() + seconds
  local a, err, c
  repeat
    a, err, c = fn()
    if a or err == "busy" or err == "timeout" or err == "rejected" then return a, err, c, _M.now() end
    ngx.sleep(0.05)
  until _M.now() > deadline
  return a, err, c, _M.now()
end

--- Load: fn(i) called again and again in n light threads until `seconds` have passed
--- (each call started before then), and at(t) once in a thread of its own `t` seconds in.
--- Returns the number of calls that started after at() returned.
function _M.under_load(seconds, n, fn, t, at)
  local t0 = _M.now()
  local done_at
  local after = 0
  local threads = {}
  for i = 1, n do
    threads[i] = ngx.thread.spawn(function()
      while _M.now() < t0 + seconds do
        local late = done_at ~= nil
        fn(i)
        if late then after = after + 1 end
      end
      return true
    end)
  end
  if at then
    threads[#threads + 1] = ngx.thread.spawn(function()
      ngx.sleep(t)
      at()
      done_at = _M.now()
      return true
    end)
  end
  for _, th in ipairs(threads) do
    local ok, err = ngx.thread.wait(th)
    assert(ok, err)
  end
  return after
end

--- Run fn(...) in a light thread now; returns a function that waits for it and
--- returns its results (raising its error, if it raised one).
function _M.spawn(fn, ...)
  local t = ngx.thread.spawn(fn, ...)
  return function()
    local res = (function(...) return { n = select("#", ...), ... } end)(ngx.thread.wait(t))
    assert(res[1], res[2])
    return unpack(res, 2, res.n)
  end
end

--- Run fn(i) in n light threads at once; returns the list of first results.
function _M.parallel(n, fn)
  local threads = {}
  for i = 1, n do threads[i] = ngx.thread.spawn(fn, i) end
  local out = {}
  for i = 1, n do
    local ok, res = ngx.thread.wait(threads[i])
    assert(ok, res)
    out[i] = res
  end
  return out
end

--- A lock taken with these redis options: its token in the key on each of `ports`
--- (read in plaintext; or a function of the Redis key giving them), a second holder
--- refused, nothing left after the release, and the key taken again. `name`: the prefix's stem.
function _M.lock_everywhere(opts, ports, name)
  local dlock = require "resty.dlock"
  local prefix = _M.unique(name or "everywhere")
  if type(ports) == "function" then ports = ports(prefix .. "k") end
  local a, err = dlock.new({ dict = "dlock", prefix = prefix, redis = opts })
  assert(a, err)
  local b = assert(dlock.new({ dict = "dlock", prefix = prefix, redis = opts }))
  local lease, aerr = a:acquire("k", { ttl = 5000 })
  assert(lease, aerr)
  for _, port in ipairs(ports) do assert(lease.token == _M.cmd(port, "get", prefix .. "k"), "the token is not at " .. port) end
  local none, berr = b:acquire("k", { wait = 0 })
  assert(none == nil and berr == "busy", "a second holder was not refused: " .. tostring(berr))
  assert(lease:release() == true, "the release failed")
  for _, port in ipairs(ports) do assert(_M.cmd(port, "exists", prefix .. "k") == 0, "the key is left at " .. port) end
  local again = assert(b:acquire("k", { ttl = 5000 }))
  assert(again:release() == true, "the second release failed")
end

--- Does this machine have the IPv6 loopback address ::1 (a container may run without IPv6)?
function _M.has_ipv6()
  local f = io.open("/proc/net/if_inet6")
  if not f then return false end
  local all = f:read("*a")
  f:close()
  return all:find("00000000000000000000000000000001 ", 1, true) ~= nil
end

--- The strings of the set `wanted` that anything reachable from root holds (its
--- fields, keys and metatables, and theirs): what a caller of the library could read.
function _M.reachable(root, wanted)
  local seen, held = {}, {}
  local function walk(v)
    if type(v) == "string" then
      if wanted[v] then held[#held + 1] = v end
    elseif type(v) == "table" and not seen[v] then
      seen[v] = true
      for k, x in pairs(v) do walk(k) walk(x) end
      walk(getmetatable(v))
    end
  end
  walk(root)
  return held
end

--- The Redis key of a gateway guard `name` (default prefix) for the request key `raw`: guards hash raw keys.
function _M.guard_key(name, raw)
  return require("resty.dlock.gateway.digest").key("dlock:gw:" .. name .. ":", raw)
end

--- How many requests answered at `times` (s, any order) a GCRA of `rate` per
--- second and `burst` would admit: what a limiter can be asked to admit at
--- least, whatever stalls the machine put between the requests.
function _M.gcra_admits(times, rate, burst)
  table.sort(times)
  local iv, tat, n = 1 / rate, -math.huge, 0
  for _, t in ipairs(times) do
    local nxt = math.max(tat, t) + iv
    if nxt - t <= burst * iv + 1e-9 then
      tat = nxt
      n = n + 1
    end
  end
  return n
end

--- A rate limiter on the redis options `on`, with a key prefix of its own, opts over { dict = "dlock" }; raises what rate.new refuses.
function _M.rate_limiter(on, opts)
  local o = { dict = "dlock", redis = on, prefix = _M.unique("rate") }
  for k, v in pairs(opts or {}) do o[k] = v end
  return assert(require("resty.dlock.rate").new(o))
end

--- What a rate exactness test measured, for the record (<prefix>/rate-exactness.txt; DLOCK_KEEP=1 keeps it).
function _M.rate_note(what, admitted, refused, elapsed, bound)
  local f = assert(io.open(_M.prefix .. "/rate-exactness.txt", "a"))
  f:write(string.format("%s: %d admitted, %s refused in %.3f s; bound %.1f\n", what, admitted, tostring(refused), elapsed, bound))
  f:close()
end

--- A rate limit's state under key, as { ["1"] = TAT, ... } (us, strings; empty
--- when there is none): the general script's hash, or a lone limit's plain key,
--- which expires at its TAT rounded up to the ms and holds the us before that.
function _M.rate_state(port, key, asking)
  local cmd = asking and _M.cmd_asking or _M.cmd
  local kind = assert(cmd(port, "type", key))
  local out = {}
  if kind == "hash" then
    local flat = assert(cmd(port, "hgetall", key))
    for i = 1, #flat, 2 do out[flat[i]] = flat[i + 1] end
  elseif kind == "string" then
    local at = assert(cmd(port, "pexpiretime", key))
    local before = assert(cmd(port, "get", key))
    assert(at > 0 and tonumber(before), key .. ": expiry " .. tostring(at) .. ", value " .. before)
    local tat = at * 1000 - tonumber(before)
    out["1"] = string.format(tat % 1 == 0 and "%d" or "%.17g", tat)
  else
    assert(kind == "none", key .. " is a " .. kind)
  end
  return out
end

--- Connect to 127.0.0.1:port, send ASKING, then one command on the same
--- connection: how to read a key on the importing node of a slot mid-migration.
function _M.cmd_asking(port, name, ...)
  local red = redis:new()
  red:set_timeout(2000)
  local ok, err = red:connect("127.0.0.1", port)
  if not ok then return nil, err end
  local _, aerr = red:asking()
  if aerr then red:close() return nil, aerr end
  local res, cerr = red[name](red, ...)
  red:close()
  return res, cerr
end

--- A script as the library builds them (the pipeline and the transport take any).
function _M.script(name, src)
  return { name = name, src = src, sha = require("resty.dlock.core.token").hex(ngx.sha1_bin(src)), keys = 1 }
end

--- Busy for ARGV[1] ms of Redis' time, then answers ARGV[2] (ARGV[3]: padding, ignored):
--- a call that keeps its batch, and Redis, occupied.
_M.SLOW = _M.script("slow", [[
local t = redis.call('TIME')
local stop = t[1] * 1000000 + t[2] + tonumber(ARGV[1]) * 1000
repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] >= stop
return ARGV[2]
]])

--- Elapsed seconds of fn(), and what it returned (three values at most).
function _M.elapsed(fn)
  ngx.update_time()
  local t0 = ngx.now()
  local a, b, c = fn()
  ngx.update_time()
  return ngx.now() - t0, a, b, c
end

return _M
