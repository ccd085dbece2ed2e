-- Shared by the specs: the test Redis, extra redis-servers and nginx instances,
-- a tiny HTTP client on cosockets. Every process started here is appended to
-- <prefix>/pids, so spec/runner/run stops it even when a spec fails midway.
local env = require "testenv"
-- OpenResty ships resty.redis, Debian nginx.redis: the same client library.
local found, redis = pcall(require, "resty.redis")
if not found then redis = require "nginx.redis" end

local _M = { env = env, root = env.root, prefix = env.prefix, redis_port = env.redis_port, redis = redis }

local seq = 0
--- A key namespace of its own for each call, so specs never see each other's keys.
function _M.unique(name)
  seq = seq + 1
  return (name or "t") .. ":" .. ngx.worker.pid() .. ":" .. seq .. ":"
end

function _M.redis_opts(extra)
  local o = { host = "127.0.0.1", port = env.redis_port, connect_timeout = 500, read_timeout = 1000 }
  for k, v in pairs(extra or {}) do o[k] = v end
  return o
end

--- dlock.new with the test Redis, the "dlock" dict and a fresh prefix.
function _M.locks(opts)
  local dlock = require "resty.dlock"
  local o = { dict = "dlock", redis = _M.redis_opts(), prefix = _M.unique("spec") }
  for k, v in pairs(opts or {}) do o[k] = v end
  return assert(dlock.new(o))
end

--- One raw Redis command on a fresh connection (not through dlock).
function _M.cmd(port, name, ...)
  local red = redis:new()
  red:set_timeout(2000)
  local ok, err = red:connect("127.0.0.1", port or env.redis_port)
  if not ok then return nil, err end
  local res, cerr = red[name](red, ...)
  red:close()
  return res, cerr
end

function _M.sh(cmd)
  local ok = os.execute(cmd)
  return ok == true or ok == 0
end

local function track(pid)
  local f = assert(io.open(env.prefix .. "/pids", "a"))
  f:write(pid, "\n")
  f:close()
end

local function read_file(path)
  local f = io.open(path, "r")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end
_M.read_file = read_file

--- Signal pid (resumed first, in case it is stopped) and wait up to 5 s for it to exit, then KILL.
function _M.stop_pid(pid, sig)
  _M.sh("kill -CONT " .. pid .. " 2>/dev/null; kill -" .. sig .. " " .. pid .. " 2>/dev/null")
  for _ = 1, 100 do
    if not _M.sh("kill -0 " .. pid .. " 2>/dev/null") then return true end
    ngx.sleep(0.05)
  end
  _M.sh("kill -KILL " .. pid)
  return true
end

local function free_port()
  local p = io.popen("bash -c '. " .. env.root .. "/nginx/lib.sh; free_port'")
  local port = tonumber(p:read("*l"))
  p:close()
  return port
end
_M.free_port = free_port

--- Start a daemonized sentinel watching `master` (name) at 127.0.0.1:master_port,
--- quorum 2, down after 1 s; returns { port, pid, stop() }.
function _M.start_sentinel(name, master_port)
  local port = free_port()
  local dir = env.prefix .. "/sentinel-" .. port
  os.execute("mkdir -p " .. dir)
  local f = assert(io.open(dir .. "/sentinel.conf", "w"))
  f:write(string.format("port %d\nbind 127.0.0.1\ndir %s\npidfile %s/sentinel.pid\nlogfile %s/sentinel.log\n" ..
    "daemonize yes\nsentinel monitor %s 127.0.0.1 %d 2\nsentinel down-after-milliseconds %s 1000\n" ..
    "sentinel failover-timeout %s 3000\n", port, dir, dir, dir, name, master_port, name, name))
  f:close()
  assert(_M.sh("redis-server " .. dir .. "/sentinel.conf --sentinel"))
  local pid
  for _ = 1, 100 do
    pid = tonumber(read_file(dir .. "/sentinel.pid") or "")
    if pid and _M.sh("bash -c '(exec 3<>/dev/tcp/127.0.0.1/" .. port .. ") 2>/dev/null'") then break end
    ngx.sleep(0.05)
  end
  assert(pid, "redis-sentinel did not start on " .. port)
  track(pid)
  local s = { port = port, pid = pid, dir = dir }
  function s.stop() return _M.stop_pid(pid, "TERM") end
  return s
end

