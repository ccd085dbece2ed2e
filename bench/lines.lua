-- The Lua side of make bench: the baselines (the seeds' SET NX PX + EVAL lock,
-- a lua-resty-lock style polling lock) and the measurements taken inside nginx.
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
function _M.locks()
  if not locks_obj then
    locks_obj = assert(dlock.new({ dict = "dlock", prefix = "bench:", redis = { host = "127.0.0.1", port = _M.port() } }))
  end
  return locks_obj
end

-- resty.dlock on another Redis topology ("tls", "sentinel", "cluster"), the
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
  elseif kind == "cluster" then
    opts = { cluster = { nodes = nodes("cluster_nodes") } }
  else
    return nil, "no such topology: " .. tostring(kind)
  end
  local locks, err = dlock.new({ dict = "dlock", prefix = "bench:", redis = opts })
  if not locks then return nil, err end
  topo_locks[kind] = locks
  return locks
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

local function record_acquire(d)
  local last = d:get("last_release")
  if last then d:lpush("gaps", now_us() - last) end
  d:incr("acquisitions", 1, 0)
end

-- wrk cuts its connections at the end of a run; waiters whose client is gone
-- stop waiting (unless they hold the key), so nothing spills into the next line.
local function stop_waiting_on_abort(state)
  ngx.on_abort(function() if not state.holding then ngx.exit(499) end end)
end

-- Contention with resty.dlock: wait for the hot key, hold it h ms, release.
function _M.contend_dlock()
  local d = ngx.shared.bench
  local hold = (tonumber(ngx.var.arg_h) or 5) / 1000
  local state = {}
  stop_waiting_on_abort(state)
  local lease, err = _M.locks():acquire("hot", { ttl = 1000, wait = 60000 })
  if not lease then ngx.status = 500 ngx.say(err) return end
  state.holding = true
  record_acquire(d)
  ngx.sleep(hold)
  d:set("last_release", now_us())
  lease:release()
  ngx.say("ok")
end

-- Contention with a polling lock on the same Redis, on lua-resty-lock's schedule:
-- first sleep 1 ms, doubling, capped at 500 ms.
function _M.contend_poll()
  local d = ngx.shared.bench
  local hold = (tonumber(ngx.var.arg_h) or 5) / 1000
  local red, err = connect()
  if not red then ngx.status = 500 ngx.say(err) return end
  local state = {}
  stop_waiting_on_abort(state)
  local token, step = ngx.var.request_id, 0.001
  while red:set("poll:hot", token, "NX", "PX", 1000) ~= "OK" do
    ngx.sleep(step)
    step = math.min(step * 2, 0.5)
  end
  state.holding = true
  record_acquire(d)
  ngx.sleep(hold)
  d:set("last_release", now_us())
  red:eval(UNLOCK, 1, "poll:hot", token)
  red:set_keepalive(60000, 64)
  ngx.say("ok")
end

-- Hand-off gaps (release -> next holder's acquire, µs) collected so far, then reset.
function _M.gaps()
  local d = ngx.shared.bench
  local out = { d:get("acquisitions") or 0 }
  while true do
    local v = d:rpop("gaps")
    if not v then break end
    out[#out + 1] = string.format("%.0f", v)
  end
  d:delete("acquisitions")
  d:delete("last_release")
  ngx.say(table.concat(out, " "))
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
