-- Shared by the specs: the test Redis, extra redis-servers and nginx instances,
-- a tiny HTTP client on cosockets. Every process started here is appended to
-- <prefix>/pids, so spec/runner/run stops it even when a spec fails midway.
local env = require "testenv"
-- OpenResty ships resty.redis, Debian nginx.redis: the same client library.
local found, redis = pcall(require, "resty.redis")
if not found then redis = require "nginx.redis" end

local _M = { env = env, root = env.root, prefix = env.prefix, redis_port = env.redis_port, redis = redis }

-- Busted loads this module afresh for each spec file: what must stay unique
-- for the whole run (key namespaces, nginx prefixes, ports) is counted in a
-- shared dict of the runner's nginx, not in module locals.
local harness = ngx.shared.spec_harness
local function next_seq()
  return assert(harness:incr("seq", 1, 0))
end

--- A key namespace of its own for each call, so specs never see each other's keys.
function _M.unique(name)
  return (name or "t") .. ":" .. ngx.worker.pid() .. ":" .. next_seq() .. ":"
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

-- Per port, the password a server was started with (--requirepass): specs
-- administer it with that, as its operator would.
local passwords = {}

--- One raw Redis command on a fresh connection (not through dlock).
function _M.cmd(port, name, ...)
  local red = redis:new()
  red:set_timeout(2000)
  local ok, err = red:connect("127.0.0.1", port or env.redis_port)
  if not ok then return nil, err end
  if passwords[port] then
    ok, err = red:auth(passwords[port])
    if not ok then red:close() return nil, err end
  end
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

-- Ports handed out in this run: never twice, so a spec's log lines about a
-- port cannot be mistaken for another spec's that happened to get it again.
local function free_port()
  for _ = 1, 50 do
    local p = io.popen("bash -c '. " .. env.root .. "/nginx/lib.sh; free_port'")
    local port = tonumber(p:read("*l"))
    p:close()
    if port and harness:add("port:" .. port, true) then
      return port
    end
  end
  error("no free port that was not used before in this run")
end
_M.free_port = free_port

--- Start a daemonized sentinel watching `master` (name) at 127.0.0.1:master_port,
--- quorum 2, down after 1 s; returns { port, pid, stop() }. opts.conf: more
--- sentinel.conf lines (TLS, auth-pass); opts.password: its own requirepass.
function _M.start_sentinel(name, master_port, opts)
  opts = opts or {}
  local port = free_port()
  local dir = env.prefix .. "/sentinel-" .. port
  os.execute("mkdir -p " .. dir)
  local f = assert(io.open(dir .. "/sentinel.conf", "w"))
  f:write(string.format("port %d\nbind 127.0.0.1\ndir %s\npidfile %s/sentinel.pid\nlogfile %s/sentinel.log\n" ..
    "daemonize yes\nsentinel monitor %s 127.0.0.1 %d 2\nsentinel down-after-milliseconds %s 1000\n" ..
    "sentinel failover-timeout %s 3000\n", port, dir, dir, dir, name, master_port, name, name))
  if opts.conf then f:write(opts.conf, "\n") end
  if opts.password then
    f:write("requirepass ", opts.password, "\n")
    passwords[port] = opts.password
  end
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

--- redis-server arguments for a TLS port of its own (a free one), with the
--- certificate spec/runner/run made (localhost, 127.0.0.1, signed by the CA
--- nginx trusts); replication, the cluster bus and sentinels speak TLS too.
function _M.tls_args()
  local tls = env.prefix .. "/tls"
  return { "--tls-port " .. free_port(), "--tls-cert-file " .. tls .. "/server.pem", "--tls-key-file " .. tls .. "/server.key",
    "--tls-ca-cert-file " .. tls .. "/ca.pem", "--tls-auth-clients no", "--tls-replication yes" }
end

--- Start a daemonized redis-server; returns { port, pid, stop(), kill(sig) }.
function _M.start_redis(port, ...)
  port = port or free_port()
  local dir = env.prefix .. "/redis-" .. port
  os.execute("mkdir -p " .. dir)
  local extra = table.concat({ ... }, " ")
  passwords[port] = extra:match("%-%-requirepass (%S+)")
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
  local r = { port = port, pid = pid, dir = dir, tls_port = tonumber(extra:match("%-%-tls%-port (%d+)")) }
  function r.signal(sig) return _M.sh("kill -" .. sig .. " " .. pid) end
  function r.stop() return _M.stop_pid(pid, "TERM") end
  return r