--- Start a daemonized redis-server; returns { port, pid, stop(), kill(sig) }.
function _M.start_redis(port, ...)
  port = port or free_port()
  local dir = env.prefix .. "/redis-" .. port
  os.execute("mkdir -p " .. dir)
  local extra = table.concat({ ... }, " ")
  assert(_M.sh(string.format(
    "redis-server --port %d --bind 127.0.0.1 --save '' --appendonly no --daemonize yes --dir %s " ..
    "--pidfile %s/redis.pid --logfile %s/redis.log %s", port, dir, dir, dir, extra)))
  local pid
  for _ = 1, 100 do
    pid = tonumber(read_file(dir .. "/redis.pid") or "")
    if pid and _M.sh("bash -c '(exec 3<>/dev/tcp/127.0.0.1/" .. port .. ") 2>/dev/null'") then break end
    ngx.sleep(0.05)
  end
  assert(pid, "redis-server did not start on " .. port)
  track(pid)
  local r = { port = port, pid = pid, dir = dir }
  function r.signal(sig) return _M.sh("kill -" .. sig .. " " .. pid) end
  function r.stop() return _M.stop_pid(pid, "TERM") end
  return r
end

--- The pid of the runner's Redis (the first process in <prefix>/pids).
function _M.main_redis_pid()
  local info = _M.cmd(nil, "info", "server")
  return tonumber(info:match("process_id:(%d+)"))
end

--- Start an nginx from a template under nginx/ with @NAME@ values; returns
--- { port, prefix, stop(), reload() }. It runs daemonized with its own prefix.
function _M.start_nginx(template, vars)
  local port = free_port()
  seq = seq + 1
  local prefix = env.prefix .. "/nginx-" .. seq
  os.execute("mkdir -p " .. prefix .. "/logs")
  -- The first substitution of a name wins, so the caller's values go first.
  local kv = {}
  for k, v in pairs(vars or {}) do kv[#kv + 1] = k .. "=" .. tostring(v) end
  kv[#kv + 1] = "HTTP_PORT=" .. port
  kv[#kv + 1] = "REDIS_PORT=" .. env.redis_port
  local cmd = string.format("bash -c '. %s/nginx/lib.sh; render_conf %s/nginx/%s %s %s/nginx.conf %s'",
    env.root, env.root, template, prefix, prefix, table.concat(kv, " "))
  assert(_M.sh(cmd), "render_conf failed")
  assert(_M.sh(env.nginx .. " -p " .. prefix .. " -c " .. prefix .. "/nginx.conf -g 'daemon on;' 2>>" .. prefix .. "/logs/start.log"),
    "nginx did not start: " .. tostring(read_file(prefix .. "/logs/start.log")))
  local pid
  for _ = 1, 100 do
    pid = tonumber(read_file(prefix .. "/logs/nginx.pid") or "")
    if pid then break end
    ngx.sleep(0.05)
  end
  assert(pid, "nginx wrote no pid file")
  track(pid)
  local n = { port = port, prefix = prefix, pid = pid }
  function n.stop() return _M.stop_pid(pid, "QUIT") end
  function n.workers()
    local p = io.popen("pgrep -P " .. pid)
    local out = {}
    for line in p:lines() do out[#out + 1] = tonumber(line) end
    p:close()
    return out
  end
  function n.error_log() return read_file(prefix .. "/logs/error.log") or "" end
  for _ = 1, 100 do
    local res = _M.http(port, "/ping")
    if res and res.status == 200 then break end
    ngx.sleep(0.05)
  end
  return n
end

--- GET (or method) over a cosocket; returns { status, headers, body } or nil, err.
function _M.http(port, path, opts)
  opts = opts or {}
  local sock = ngx.socket.tcp()
  sock:settimeout(opts.timeout or 10000)
  local ok, err = sock:connect("127.0.0.1", port)
  if not ok then return nil, err end
  local lines = { (opts.method or "GET") .. " " .. path .. " HTTP/1.0", "Host: localhost" }
  for k, v in pairs(opts.headers or {}) do lines[#lines + 1] = k .. ": " .. v end
  lines[#lines + 1] = "\r\n"
  local _, serr = sock:send(table.concat(lines, "\r\n"))
  if serr then sock:close() return nil, serr end
  if opts.abort_after then
    -- A client that gives up: close the socket mid-request.
    ngx.sleep(opts.abort_after / 1000)
    sock:close()
    return { aborted = true }
  end
  local data, rerr, partial = sock:receive("*a")
  sock:close()
  data = data or partial
  if not data or data == "" then return nil, rerr end
  local head, body = data:match("^(.-)\r\n\r\n(.*)$")
  local status = tonumber((head or data):match("^HTTP/%d%.%d (%d+)"))
  local headers = {}
  for k, v in (head or ""):gmatch("\r\n([^:\r\n]+): *([^\r\n]*)") do headers[k:lower()] = v end
  return { status = status, headers = headers, body = body or "" }
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

return _M
