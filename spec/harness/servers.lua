-- Redis servers for the specs, started as their operators would: standalone
-- (TLS, passwords), replicas with their sentinels, and the independent
-- masters of Redlock.
local h = require "harness.base"
local process = require "harness.process"

local env, passwords, next_seq = h.env, h.passwords, h.next_seq
local track, read_file, free_port = process.track, process.read_file, process.free_port

local _M = {}

--- The pid of a daemon `what` just started: once its pid file is written and it
--- accepts connections on port (at most 5 s); tracked for the runner to stop.
local function started(pidfile, port, what)
  local pid
  for _ = 1, 100 do
    pid = tonumber(read_file(pidfile) or "")
    if pid and process.listening(port) then break end
    ngx.sleep(0.05)
  end
  assert(pid, what .. " did not start on " .. port)
  track(pid)
  return pid
end

--- Start a daemonized sentinel watching `master` (name) at 127.0.0.1:master_port
--- (opts.host: another address), quorum 2, down after 1 s; returns { port, tls_port,
--- pid, stop() }. opts.conf: more sentinel.conf lines (TLS, auth-pass, bind);
--- opts.password: its own requirepass.
function _M.start_sentinel(name, master_port, opts)
  opts = opts or {}
  local port = free_port()
  local dir = env.prefix .. "/sentinel-" .. port
  os.execute("mkdir -p " .. dir)
  local f = assert(io.open(dir .. "/sentinel.conf", "w"))
  f:write(string.format("port %d\nbind 127.0.0.1\ndir %s\npidfile %s/sentinel.pid\nlogfile %s/sentinel.log\n" ..
    "daemonize yes\nsentinel monitor %s %s %d 2\nsentinel down-after-milliseconds %s 1000\n" ..
    "sentinel failover-timeout %s 3000\n", port, dir, dir, dir, name, opts.host or "127.0.0.1", master_port, name, name))
  if opts.conf then f:write(opts.conf, "\n") end
  if opts.password then
    f:write("requirepass ", opts.password, "\n")
    passwords[port] = opts.password
  end
  f:close()
  assert(process.sh("redis-server " .. dir .. "/sentinel.conf --sentinel"))
  local pid = started(dir .. "/sentinel.pid", port, "redis-sentinel")
  local s = { port = port, pid = pid, dir = dir, tls_port = tonumber((opts.conf or ""):match("tls%-port (%d+)")) }
  if s.tls_port then h.plaintext[s.tls_port] = port end
  function s.stop() return process.stop_pid(pid, "TERM") end
  return s
end

--- redis-server arguments for a TLS port of its own (a free one), with the
--- certificate spec/runner/run made (localhost, 127.0.0.1, signed by the CA
--- nginx trusts); replication, the cluster bus and sentinels speak TLS too.
--- mutual: every client must show a certificate that CA signed, as
--- redis-server asks by default (tls-auth-clients yes); the servers show theirs
--- to each other. Otherwise clients need none (tls-auth-clients no).
function _M.tls_args(mutual)
  local tls = env.prefix .. "/tls"
  return { "--tls-port " .. free_port(), "--tls-cert-file " .. tls .. "/server.pem", "--tls-key-file " .. tls .. "/server.key",
    "--tls-ca-cert-file " .. tls .. "/ca.pem", "--tls-auth-clients " .. (mutual and "yes" or "no"), "--tls-replication yes" }
end

