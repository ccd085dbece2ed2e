-- Readers and writers of one key across nginx: a peer nginx's workers and this
-- one's light threads on the same keys, the peer reloaded under that load or a
-- worker of it SIGKILLed while it holds a reader's lease; the same load on a
-- Redis Cluster. The overlap witness (spec/witness.lua) counts a writer beside
-- anyone; what each kind of lease promises on its own is in rwlock_spec.lua.
local h = require "helpers"
local witness = require "witness"
local hammers = require "hammers"

local now = h.now
local MARK = "dlock!shared"

describe("shared locks across nginx", function()
  local peer
  setup(function() peer = h.start_nginx("spec-peer.conf", { WORKERS = 4 }) end)
  teardown(function() if peer then peer.stop() end end)

  it("never has a writer beside anyone, across 40 light threads and 4 workers of another nginx: readers side by side", function()
    local overlaps, shared = hammers.readers_writers(h.locks(), peer, 2, 80)
    assert.equal(ngx.null, overlaps)
    assert.is_true(shared > 0, "no two readers were ever inside at once")
    -- The witness works: it sees a writer beside a reader.
    local w = witness.new(h.redis_port, "probe:" .. h.unique())
    local t = h.spawn(witness.inside_shared, w, "x", true, 50)
    local w2 = witness.new(h.redis_port, w.prefix)
    witness.inside_shared(w2, "x", false, 1)
    t()
    assert.equal("1", h.cmd(nil, "get", w.prefix .. "overlaps"))
  end)

  it("never has a writer beside anyone while the other nginx reloads under load: no request fails, no key is left locked", function()
    local locks = h.locks()
    local prefix = locks.prefix
    local old = peer.workers()
    -- 12 light threads here and 8 clients of the peer (3 rounds a request), 80 % readers on 2 keys.
    local taken, after, failures = hammers.through_reload(locks, peer, 12, 8, function(_, w)
      local key = "k" .. math.random(2)
      local shared = math.random(100) <= 80
      local lease, err = locks:acquire(key, { ttl = 5000, wait = 10000, shared = shared })
      if not lease then return nil, err end
      witness.inside_shared(w, key, shared, 2)
      return lease:release()
    end, function() return "/rw-hammer?prefix=" .. ngx.escape_uri(prefix) .. "&keys=2&rounds=3&reads=80" end)
    assert.same({}, failures)
    assert.is_true(after > 0, "no request started after the reload")
    local overlaps = h.cmd(nil, "get", prefix .. "overlaps")
    local shared = tonumber(h.cmd(nil, "get", prefix .. "shared")) or 0
    io.stdout:write(string.format("rwlock: %d leases across a reload (%d calls after it), %s overlaps, readers side by side %d times\n",
      taken, after, overlaps == ngx.null and "0" or tostring(overlaps), shared))
    assert.equal(ngx.null, overlaps)
    assert.is_true(shared > 0, "no two readers were ever inside at once")
    -- Nothing left: no lock key, no readers, no line of waiters.
    assert.same({}, h.cmd(nil, "keys", prefix .. "k*"))
    -- The old workers exit (nothing of dlock keeps them), and the new ones answer.
    assert.is_true(peer.replaced(old, 4))
  end)

  it("gives back the reader lease of a SIGKILLed worker, and not the reader of the worker still alive", function()
    --- GET /crash-read?key=K on a connection kept open: { pid, token, sock }.
    local function hold(key)
      local pid, tok, sock = h.hold_open(peer.port, "/crash-read?key=" .. key, "^(%d+) (%S+)$")
      return { pid = tonumber(pid), token = tok, sock = sock }
    end
    local key = h.unique("rd")
    local rkey = "crash:" .. key
    local a = hold(key)
    local b
    for _ = 1, 20 do
      b = hold(key)
      if b.pid ~= a.pid then break end
      b.sock:close()
      h.cmd(nil, "zrem", rkey .. ":readers", b.token)
      b = nil
    end
    assert.is_truthy(b, "both requests landed in one worker")
    assert.equal(MARK, h.cmd(nil, "get", rkey))
    local t0 = now()
    assert(h.sh("kill -KILL " .. a.pid))
    -- The ttl is 60 s: only recovery takes the reader out this soon.
    local gone = h.eventually(3, function() return h.cmd(nil, "zscore", rkey .. ":readers", a.token) == ngx.null end)
    assert.is_true(gone, "the dead worker's reader is still in after 3 s")
    assert.is_true(now() - t0 < 1, "taken out after " .. (now() - t0) .. " s")
    a.sock:close()
    -- The live worker's reader still holds the key.
    assert.same({ b.token }, h.cmd(nil, "zrange", rkey .. ":readers", 0, -1))
    assert.equal(MARK, h.cmd(nil, "get", rkey))
    b.sock:close()
    h.cmd(nil, "del", rkey, rkey .. ":readers")
  end)
end)

describe("shared locks across nginx on redis.cluster", function()
  local fleet = hammers.cluster_fleet()

  it("never has a writer beside anyone across 2 nginx", function()
    local overlaps, shared = hammers.readers_writers(fleet.c.locks("rwc"), fleet.peer, 3, 80, fleet.c.peer_arg())
    assert.equal(ngx.null, overlaps)
    assert.is_true(shared > 0, "no two readers were ever inside at once")
  end)
end)

h.check_error_logs({
  "worker process %d+ exited on signal 9",  -- the SIGKILLed peer worker
})
