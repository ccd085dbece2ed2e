-- Redis Cluster for the specs: six nodes on loopback (three masters with a
-- replica each), what they say of each other, and slots moved step by step.
local h = require "harness.base"
local process = require "harness.process"
local servers = require "harness.servers"
local cluster_node = require "harness.cluster_node"

local env, passwords, read_file = h.env, h.passwords, process.read_file
local free_cluster_port, cluster_nodes, node_settled = cluster_node.free_port, cluster_node.nodes,
  cluster_node.settled

local _M = {}

_M.cluster_nodes = cluster_nodes

--- Start a Redis Cluster of 6 redis-servers on loopback (3 masters, 1 replica
--- each; cluster-node-timeout 1000 ms) and wait until every node sees it whole.
--- opts.args: extra redis-server arguments for every node; opts.tls: each node
--- also has a TLS port (node.tls_port; c.tls_seeds), the cluster bus on TLS
--- ("mutual": the TLS ports ask clients for a certificate, servers.tls_args);
--- opts.tls_cluster = false: tls-cluster no and tls-replication no (the bus and
--- replication in plaintext, and CLUSTER SLOTS names the nodes' plaintext
--- ports, to TLS clients too). Returns
--- { nodes = { {port, pid, dir, signal, stop}... }, seeds = {"127.0.0.1:p1", "127.0.0.1:p2"},
---   redis(extra), masters(), replicas(), slot_owner(key), keyslot(key), node_id(port), alive(), stop(), started_in }.
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
  local nodes = h.parallel(6, function(i)
    local a = { unpack(args) }
    if opts.tls then
      for _, t in ipairs(servers.tls_args(opts.tls == "mutual")) do a[#a + 1] = t end
      if opts.tls_cluster == false then
        -- Replicas reach their master at the port the cluster names, the plaintext one now.
        a[#a + 1] = "--tls-cluster no"
        a[#a + 1] = "--tls-replication no"
      else
        a[#a + 1] = "--tls-cluster yes"
      end
      -- The bus would be on the TLS port + 10000 (a free port, maybe in the ephemeral range, taken by
      -- some connection's local end): the bus port reserved above instead.
      a[#a + 1] = "--cluster-port " .. (ports[i] + 10000)
    end
    return servers.start_redis(ports[i], unpack(a))
  end)
  local c = { nodes = nodes, seeds = { "127.0.0.1:" .. ports[1], "127.0.0.1:" .. ports[2] } }
  if opts.tls then c.tls_seeds = { "127.0.0.1:" .. nodes[1].tls_port, "127.0.0.1:" .. nodes[2].tls_port } end

  --- The library's `redis` option for this cluster, as the specs use it (extra: more fields of redis.cluster).
  function c.redis(extra)
    local cluster = { nodes = c.seeds, max_redirects = 5 }
    for k, v in pairs(extra or {}) do cluster[k] = v end
    return { cluster = cluster, connect_timeout = 300, read_timeout = 1000 }
  end

  --- A lock factory on this cluster under a prefix of its own (h.unique(stem));
  --- more: more options of dlock.new.
  function c.locks(stem, more)
    local o = { dict = "dlock", prefix = h.unique(stem), redis = c.redis() }
    for k, v in pairs(more or {}) do o[k] = v end
    return assert(require("resty.dlock").new(o))
  end

  --- The query argument that points a peer nginx's hammer locations at this
  --- cluster's masters (nginx/spec-peer.conf): "&cluster=port,port,port".
  function c.peer_arg()
    return "&cluster=" .. table.concat(c.masters(), ",")
  end

  --- The live nodes (answering PING), in start order.
  function c.alive()
    local out = {}
    for _, n in ipairs(nodes) do
      if not n.dead and h.cmd(n.port, "ping") == "PONG" then out[#out + 1] = n end
    end
    return out
  end
  local function ask(...)
    local last
    for _, n in ipairs(nodes) do
      if not n.dead then
        local res, err = h.cmd(n.port, ...)
        if res ~= nil then return res end
        last = err
      end
    end
    return nil, last
  end
  function c.node_id(port)
    return assert(h.cmd(port, "cluster", "myid"))
  end
  function c.keyslot(key)
    return assert(ask("cluster", "keyslot", key))
  end
  --- Ports of the nodes a live node lists whose flags pass keep(flags), sorted.
  local function listed(keep)
    for _, n in ipairs(nodes) do
      local list = not n.dead and cluster_nodes(n.port)
      if list then
        local out = {}
        for _, x in ipairs(list) do
          if keep(x.flags) then out[#out + 1] = x.port end
        end
        table.sort(out)
        return out
      end
    end
    error("no live cluster node answers CLUSTER NODES")
  end
  --- Ports of the masters a live node lists (not failed), sorted.
  function c.masters()
    return listed(function(f) return f.master and not f.fail and not f["fail?"] end)
  end
  function c.replicas()
    return listed(function(f) return f.slave and not f.fail end)
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
  --- Until ok(port) holds for every live node, polled every 50 ms; true, or false after `seconds` (10).
  local function all_live(seconds, ok)
    for _ = 1, math.max(1, (seconds or 10) * 20) do
      local all = true
      for _, n in ipairs(nodes) do
        if not n.dead and not ok(n.port) then all = false break end
      end
      if all then return true end
      ngx.sleep(0.05)
    end
    return false
  end
  -- The node says cluster_state:ok and serves all slots.
  local function node_ok(port)
    local info = h.cmd(port, "cluster", "info")
    return type(info) == "string" and info:find("cluster_state:ok", 1, true) ~= nil
      and info:find("cluster_slots_ok:16384", 1, true) ~= nil
  end
  --- Wait until every live node sees the cluster whole (state ok, replicas online); true or false.
  function c.wait_settled(seconds, want)
    return all_live(seconds, function(port) return node_settled(port, want or 6) end)
  end
  --- Until every live node says cluster_state:ok (and serves all slots); true or false.
  function c.wait_ok(seconds)
    return all_live(seconds, node_ok)
  end
  --- Until no live node names the master on `port` as the owner of any slot
  --- (its replica took over) and every live node says cluster_state:ok; true or false.
  function c.wait_failover(port, seconds)
    return all_live(seconds, function(p)
      local slots = h.cmd(p, "cluster", "slots")
      if type(slots) ~= "table" then return false end
      for _, range in ipairs(slots) do
        if tonumber(range[3][2]) == port then return false end
      end
      return node_ok(p)
    end)
  end
  --- SIGKILL node n (one of c.nodes); it is skipped from then on.
  function c.kill(n)
    n.dead = true
    return n.signal("KILL")
  end
  function c.stop()
    h.parallel(#nodes, function(i) if not nodes[i].dead then nodes[i].stop() end return true end)
  end

  -- redis-cli --cluster create waits for the nodes to join (polling every second):
  -- run it in the background, so this worker keeps serving while it does.
  local dir = env.prefix .. "/cluster-" .. ports[1]
  os.execute("mkdir -p " .. dir)
  local addrs = {}
  for i = 1, 6 do addrs[i] = "127.0.0.1:" .. ports[i] end
  local pw = passwords[ports[1]]
  assert(process.sh(string.format("(%sredis-cli --cluster create %s --cluster-replicas 1 --cluster-yes > %s/create.log 2>&1; " ..
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
    assert(h.cmd(to_port, "cluster", "setslot", slot, "importing", from_id))
    assert(h.cmd(from_port, "cluster", "setslot", slot, "migrating", to_id))
  end
  if step == "keys" or step == "all" then
    while true do
      local keys = assert(h.cmd(from_port, "cluster", "getkeysinslot", slot, 100))
      if #keys == 0 then break end
      assert(h.cmd(from_port, "migrate", "127.0.0.1", to_port, "", 0, 5000, "KEYS", unpack(keys)))
    end
  end
  if step == "finish" or step == "all" then
    assert(h.cmd(to_port, "cluster", "setslot", slot, "node", to_id))
    assert(h.cmd(from_port, "cluster", "setslot", slot, "node", to_id))
    for _, m in ipairs(cluster.masters()) do
      if m ~= from_port and m ~= to_port then assert(h.cmd(m, "cluster", "setslot", slot, "node", to_id)) end
    end
  end
  if step ~= "begin" and step ~= "keys" and step ~= "finish" and step ~= "all" then
    error("migrate_slot: step must be begin, keys, finish or all, got " .. tostring(step))
  end
  return true
end

--- Three masters without replicas, the slots in thirds, joined by CLUSTER MEET
--- through `host` (the address the nodes then know each other by), settled;
--- args: more redis-server arguments for each. { nodes, ranges = {{from, to}...},
--- owner(slot) -> node, stop() }. For addresses start_cluster does not give.
function _M.start_bare_cluster(host, ...)
  local extra = { "--cluster-enabled yes", "--cluster-config-file nodes.conf", "--cluster-node-timeout 1000", ... }
  -- Ports whose bus ports (+ 10000) are free too, as start_cluster picks them: a bus port in the ephemeral
  -- range may be some connection's local end, and the node then fails to start.
  local taken, ports = {}, {}
  for i = 1, 3 do
    ports[i] = free_cluster_port(taken)
    taken[ports[i]], taken[ports[i] + 10000] = true, true
  end
  local nodes = h.parallel(3, function(i) return servers.start_redis(ports[i], unpack(extra)) end)
  local c = { nodes = nodes, ranges = { { 0, 5460 }, { 5461, 10922 }, { 10923, 16383 } } }
  function c.stop() for _, n in ipairs(nodes) do n.stop() end end
  function c.owner(slot)
    for i, r in ipairs(c.ranges) do if slot >= r[1] and slot <= r[2] then return nodes[i] end end
  end
  for i, n in ipairs(nodes) do
    assert(h.cmd(n.port, "cluster", "addslotsrange", c.ranges[i][1], c.ranges[i][2]) == "OK", "CLUSTER ADDSLOTSRANGE")
  end
  for i = 2, 3 do assert(h.cmd(nodes[1].port, "cluster", "meet", host, nodes[i].port) == "OK", "CLUSTER MEET") end
  assert(h.eventually(15, function()
    for _, n in ipairs(nodes) do
      local slots = h.cmd(n.port, "cluster", "slots")
      if type(slots) ~= "table" or #slots < 3 or not (h.cmd(n.port, "cluster", "info") or ""):find("cluster_state:ok", 1, true) then
        ngx.sleep(0.1)
        return false
      end
    end
    return true
  end), "the cluster did not come up")
  return c
end

return _M