end

--- A master, `replicas` replicas of it (1 unless told) and three sentinels (quorum 2)
--- naming it `name` ("locks" unless told): { master, replicas = {...}, sentinels = {...},
--- nodes() ("host:port" of the sentinels), master_port() (as the first live sentinel
--- names it), failover() (SENTINEL FAILOVER, once the sentinels take it; the new
--- master's port), stop() }. The replicas are linked before the sentinels start, so
--- the sentinels know them from their first look at the master.
function _M.start_sentinel_set(opts)
  opts = opts or {}
  local name, n = opts.name or "locks", opts.replicas or 1
  local s = { sentinels = {}, replicas = {} }
  s.master = _M.start_redis(nil, "--repl-diskless-sync-delay 0")
  s.replicas = _M.parallel(n, function()
    return _M.start_redis(nil, "--replicaof 127.0.0.1 " .. s.master.port, "--repl-diskless-sync-delay 0")
  end)
  assert(_M.eventually(5, function()
    for _, r in ipairs(s.replicas) do
      if not (_M.cmd(r.port, "info", "replication") or ""):find("master_link_status:up", 1, true) then return false end
    end
    return true
  end), "the replicas did not link to their master")
  for i = 1, 3 do s.sentinels[i] = _M.start_sentinel(name, s.master.port) end
  -- The sentinels know each other and the replicas after a few hellos.
  local want = "slaves=" .. n .. ",sentinels=3"
  assert(_M.eventually(10, function()
    return (_M.cmd(s.sentinels[1].port, "info", "sentinel") or ""):find(want, 1, true)
  end), "the sentinels did not find the replicas and each other")
  function s.nodes()
    local out = {}
    for i, x in ipairs(s.sentinels) do out[i] = "127.0.0.1:" .. x.port end
    return out
  end
  function s.master_port()
    for _, x in ipairs(s.sentinels) do
      local addr = _M.cmd(x.port, "sentinel", "get-master-addr-by-name", name)
      if type(addr) == "table" then return tonumber(addr[2]) end
    end
  end
  --- Until the sentinels name a master other than `old`; its port, or nil after `seconds`.
  function s.wait_new_master(old, seconds)
    local new
    _M.eventually(seconds or 10, function()
      new = s.master_port()
      return new and new ~= old
    end)
    return new ~= old and new or nil
  end
  function s.failover()
    local old = s.master_port()
    -- Refused (NOGOODSLAVE, INPROG) until the sentinels see a replica fit to promote.
    local ok
    _M.eventually(15, function()
      ok = _M.cmd(s.sentinels[1].port, "sentinel", "failover", name)
      if ok ~= "OK" then ngx.sleep(0.1) end
      return ok == "OK"
    end)
    assert(ok == "OK", "the sentinels took no failover: " .. tostring(ok))
    return assert(s.wait_new_master(old, 5), "no new master 5 s after SENTINEL FAILOVER")
  end
  function s.stop()
    -- The sentinels first (none takes a failover as the servers go), then the servers, each set at once.
    _M.parallel(#s.sentinels, function(i) return s.sentinels[i].stop() end)
    local servers = { s.master, unpack(s.replicas) }
    _M.parallel(#servers, function(i) return servers[i].stop() end)
  end
  return s
end

-- Is a fresh value SET on the master at `port` acknowledged (WAIT, on the same
-- connection) by n replicas, and read back from that many of them?
local function replicated_once(port, n)
  local value = tostring(next_seq())
  local red = redis:new()
  red:set_timeout(1000)
  if not red:connect("127.0.0.1", port) then return false end
  local ok = red:set("dlock-spec:replicated", value)
  local acked = ok and red:wait(n, 100)
  local info = red:info("replication")
  red:close()
  local seen = 0
  if type(acked) == "number" and acked >= n and type(info) == "string" then
    for rport in info:gmatch("slave%d+:[^\r\n]*port=(%d+),state=online") do
      if _M.cmd(tonumber(rport), "get", "dlock-spec:replicated") == value then seen = seen + 1 end
    end
  end
  return seen >= n
end

--- Until writes on the master at `port` stream to `n` (1) replicas. Neither
--- "state=online" nor one acknowledged write is sign enough: a write made while
--- a replica syncs is in the snapshot it loads (acknowledged, and there to read
--- back), yet after a diskless sync the master streams nothing more to it until
--- its next REPLCONF ACK, up to a second later. So twice: the second write comes
--- after the replica loaded the first, and reaches it only by the stream.
function _M.wait_replicated(port, seconds, n)
  n = n or 1
  return _M.eventually(seconds or 15, function()
    if replicated_once(port, n) and replicated_once(port, n) then return true end
    ngx.sleep(0.05)
    return false
  end)
end

--- `n` copies of v (what every holder of a key should say, for assert.same).
function _M.rep(v, n)
  local out = {}
  for i = 1, n do out[i] = v end
  return out
end

--- The pid of the runner's Redis (the first process in <prefix>/pids).
function _M.main_redis_pid()
  local info = _M.cmd(nil, "info", "server")
  return tonumber(info:match("process_id:(%d+)"))
end

-- The error logs of the nginx instances start_nginx started, in order, and
-- their size before (see check_error_logs).
local started = {}

local function size(path)
  local f = io.open(path, "r")
  if not f then return 0 end
  local n = f:seek("end")
  f:close()
  return n
end

--- Whether the runner's nginx was built with `flag` (as `nginx -V` names it,
--- e.g. "http_auth_request_module"): Debian's has modules an OpenResty build may not.
function _M.nginx_has(flag)
  local p = io.popen(env.nginx .. " -V 2>&1")
  local out = p:read("*a")
  p:close()
  return out:find("--with-" .. flag, 1, true) ~= nil
end

--- Start an nginx from a template under nginx/ with @NAME@ values; returns
--- { port, prefix, pid, stop(), reload(), workers(), exited(pids), replaced(old, count), error_log() }. It runs
--- daemonized with its own prefix.
function _M.start_nginx(template, vars)
  local port = free_port()
  local prefix = env.prefix .. "/nginx-" .. next_seq()
  os.execute("mkdir -p " .. prefix .. "/logs")
  -- The first substitution of a name wins, so the caller's values go first.
  local kv = {}
  for k, v in pairs(vars or {}) do kv[#kv + 1] = k .. "=" .. tostring(v) end
  kv[#kv + 1] = "HTTP_PORT=" .. port
  kv[#kv + 1] = "REDIS_PORT=" .. env.redis_port
  -- A later spec file may get the same prefix (busted loads this module afresh per file): its log from here on.
  started[#started + 1] = { log = prefix .. "/logs/error.log", from = size(prefix .. "/logs/error.log") }
  -- nginx gives its workers no environment, so the runner's binary is named here:
  -- render_conf fills @LUA_MODULES@ for that binary (none when Lua is built in).
  local cmd = string.format("DLOCK_NGINX=%s bash -c '. %s/nginx/lib.sh; render_conf %s/nginx/%s %s %s/nginx.conf %s'",
    env.nginx, env.root, env.root, template, prefix, prefix, table.concat(kv, " "))
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
  --- nginx -s reload: new workers start, the old ones finish their requests and exit.
  function n.reload()
    return _M.sh(env.nginx .. " -p " .. prefix .. " -c " .. prefix .. "/nginx.conf -s reload")
  end
  --- Until none of `pids` (old workers) is running; true, or false after `seconds`.
  function n.exited(pids, seconds)
    return _M.eventually(seconds or 5, function()
      for _, p in ipairs(pids) do
        if _M.sh("kill -0 " .. p .. " 2>/dev/null") then
          ngx.sleep(0.05)
          return false
        end
      end
      return true
    end)
  end
  --- After a reload: the old workers (`old`) gone within 5 s and `count` new ones running; true, or false and why.
  function n.replaced(old, count)
    if not n.exited(old, 5) then return false, "an old worker still runs 5 s after the reload" end
    local now = n.workers()
    if #now ~= count then return false, #now .. " workers run, not " .. count end
    for _, pid in ipairs(now) do
      for _, o in ipairs(old) do
        if o == pid then return false, "worker " .. pid .. " is an old one" end
      end
    end
    return true
  end
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

--- ngx.now() with a fresh clock.
function _M.now()
  ngx.update_time()
  return ngx.now()
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

--- Run fn(i) in n light threads at once; returns the list of first results.
--- GET a peer's hammer location, whose body is "<taken> <errors>": how many it took, or nil and why not.
function _M.hammered(port, path, timeout)
  local res, err = _M.http(port, path, { timeout = timeout })
  local got, errs = (res and res.body or ""):match("^(%d+) (%d+)")
  if not res or res.status ~= 200 or errs ~= "0" then
    return nil, "peer: " .. tostring(res and res.status or err) .. " " .. tostring(res and res.body)
  end
  return tonumber(got)
end

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

--- A port p for a cluster node: p and its cluster bus port p + 10000 both free,
--- both below the ephemeral range (32768+), and not in `taken`.
local function free_cluster_port(taken)
  for _ = 1, 1000 do
    local p = free_port()
    -- The bus port (port + 10000) is handed out too: no TLS port or server may get it later.
    if p + 10000 < 32768 and not taken[p] and not taken[p + 10000] and harness:add("port:" .. (p + 10000), true) then
      -- Probed from bash: a refused cosocket connect is an [error] line in nginx's log.
      local busy = _M.sh("bash -c '(exec 3<>/dev/tcp/127.0.0.1/" .. (p + 10000) .. ") 2>/dev/null'")
      if not busy then return p end
    end
  end
  error("no free port pair (port, port + 10000) for a cluster node")
end

--- Lines of CLUSTER NODES, parsed: { id, port, flags = { master = true, ... }, master_id, slots = "0-5460 ..." }.
local function cluster_nodes(port)
  local text, err = _M.cmd(port, "cluster", "nodes")
  if type(text) ~= "string" then return nil, err end
  local out = {}
  for line in text:gmatch("[^\n]+") do
    local id, addr, flags, master = line:match("^(%S+) (%S+) (%S+) (%S+)")
    if id then
      local f = {}
      for flag in flags:gmatch("[^,]+") do f[flag] = true end
      out[#out + 1] = { id = id, port = tonumber(addr:match(":(%d+)@")), flags = f,
        master_id = master ~= "-" and master or nil, line = line }
    end
  end
  return out
end
_M.cluster_nodes = cluster_nodes

--- Whether one node sees the cluster whole: state ok, all 16384 slots served,
--- `want` nodes known, none in handshake or failing, three masters, and every
--- replica attached to a master; for a master, its replica online.
local function node_settled(port, want)
  local info = _M.cmd(port, "cluster", "info")
  if type(info) ~= "string" or not info:find("cluster_state:ok", 1, true)
     or not info:find("cluster_slots_ok:16384", 1, true)
     or not info:find("cluster_known_nodes:" .. want, 1, true) then
    return false
  end
  local nodes = cluster_nodes(port)
  if not nodes then return false end
  local me, masters = nil, 0
  for _, n in ipairs(nodes) do
    if n.flags.handshake or n.flags.fail or n.flags["fail?"] or n.flags.noaddr then return false end
    if n.flags.slave and not n.master_id then return false end
    if n.flags.master then masters = masters + 1 end
    if n.flags.myself then me = n end
  end
  -- Gossip tells a node late that the others became replicas: until then it lists them as masters.
  if not me or masters ~= 3 then return false end
  local repl = _M.cmd(port, "info", "replication") or ""
  if me.flags.master then
    return repl:find("slave0:[^\n]*state=online") ~= nil
  end
  return repl:find("master_link_status:up", 1, true) ~= nil
end

--- Start a Redis Cluster of 6 redis-servers on loopback (3 masters, 1 replica
--- each; cluster-node-timeout 1000 ms) and wait until every node sees it whole.
--- opts.args: extra redis-server arguments for every node; opts.tls: each node
--- also has a TLS port (node.tls_port; c.tls_seeds), the cluster bus on TLS. Returns
--- { nodes = { {port, pid, dir, signal, stop}... }, seeds = {"127.0.0.1:p1", "127.0.0.1:p2"},
---   masters(), replicas(), slot_owner(key), keyslot(key), node_id(port), alive(), stop(), started_in }.
function _M.start_cluster(opts)
  opts = opts or {}
  ngx.update_time()
  local t0 = ngx.now()
  local taken, ports = {}, {}
  for i = 1, 6 do
    ports[i] = free_cluster_port(taken)
    taken[ports[i]], taken[ports[i] + 10000] = true, true
  end
  local args = { "--cluster-enabled yes", "--cluster-config-file nodes.conf", "--cluster-node-timeout 1000",
    "--repl-diskless-sync-delay 0" }
  for _, a in ipairs(opts.args or {}) do args[#args + 1] = a end
  local nodes = _M.parallel(6, function(i)
    local a = { unpack(args) }
    if opts.tls then
      for _, t in ipairs(_M.tls_args()) do a[#a + 1] = t end
      a[#a + 1] = "--tls-cluster yes"
      -- The bus would be on the TLS port + 10000 (a free port, maybe in the ephemeral range, taken by
      -- some connection's local end): the bus port reserved above instead.
      a[#a + 1] = "--cluster-port " .. (ports[i] + 10000)
    end
    return _M.start_redis(ports[i], unpack(a))
  end)
  local c = { nodes = nodes, seeds = { "127.0.0.1:" .. ports[1], "127.0.0.1:" .. ports[2] } }
  if opts.tls then c.tls_seeds = { "127.0.0.1:" .. nodes[1].tls_port, "127.0.0.1:" .. nodes[2].tls_port } end

  --- The live nodes (answering PING), in start order.
  function c.alive()
    local out = {}
    for _, n in ipairs(nodes) do
      if not n.dead and _M.cmd(n.port, "ping") == "PONG" then out[#out + 1] = n end
    end
    return out
  end
  local function ask(...)
    local last
    for _, n in ipairs(nodes) do
      if not n.dead then
        local res, err = _M.cmd(n.port, ...)
        if res ~= nil then return res end
        last = err
      end
    end
    return nil, last
  end
  function c.node_id(port)
    return assert(_M.cmd(port, "cluster", "myid"))
  end
  function c.keyslot(key)
    return assert(ask("cluster", "keyslot", key))
  end
  --- Ports of the masters a live node lists (not failed), sorted.
  function c.masters()
    for _, n in ipairs(nodes) do
      local list = not n.dead and cluster_nodes(n.port)
      if list then
        local out = {}
        for _, x in ipairs(list) do
          if x.flags.master and not x.flags.fail and not x.flags["fail?"] then out[#out + 1] = x.port end
        end
        table.sort(out)
        return out
      end
    end
    error("no live cluster node answers CLUSTER NODES")
  end
  function c.replicas()
    for _, n in ipairs(nodes) do
      local list = not n.dead and cluster_nodes(n.port)
      if list then
        local out = {}
        for _, x in ipairs(list) do
          if x.flags.slave and not x.flags.fail then out[#out + 1] = x.port end
        end
        table.sort(out)
        return out
      end
    end
    error("no live cluster node answers CLUSTER NODES")
  end
  --- The port of the master that owns slot (a number) in a live node's CLUSTER SLOTS.
  function c.slot_port(slot)
    local slots = assert(ask("cluster", "slots"))
    for _, range in ipairs(slots) do
      if slot >= range[1] and slot <= range[2] then return tonumber(range[3][2]) end
    end
    return nil
  end
  function c.slot_owner(key)
    return c.slot_port(c.keyslot(key))
  end
  --- Wait until every live node sees the cluster whole (state ok, replicas online); true or false.
  function c.wait_settled(seconds, want)
    for _ = 1, math.max(1, (seconds or 10) * 20) do
      local all = true
      for _, n in ipairs(nodes) do
        if not n.dead and not node_settled(n.port, want or 6) then all = false break end
      end
      if all then return true end
      ngx.sleep(0.05)
    end
    return false
  end
  --- Until every live node says cluster_state:ok (and serves all slots); true or false.
  function c.wait_ok(seconds)
    for _ = 1, math.max(1, (seconds or 10) * 20) do
      local all = true
      for _, n in ipairs(nodes) do
        if not n.dead then
          local info = _M.cmd(n.port, "cluster", "info")
          if type(info) ~= "string" or not info:find("cluster_state:ok", 1, true)
             or not info:find("cluster_slots_ok:16384", 1, true) then all = false break end
        end
      end
      if all then return true end
      ngx.sleep(0.05)
    end
    return false
  end
  --- Until no live node names the master on `port` as the owner of any slot
  --- (its replica took over) and every live node says cluster_state:ok; true or false.
  function c.wait_failover(port, seconds)
    for _ = 1, math.max(1, (seconds or 10) * 20) do
      local moved = true
      for _, n in ipairs(nodes) do
        if not n.dead then
          local slots = _M.cmd(n.port, "cluster", "slots")
          if type(slots) ~= "table" then moved = false break end
          for _, range in ipairs(slots) do
            if tonumber(range[3][2]) == port then moved = false break end
          end
          if not moved then break end
        end
      end
      if moved and c.wait_ok(0.05) then return true end
      ngx.sleep(0.05)
    end
    return false
  end
  --- SIGKILL node n (one of c.nodes); it is skipped from then on.
  function c.kill(n)
    n.dead = true
    return n.signal("KILL")
  end
  function c.stop()
    _M.parallel(#nodes, function(i) if not nodes[i].dead then nodes[i].stop() end return true end)
  end

  -- redis-cli --cluster create waits for the nodes to join (polling every second):
  -- run it in the background, so this worker keeps serving while it does.
  local dir = env.prefix .. "/cluster-" .. ports[1]
  os.execute("mkdir -p " .. dir)
  local addrs = {}
  for i = 1, 6 do addrs[i] = "127.0.0.1:" .. ports[i] end
  local pw = passwords[ports[1]]
  assert(_M.sh(string.format("(%sredis-cli --cluster create %s --cluster-replicas 1 --cluster-yes > %s/create.log 2>&1; " ..
    "echo $? > %s/create.rc) </dev/null >/dev/null 2>&1 &", pw and "REDISCLI_AUTH=" .. pw .. " " or "",
    table.concat(addrs, " "), dir, dir)))
  local rc
  for _ = 1, 600 do
    rc = read_file(dir .. "/create.rc")
    if rc and rc:match("%d") then break end
    ngx.sleep(0.02)
  end
  assert(rc and tonumber(rc:match("%d+")) == 0,
    "redis-cli --cluster create failed: " .. tostring(read_file(dir .. "/create.log")))
  assert(c.wait_settled(15), "the cluster did not settle within 15 s (see " .. dir .. ")")
  ngx.update_time()
  c.started_in = ngx.now() - t0
  return c
end

--- Move `slot` from the master on from_port to the master on to_port, one step
--- at a time, so a spec can look at the cluster in between:
---   "begin":  the target IMPORTING from the source, the source MIGRATING to the target
---             (the source answers ASK for keys of the slot it no longer has);
---   "keys":   MIGRATE the slot's keys from the source to the target;
---   "finish": the slot assigned to the target, on the target, the source and every other master
---             (the source answers MOVED from then on).
---   "all":    the three in order.
function _M.migrate_slot(cluster, slot, from_port, to_port, step)
  local from_id, to_id = cluster.node_id(from_port), cluster.node_id(to_port)
  if step == "begin" or step == "all" then
    assert(_M.cmd(to_port, "cluster", "setslot", slot, "importing", from_id))
    assert(_M.cmd(from_port, "cluster", "setslot", slot, "migrating", to_id))
  end
  if step == "keys" or step == "all" then
    while true do
      local keys = assert(_M.cmd(from_port, "cluster", "getkeysinslot", slot, 100))
      if #keys == 0 then break end
      assert(_M.cmd(from_port, "migrate", "127.0.0.1", to_port, "", 0, 5000, "KEYS", unpack(keys)))
    end
  end
  if step == "finish" or step == "all" then
    assert(_M.cmd(to_port, "cluster", "setslot", slot, "node", to_id))
    assert(_M.cmd(from_port, "cluster", "setslot", slot, "node", to_id))
    for _, m in ipairs(cluster.masters()) do
      if m ~= from_port and m ~= to_port then assert(_M.cmd(m, "cluster", "setslot", slot, "node", to_id)) end
    end
  end
  if step ~= "begin" and step ~= "keys" and step ~= "finish" and step ~= "all" then
    error("migrate_slot: step must be begin, keys, finish or all, got " .. tostring(step))
  end
  return true
end

--- n independent redis-servers (no replication between them), for Redlock.
--- Returns { nodes = { {port, pid, dir, signal, stop}... }, ports = {...},
--- addrs = { "127.0.0.1:port"... }, stop(), started_in }.
function _M.start_redlock(n, ...)
  ngx.update_time()
  local t0 = ngx.now()
  local ports, taken = {}, {}
  for i = 1, n do
    local p
    repeat p = free_port() until not taken[p]
    taken[p] = true
    ports[i] = p
  end
  local extra = { ... }
  local nodes = _M.parallel(n, function(i) return _M.start_redis(ports[i], unpack(extra)) end)
  local addrs = {}
  for i = 1, n do addrs[i] = "127.0.0.1:" .. ports[i] end
  local r = { nodes = nodes, ports = ports, addrs = addrs }
  function r.stop()
    _M.parallel(n, function(i) return nodes[i].stop() end)
  end
  ngx.update_time()
  r.started_in = ngx.now() - t0
  return r
end

-- Error logs. nginx logs at error level what an operator must look at; in
-- normal operation there is none. Every spec file ends with
-- h.check_error_logs(expected), which adds a last test that fails on any
-- [error], [crit], [alert] or [emerg] line written while the file ran (the
-- runner's error log from where it stood when the file began, and the logs
-- of every nginx the file started) that matches none of `expected`: Lua
-- patterns naming the lines a spec causes on purpose (a Redis it kills, a
-- request it breaks). Name them narrowly; { pattern, max = n } allows at most
-- n such lines (a spec that stops Redis once expects one timeout, not a flood).

local SEVERE = { "%[error%]", "%[crit%]", "%[alert%]", "%[emerg%]" }

--- Where the error logs stand now: { runner = bytes, started = nginx started so far }.
function _M.error_log_mark()
  return { runner = size(env.prefix .. "/logs/error.log"), started = #started }
end

local function severe(line)
  for _, p in ipairs(SEVERE) do
    if line:find(p) then return true end
  end
  return false
end

--- The [error] (and worse) lines since mark that match none of the patterns in `expected`.
function _M.unexpected_errors(mark, expected)
  local files = { { env.prefix .. "/logs/error.log", mark.runner } }
  for i = mark.started + 1, #started do files[#files + 1] = { started[i].log, started[i].from } end
  local out, seen = {}, {}
  for _, f in ipairs(files) do
    local fh = io.open(f[1], "r")
    if fh then
      fh:seek("set", f[2])
      for line in fh:lines() do
        if severe(line) then
          local known = false
          for i, e in ipairs(expected or {}) do
            local p, max = e, nil
            if type(e) == "table" then p, max = e[1], e.max end
            if line:find(p) then
              seen[i] = (seen[i] or 0) + 1
              known = max == nil or seen[i] <= max
              break
            end
          end
          if not known then out[#out + 1] = f[1]:sub(#env.prefix + 2) .. ": " .. line end
        end
      end
      fh:close()
    end
  end
  return out
end

--- At the end of a spec file (outside its describe blocks): the last test of the file,
--- "logs no unexpected [error] lines" (see above). `expected`: Lua patterns of the lines it causes on purpose.
function _M.check_error_logs(expected)
  local busted = getfenv(2)
  local mark
  busted.setup(function() mark = _M.error_log_mark() end)
  -- Busted names a test after where its function is written (here): the spec file goes into its name.
  local file = debug.getinfo(2, "S").short_src:match("[^/]*$")
  busted.it(file .. " logs no unexpected [error], [crit] or [alert] lines", function()
    local bad = _M.unexpected_errors(mark, expected)
    -- The distinct messages (without time, pid and connection), each with its count and first line.
    local seen, order = {}, {}
    for _, line in ipairs(bad) do
      local msg = line:gsub("^(%S+: )%d+/%d+/%d+ %d+:%d+:%d+ (%[%a+%]) %d+#%d+: %*?%d* ?", "%1%2 ")
      if not seen[msg] then
        seen[msg] = 0
        order[#order + 1] = msg
      end
      seen[msg] = seen[msg] + 1
    end
    local out = {}
    for i = 1, math.min(#order, 20) do out[i] = seen[order[i]] .. " x " .. order[i] end
    busted.assert.is_true(#bad == 0, #bad .. " unexpected line(s) in the nginx error logs:\n" .. table.concat(out, "\n"))
  end)
end

return _M
