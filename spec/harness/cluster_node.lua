-- One Redis Cluster node as the harness sees it: a port pair to start it on,
-- its CLUSTER NODES parsed, and whether it sees the cluster whole.
local h = require "harness.base"
local process = require "harness.process"

local harness = ngx.shared.spec_harness
local free_port = process.free_port

local _M = {}

--- A port p for a cluster node: p and its cluster bus port p + 10000 both free,
--- both below the ephemeral range (32768+), and not in `taken`.
function _M.free_port(taken)
  for _ = 1, 1000 do
    local p = free_port()
    -- The bus port (port + 10000) is handed out too: no TLS port or server may get it later.
    if p + 10000 < 32768 and not taken[p] and not taken[p + 10000] and harness:add("port:" .. (p + 10000), true) then
      if not process.listening(p + 10000) then return p end
    end
  end
  error("no free port pair (port, port + 10000) for a cluster node")
end

--- Lines of CLUSTER NODES, parsed: { id, port, flags = { master = true, ... }, master_id, slots = "0-5460 ..." }.
function _M.nodes(port)
  local text, err = h.cmd(port, "cluster", "nodes")
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

--- Whether one node sees the cluster whole: state ok, all 16384 slots served,
--- `want` nodes known, none in handshake or failing, three masters, and every
--- replica attached to a master; for a master, its replica online.
function _M.settled(port, want)
  local info = h.cmd(port, "cluster", "info")
  if type(info) ~= "string" or not info:find("cluster_state:ok", 1, true)
     or not info:find("cluster_slots_ok:16384", 1, true)
     or not info:find("cluster_known_nodes:" .. want, 1, true) then
    return false
  end
  local nodes = _M.nodes(port)
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
  local repl = h.cmd(port, "info", "replication") or ""
  if me.flags.master then
    return repl:find("slave0:[^\n]*state=online") ~= nil
  end
  return repl:find("master_link_status:up", 1, true) ~= nil
end

return _M