--- The client certificate spec/runner/run made (signed by the servers' CA), as
--- redis options take it: { ssl_client_cert =, ssl_client_priv_key = } (paths).
--- stranger: one signed by nobody the servers trust.
function _M.client_cert(stranger)
  local tls, name = env.prefix .. "/tls", stranger and "stranger" or "client"
  return { ssl_client_cert = tls .. "/" .. name .. ".pem", ssl_client_priv_key = tls .. "/" .. name .. ".key" }
end

--- The README's smallest ACL rule for a lock user ("An ACL user with only what the
--- locks need"), as redis-server's --user takes it (each word quoted), with the key
--- patterns of each of `prefixes` (and their Cluster hash tags) beside its own.
function _M.least_privilege_rules(prefixes)
  local readme = assert(read_file(env.root .. "/README.md"))
  local rule = assert(readme:match("\n%s*ACL SETUSER locker on >secret ([^\n]+)"), "the README shows no least-privilege rule")
  local keys = {}
  for _, p in ipairs(prefixes or {}) do keys[#keys + 1] = "~" .. p .. "* ~{" .. p .. "*" end
  rule = rule:gsub("resetkeys", "resetkeys " .. table.concat(keys, " "), 1)
  local out = {}
  for word in rule:gmatch("%S+") do out[#out + 1] = "'" .. word .. "'" end
  return table.concat(out, " ")
end

--- Start a daemonized redis-server; returns { port, pid, stop(), kill(sig) }.
function _M.start_redis(port, ...)
  port = port or free_port()
  local dir = env.prefix .. "/redis-" .. port
  os.execute("mkdir -p " .. dir)
  local extra = table.concat({ ... }, " ")
  passwords[port] = extra:match("%-%-requirepass (%S+)")
  assert(process.sh(string.format(
    "redis-server --port %d --bind 127.0.0.1 --save '' --appendonly no --daemonize yes --dir %s " ..
    "--pidfile %s/redis.pid --logfile %s/redis.log %s", port, dir, dir, dir, extra)))
  local pid = started(dir .. "/redis.pid", port, "redis-server")
  local r = { port = port, pid = pid, dir = dir, tls_port = tonumber(extra:match("%-%-tls%-port (%d+)")) }
  if r.tls_port then h.plaintext[r.tls_port] = port end
  function r.signal(sig) return process.sh("kill -" .. sig .. " " .. pid) end
  function r.stop() return process.stop_pid(pid, "TERM") end
  return r
end

--- A master, `replicas` replicas of it (1 unless told) and three sentinels (quorum 2)
--- naming it `name` ("locks" unless told): { master, replicas = {...}, sentinels = {...},
--- nodes() ("host:port" of the sentinels), master_port() (as the first live sentinel
--- names it), failover() (SENTINEL FAILOVER, once the sentinels take it; the new
--- master's port), stop() }.
--- The replicas are linked before the sentinels start, so the sentinels know them
--- from their first look at the master. As production runs it, when told:
--- opts.password: every server's requirepass (masterauth, and the sentinels'
--- auth-pass), opts.user = { name, password, rules }: an ACL user besides (rules: its
--- keys, channels and commands as redis-server's --user takes them; all of them unless told);
--- opts.sentinel_password: the sentinels' own requirepass (and sentinel-pass,
--- to talk to each other); opts.tls: replication, the sentinels and the ports they
--- name are TLS (each server keeps a plaintext port for the specs' own commands),
--- "mutual": every TLS port asks clients for a certificate (tls_args);
--- opts.args: more arguments for every server; opts.host: the name the sentinels watch the master by
--- (127.0.0.1 unless told); opts.sentinel_conf: more sentinel.conf lines.
function _M.start_sentinel_set(opts)
  opts = opts or {}
  local name, n = opts.name or "locks", opts.replicas or 1
  local s = { sentinels = {}, replicas = {} }
  local common = { "--repl-diskless-sync-delay 0", unpack(opts.args or {}) }
  if opts.password then
    common[#common + 1] = "--requirepass " .. opts.password
    common[#common + 1] = "--masterauth " .. opts.password
  end
  if opts.user then
    common[#common + 1] = "--user " .. opts.user.name .. " on '>" .. opts.user.password .. "' " .. (opts.user.rules or "'~*' '&*' '+@all'")
  end
  local function server(...)
    local args = { ... }
    for _, a in ipairs(common) do args[#args + 1] = a end
    if opts.tls then
      for _, a in ipairs(_M.tls_args(opts.tls == "mutual")) do args[#args + 1] = a end
    end
    return _M.start_redis(nil, unpack(args))
  end
  -- Where the others reach a server: its TLS port under TLS.
  local function named(r) return opts.tls and r.tls_port or r.port end
  s.master = server()
  s.replicas = h.parallel(n, function() return server("--replicaof 127.0.0.1 " .. named(s.master)) end)
  assert(h.eventually(5, function()
    for _, r in ipairs(s.replicas) do
      if not (h.cmd(r.port, "info", "replication") or ""):find("master_link_status:up", 1, true) then return false end
    end
    return true
  end), "the replicas did not link to their master")
  local function sentinel_conf()
    local conf = {}
    if opts.tls then
      -- A TLS port of its own (tls_args() picks a free one per call), and TLS to the servers and the other sentinels.
      for _, a in ipairs(_M.tls_args(opts.tls == "mutual")) do conf[#conf + 1] = (a:gsub("^%-%-", "")) end
    end
    if opts.password then conf[#conf + 1] = "sentinel auth-pass " .. name .. " " .. opts.password end
    if opts.sentinel_password then conf[#conf + 1] = "sentinel sentinel-pass " .. opts.sentinel_password end
    if opts.sentinel_conf then conf[#conf + 1] = opts.sentinel_conf end
    return table.concat(conf, "\n")
  end
  for i = 1, 3 do
    s.sentinels[i] = _M.start_sentinel(name, named(s.master), { conf = sentinel_conf(), password = opts.sentinel_password,
      host = opts.host })
  end
  -- The sentinels know each other and the replicas after a few hellos.
  local want = "slaves=" .. n .. ",sentinels=3"
  assert(h.eventually(10, function()
    return (h.cmd(s.sentinels[1].port, "info", "sentinel") or ""):find(want, 1, true)
  end), "the sentinels did not find the replicas and each other")
  function s.nodes()
    local out = {}
    for i, x in ipairs(s.sentinels) do out[i] = "127.0.0.1:" .. (opts.tls and x.tls_port or x.port) end
    return out
  end

  function s.master_port()
    for _, x in ipairs(s.sentinels) do
      local addr = h.cmd(x.port, "sentinel", "get-master-addr-by-name", name)
      if type(addr) == "table" then return tonumber(addr[2]) end
    end
  end
  --- Until the sentinels name a master other than `old`; its port, or nil after `seconds`.
  function s.wait_new_master(old, seconds)
    local new
    h.eventually(seconds or 10, function()
      new = s.master_port()
      return new and new ~= old
    end)
    return new ~= old and new or nil
  end
  function s.failover()
    local old = s.master_port()
    -- Refused (NOGOODSLAVE, INPROG) until the sentinels see a replica fit to promote.
    local ok
    h.eventually(15, function()
      ok = h.cmd(s.sentinels[1].port, "sentinel", "failover", name)
      if ok ~= "OK" then ngx.sleep(0.1) end
      return ok == "OK"
    end)
    assert(ok == "OK", "the sentinels took no failover: " .. tostring(ok))
    -- Usually 2 to 3 s (the sentinels read the promoted replica's INFO once a second); a loaded machine took over 5.
    return assert(s.wait_new_master(old, 15), "no new master 15 s after SENTINEL FAILOVER")
  end
  function s.stop()
    -- The sentinels first (none takes a failover as the servers go), then the servers, each set at once.
    h.parallel(#s.sentinels, function(i) return s.sentinels[i].stop() end)
    local servers = { s.master, unpack(s.replicas) }
    h.parallel(#servers, function(i) return servers[i].stop() end)
  end
  return s
end

-- Is a fresh value SET on the master at `port` acknowledged (WAIT, on the same
-- connection) by n replicas, and read back from that many of them? `key`: the
-- key written, one of the master's slots when it is a Cluster node (read back
-- with READONLY, as a replica of a Cluster answers only then).
local function replicated_once(port, n, key)
  local value = tostring(next_seq())
  local red = h.admin(port)
  if not red then return false end
  local ok = red:set(key, value)
  local acked = ok and red:wait(n, 100)
  local info = red:info("replication")
  red:close()
  local seen = 0
  if type(acked) == "number" and acked >= n and type(info) == "string" then
    for rport in info:gmatch("slave%d+:[^\r\n]*port=(%d+),state=online") do
      if h.cmd_readonly(tonumber(rport), "get", key) == value then seen = seen + 1 end
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
--- `key` (a key of one of its slots, on a Cluster master): the key written.
function _M.wait_replicated(port, seconds, n, key)
  n = n or 1
  key = key or "dlock-spec:replicated"
  return h.eventually(seconds or 15, function()
    if replicated_once(port, n, key) and replicated_once(port, n, key) then return true end
    ngx.sleep(0.05)
    return false
  end)
end

function _M.main_redis_pid()
  local info = h.cmd(nil, "info", "server")
  return tonumber(info:match("process_id:(%d+)"))
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
  local nodes = h.parallel(n, function(i) return _M.start_redis(ports[i], unpack(extra)) end)
  local addrs = {}
  for i = 1, n do addrs[i] = "127.0.0.1:" .. ports[i] end
  local r = { nodes = nodes, ports = ports, addrs = addrs }
  function r.stop()
    h.parallel(n, function(i) return nodes[i].stop() end)
  end
  ngx.update_time()
  r.started_in = ngx.now() - t0
  return r
end

return _M
