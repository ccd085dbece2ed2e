-- The Lua side of make bench: the baselines (the seeds' SET NX PX + EVAL lock,
-- a plain polling lock) and the measurements taken inside nginx.
-- Not part of the library.
local ffi = require "ffi"
local dlock = require "resty.dlock"
local found, redis = pcall(require, "resty.redis")
if not found then redis = require "nginx.redis" end

pcall(ffi.cdef, "typedef struct { long tv_sec; long tv_nsec; } dlock_bench_ts; int clock_gettime(int clk, dlock_bench_ts *ts);")
local ts = ffi.new("dlock_bench_ts")
local function now_us()
  ffi.C.clock_gettime(1, ts)  -- CLOCK_MONOTONIC: comparable across workers
  return tonumber(ts.tv_sec) * 1e6 + tonumber(ts.tv_nsec) / 1e3
end

local _M = {}

local locks_obj
-- The same factory with auto_pipeline = false: every call on a connection of
-- its own, as before auto-pipelining (the line to compare it with).
local plain_obj
function _M.locks_plain()
  if not plain_obj then
    plain_obj = assert(dlock.new({ dict = "dlock", prefix = "bench:", redis = { host = "127.0.0.1", port = _M.port(),
      auto_pipeline = false } }))
  end
  return plain_obj
end

function _M.locks()
  if not locks_obj then
    locks_obj = assert(dlock.new({ dict = "dlock", prefix = "bench:", redis = { host = "127.0.0.1", port = _M.port() } }))
  end
  return locks_obj
end

-- resty.dlock on another Redis topology ("tls", "sentinel", "cluster", "cluster_bare", "redlock"), the
-- addresses set by bench.conf's init_by_lua; the same options as locks() otherwise.
local topo_locks = {}
function _M.locks_on(kind)
  if topo_locks[kind] then return topo_locks[kind] end
  local d = ngx.shared.bench
  local function nodes(name)
    local list = {}
    for addr in (d:get(name) or ""):gmatch("[^,]+") do list[#list + 1] = addr end
    return list
  end
  local opts
  if kind == "tls" then
    opts = { host = "127.0.0.1", port = d:get("tls_port"), ssl = true, ssl_verify = true, server_name = "localhost" }
  elseif kind == "sentinel" then
    opts = { sentinel = { master = "locks", nodes = nodes("sentinel_nodes") } }
  elseif kind == "cluster" or kind == "cluster_bare" then
    opts = { cluster = { nodes = nodes(kind .. "_nodes") } }
  elseif kind == "redlock" then
    opts = { redlock = nodes("redlock_nodes") }
  else
    return nil, "no such topology: " .. tostring(kind)
  end
  local locks, err = dlock.new({ dict = "dlock", prefix = "bench:", redis = opts })
  if not locks then return nil, err end
  topo_locks[kind] = locks
  return locks
end

-- /core's handler on topology `kind`: acquire + release around the response.
-- /core itself keeps its handler inline in bench.conf: bench-before.conf runs
-- the same text on an old revision, whose lines.lua has no core_on.
function _M.core_on(kind)
  local locks, err = _M.locks_on(kind)
  if not locks then ngx.status = 500 ngx.say(err) return end
  local lease
  lease, err = locks:acquire(ngx.var.request_id, { ttl = 10000 })
  if not lease then ngx.status = 500 ngx.say(err) return end
  ngx.say("ok")
  lease:release()
end

function _M.port()
  return ngx.shared.bench:get("redis_port")
end

local function connect()
  local red = redis:new()
  red:set_timeout(1000)
  local ok, err = red:connect("127.0.0.1", _M.port())
  if not ok then return nil, err end
  return red
end

local UNLOCK = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end"

-- Seed 001 fixed: SET answers "OK" or ngx.null (never 1); the token is random per
-- request (not the worker pid); release is the compare-and-delete EVAL from the seeds.
function _M.seed()
  local red, err = connect()
  if not red then ngx.status = 500 ngx.say(err) return end
  local key, token = "seed:" .. ngx.var.request_id, ngx.var.request_id
  local ok = red:set(key, token, "NX", "PX", 10000)
  if ok ~= "OK" then ngx.status = 409 ngx.say("busy") red:set_keepalive(60000, 64) return end
  ngx.say("ok")
  red:eval(UNLOCK, 1, key, token)
  red:set_keepalive(60000, 64)
end

-- Section 2, contention (nginx/bench-contend.conf: two instances, two workers
-- each, one key): /contend/dlock and /contend/poll?h=HOLD_MS&wait=WAIT_MS&ttl=MS acquire
-- the one key, hold it h ms, release, and answer "ok", "timeout" (waited the
-- whole wait in vain) or "err ...". Each critical section is kept in the
-- instance's shared dict as "enter_us leave_us pid" (CLOCK_MONOTONIC, the same
-- clock in every process of the machine; leave = before the release call), for
-- bench/perf/contention.js to merge the two instances' sections into hand-offs (GET /sections).
local function section(enter, leave)
  ngx.shared.bench:rpush("sections", string.format("%.0f %.0f %d", enter, leave, ngx.worker.pid()))
end

local function hold_wait_ttl()
  return (tonumber(ngx.var.arg_h) or 20) / 1000, tonumber(ngx.var.arg_wait) or 3000, tonumber(ngx.var.arg_ttl) or 1000
