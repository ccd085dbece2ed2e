-- The loads the exclusion specs put on a few keys, from light threads of this
-- worker and from requests to a peer nginx (nginx/spec-peer.conf's hammer
-- locations), every holder watched by the overlap witness (spec/witness.lua).
-- Shared by the specs of key sets (multikey_spec, multikey_fleet_spec) and of
-- readers and writers (rwlock_fleet_spec), with the Cluster and peer nginx
-- their Cluster tests run on.
local h = require "helpers"
local witness = require "witness"

local _M = {}

--- In the calling describe: a Redis Cluster and a peer nginx of 2 workers,
--- started by a setup and stopped by a teardown. Returns the table they go in:
--- { c = the cluster (harness/cluster.lua), peer = the nginx }.
function _M.cluster_fleet()
  local busted = getfenv(2)
  local f = {}
  busted.setup(function()
    f.c = h.start_cluster()
    f.peer = h.start_nginx("spec-peer.conf", { WORKERS = 2 })
  end)
  busted.teardown(function()
    if f.peer then f.peer.stop() end
    if f.c then f.c.stop() end
  end)
  return f
end

--- Readers and writers on `keys` keys: 40 light threads here and 16 requests to
--- the peer (/rw-hammer), 20 rounds each, `reads` % of them readers; `extra`
--- more query arguments for the peer (a cluster's, c.peer_arg()). Returns the
--- witness's overlaps (ngx.null when none) and how often readers shared.
function _M.readers_writers(locks, peer, keys, reads, extra)
  local prefix = locks.prefix
  local rounds = 20
  local function local_client()
    local w = witness.new(h.redis_port, prefix)
    local got = 0
    for _ = 1, rounds do
      local key = "k" .. math.random(keys)
      local shared = math.random(100) <= reads
      local lease, err = locks:acquire(key, { ttl = 5000, wait = 10000, shared = shared })
      assert(lease, err)
      got = got + 1
      witness.inside_shared(w, key, shared, 2)
      assert(lease:release())
    end
    witness.close(w)
    return got
  end
  local function remote_client()
    local res = assert(h.http(peer.port, "/rw-hammer?prefix=" .. ngx.escape_uri(prefix) .. "&keys=" .. keys ..
      "&rounds=" .. rounds .. "&reads=" .. reads .. (extra or ""), { timeout = 60000 }))
    local got, errs = res.body:match("^(%d+) (%d+)")
    assert(res.status == 200 and errs == "0", "the peer's /rw-hammer answered " .. res.status .. ": " .. res.body)
    return tonumber(got)
  end
  local threads = {}
  for _ = 1, 40 do threads[#threads + 1] = h.spawn(local_client) end
  for _ = 1, 16 do threads[#threads + 1] = h.spawn(remote_client) end
  local total = 0
  for _, wait in ipairs(threads) do total = total + wait() end
  assert(total == 56 * rounds, "leases taken: " .. total .. ", not " .. 56 * rounds)
  local overlaps = h.cmd(nil, "get", prefix .. "overlaps")
  local shared = tonumber(h.cmd(nil, "get", prefix .. "shared")) or 0
  io.stdout:write(string.format("rwlock: %d leases (%d %% readers) on %d keys%s: %s overlaps, readers side by side %d times\n",
    total, reads, keys, extra and " (cluster)" or "", overlaps == ngx.null and "0" or tostring(overlaps), shared))
  return overlaps, shared
end

--- n rounds of acquire_all(keys) in this light thread, witnessed: acquired, errors.
function _M.sets(locks, keys, rounds, wait)
  local w = witness.new(h.redis_port, locks.prefix)
  local got, errs = 0, {}
  for _ = 1, rounds do
    local lease, err = locks:acquire_all(keys, { ttl = 5000, wait = wait })
    if lease then
      got = got + 1
      witness.inside_all(w, keys, 1)
      assert(lease:release())
    else
      errs[#errs + 1] = err
    end
  end
  witness.close(w)
  return got, errs
end

--- {a,b} and {b,a} from 8 light threads here and 8 requests to the peer
--- (/multi-hammer), `rounds` each; `extra` more query arguments for the peer.
--- Returns the sets acquired, the errors here, the errors there, the overlaps.
function _M.opposite_orders(locks, peer, a, b, rounds, extra)
  local prefix = locks.prefix
  local threads = {}
  for i = 1, 8 do
    threads[#threads + 1] = h.spawn(_M.sets, locks, i % 2 == 0 and { a, b } or { b, a }, rounds, 20000)
  end
  for i = 1, 8 do
    local order = i % 2 == 0 and (a .. "," .. b) or (b .. "," .. a)
    threads[#threads + 1] = h.spawn(function()
      local res = assert(h.http(peer.port, "/multi-hammer?prefix=" .. ngx.escape_uri(prefix) .. "&keys=" ..
        ngx.escape_uri(order) .. "&rounds=" .. rounds .. "&wait=20000" .. (extra or ""), { timeout = 120000 }))
      assert(res.status == 200, "the peer's /multi-hammer answered " .. res.status .. ": " .. res.body)
      local got, errs = res.body:match("^(%d+) (%d+)")
      return tonumber(got), {}, tonumber(errs)
    end)
  end
  local total, here, there = 0, {}, 0
  for _, wait in ipairs(threads) do
    local got, errs, remote = wait()
    total = total + got
    for _, e in ipairs(errs) do here[#here + 1] = e end
    there = there + (remote or 0)
  end
  local overlaps = h.cmd(nil, "get", prefix .. "overlaps")
  return total, here, there, overlaps == ngx.null and 0 or tonumber(overlaps)
end

--- Load while the peer reloads (1 s into 2.5 s; requests in flight finish in
--- its old workers, the next ones go to the new): `here` light threads of this
--- worker call step(i, w), which holds a lease inside the witness w (the
--- thread's own) and returns true, or nil and why; `there` clients request
--- path(i) of the peer (h.hammered). Returns the leases taken, the calls begun
--- after the reload, and the failures.
function _M.through_reload(locks, peer, here, there, step, path)
  local failures, taken, w = {}, 0, {}
  local after = h.under_load(2.5, here + there, function(i)
    if i <= here then
      w[i] = w[i] or witness.new(h.redis_port, locks.prefix)
      local ok, err = step(i, w[i])
      if ok then taken = taken + 1 else failures[#failures + 1] = "here: " .. tostring(err) end
      return
    end
    local got, why = h.hammered(peer.port, path(i), 60000)
    if got then taken = taken + got else failures[#failures + 1] = why end
  end, 1, function() assert(peer.reload(), "the peer did not reload") end)
  for _, x in pairs(w) do witness.close(x) end
  return taken, after, failures
end

return _M