end

-- resty.dlock as a handler uses it: acquire with a wait, hold, release.
function _M.contend_dlock()
  local hold, wait, ttl = hold_wait_ttl()
  local lease, err = _M.locks():acquire("hot", { ttl = ttl, wait = wait })
  if not lease then ngx.say(err == "timeout" and "timeout" or "err " .. tostring(err)) return end
  local enter = now_us()
  ngx.sleep(hold)
  local leave = now_us()
  local ok, rerr = lease:release()
  section(enter, leave)
  ngx.say(ok and "ok" or "err release " .. tostring(rerr))
end

-- The read-mostly lines: ?mode=r|w&shared=1|0. A reader (mode=r) takes the
-- key "rwhot" with shared = true when shared=1, exclusively otherwise (the line
-- to compare with); a writer always exclusively. Answers "ok r" / "ok w".
function _M.contend_rw()
  local hold, wait, ttl = hold_wait_ttl()
  local mode = ngx.var.arg_mode == "w" and "w" or "r"
  local lease, err = _M.locks():acquire("rwhot", { ttl = ttl, wait = wait,
    shared = mode == "r" and ngx.var.arg_shared == "1" })
  if not lease then ngx.say(err == "timeout" and "timeout" or "err " .. tostring(err)) return end
  ngx.sleep(hold)
  local ok, rerr = lease:release()
  ngx.say(ok and "ok " .. mode or "err release " .. tostring(rerr))
end

-- The baseline: a plain polling lock as one writes it without resty.dlock (the
-- same schedule as /crit-poll of nginx/torture.conf): SET K token NX PX ttl, and
-- while busy sleep with jittered exponential backoff 2 -> 64 ms until `wait`
-- runs out; release with a compare-and-delete EVAL.
function _M.contend_poll()
  local hold, wait, ttl = hold_wait_ttl()
  local red, err = connect()
  if not red then ngx.say("err ", err) return end
  local key, token = "poll:hot", ngx.var.request_id
  ngx.update_time()
  local deadline = ngx.now() * 1000 + wait
  local backoff = 2
  while true do
    local res
    res, err = red:set(key, token, "NX", "PX", ttl)
    if res == "OK" then break end
    if not res then ngx.say("err ", err) return end   -- ngx.null: busy
    ngx.update_time()
    local left = deadline - ngx.now() * 1000
    if left <= 0 then
      red:set_keepalive(60000, 64)
      ngx.say("timeout")
      return
    end
    ngx.sleep(math.min(left, backoff / 2 + math.random() * backoff / 2) / 1000)
    backoff = math.min(backoff * 2, 64)
  end
  local enter = now_us()
  ngx.sleep(hold)
  local leave = now_us()
  local n, rerr = red:eval(UNLOCK, 1, key, token)
  section(enter, leave)
  if n ~= 1 then ngx.say("err release ", tostring(n == 0 and "not_owner" or rerr)) return end
  red:set_keepalive(60000, 64)
  ngx.say("ok")
end

-- Several keys per request (section 1c), distinct per request as in section 1:
-- acquire_all of n keys, or the same n keys acquired one by one (in a fixed
-- order: how a caller avoids deadlock without acquire_all) and released one by one.
function _M.multi()
  local n, id = tonumber(ngx.var.arg_n), ngx.var.request_id
  local keys = {}
  for i = 1, n do keys[i] = id .. ":" .. i end
  local lease, err = _M.locks():acquire_all(keys, { ttl = 10000 })
  if not lease then ngx.status = 500 ngx.say(err) return end
  ngx.say("ok")
  lease:release()
end

function _M.each()
  local n, id, locks = tonumber(ngx.var.arg_n), ngx.var.request_id, _M.locks()
  local leases = {}
  for i = 1, n do
    local lease, err = locks:acquire(id .. ":" .. i, { ttl = 10000 })
    if not lease then
      for j = 1, i - 1 do leases[j]:release() end
      ngx.status = 500 ngx.say(err) return
    end
    leases[i] = lease
  end
  ngx.say("ok")
  for i = n, 1, -1 do leases[i]:release() end
end

-- The critical sections of this instance so far, one a line, then forgotten.
function _M.sections()
  local d = ngx.shared.bench
  local out = {}
  while true do
    local v = d:lpop("sections")
    if not v then break end
    out[#out + 1] = v
  end
  ngx.print(table.concat(out, "\n"))
end

-- This worker's Lua heap in KB after a full collection.
function _M.mem()
  collectgarbage("collect")
  ngx.say(string.format("%.0f", collectgarbage("count")))
end

-- Shared-dict bytes per held lease: hold n leases, compare free space.
function _M.dictmem()
  local n = tonumber(ngx.var.arg_n) or 10000
  local dict = ngx.shared.dlock
  local locks = _M.locks()
  dict:flush_all(); dict:flush_expired()
  local before = dict:free_space()
  local leases = {}
  for i = 1, n do
    local lease, err = locks:acquire("mem:" .. i .. ":" .. ngx.var.request_id, { ttl = 60000 })
    if not lease then ngx.status = 500 ngx.say(err) return end
    leases[i] = lease
  end
  local after = dict:free_space()
  for i = 1, n do leases[i]:release() end
  ngx.say(string.format("%.1f", (before - after) / n))
end

return _M
