-- Several keys, all or nothing, across nginx: the same sets named in opposite
-- orders from this worker and from a peer nginx's four workers, the peer
-- reloaded under that load, and a set whose worker is SIGKILLed while it holds
-- it. The overlap witness (spec/witness.lua) counts two sets sharing a key;
-- what acquire_all promises on its own, and on each topology, is in
-- multikey_spec.lua.
local h = require "helpers"
local witness = require "witness"
local hammers = require "hammers"

local function get(k) return h.cmd(nil, "get", k) end

--- GET /crash-hold-all?keys=... on a connection kept open: { pid, token, sock }.
local function crash_hold(port, keys)
  local pid, tok, sock = h.hold_open(port, "/crash-hold-all?keys=" .. table.concat(keys, ","), "^(%d+) (%S+)$")
  return { pid = tonumber(pid), token = tok, sock = sock }
end

describe("acquire_all across two nginx (standalone)", function()
  local peer
  setup(function() peer = h.start_nginx("spec-peer.conf", { WORKERS = 4 }) end)
  teardown(function() if peer then peer.stop() end end)

  it("never deadlocks nor overlaps with {a,b} and {b,a} taken from 16 clients in 2 nginx, none timing out", function()
    local locks = h.locks()
    local rounds = 25
    local total, here, there, overlaps = hammers.opposite_orders(locks, peer, "a", "b", rounds)
    ngx.log(ngx.NOTICE, "multikey: ", total, " sets taken in opposite orders, ", overlaps, " overlaps")
    assert.same({}, here)
    assert.equal(0, there)
    assert.equal(16 * rounds, total)
    assert.equal(0, overlaps)
    -- The witness itself works: it sees two holders when there are two.
    local w = witness.new(h.redis_port, locks.prefix .. "probe:")
    assert(w.red:incr(locks.prefix .. "probe:in:a"))
    witness.inside_all(w, { "a" }, 1)
    assert.equal("1", h.cmd(nil, "get", locks.prefix .. "probe:overlaps"))
    witness.close(w)
  end)

  it("never lets two sets share a key while the other nginx reloads under load: no request fails, no key is left locked", function()
    local locks = h.locks()
    local prefix = locks.prefix
    local old = peer.workers()
    -- {a,b}, {b,a}, {b,c} and {c,a} from 8 light threads here and 8 clients of the peer (3 sets a request).
    local sets = { { "a", "b" }, { "b", "a" }, { "b", "c" }, { "c", "a" } }
    local taken, after, failures = hammers.through_reload(locks, peer, 8, 8, function(i, w)
      local keys = sets[i % 4 + 1]
      local lease, err = locks:acquire_all(keys, { ttl = 5000, wait = 20000 })
      if not lease then return nil, err end
      witness.inside_all(w, keys, 1)
      return lease:release()
    end, function(i)
      return "/multi-hammer?prefix=" .. ngx.escape_uri(prefix) .. "&keys=" .. table.concat(sets[i % 4 + 1], ",") ..
        "&rounds=3&wait=20000"
    end)
    local overlaps = h.cmd(nil, "get", prefix .. "overlaps")
    ngx.log(ngx.NOTICE, "multikey: ", taken, " sets across a reload (", after, " calls after it), ", overlaps == ngx.null and 0 or overlaps, " overlaps")
    assert.same({}, failures)
    assert.is_true(after > 0, "no request started after the reload")
    assert.equal(ngx.null, overlaps)
    -- Nothing left: no lock key, no line of waiters.
    assert.same({}, h.cmd(nil, "keys", prefix .. "[abc]*"))
    -- The old workers exit (nothing of dlock keeps them), and the new ones answer.
    assert.is_true(peer.replaced(old, 4))
  end)

  it("releases every key of a set whose worker was SIGKILLed, within a second", function()
    local prefix = h.unique("mk")
    local held = crash_hold(peer.port, { prefix .. "a", prefix .. "b" })
    assert.equal(held.token, get("crash:" .. prefix .. "a"))
    assert.equal(held.token, get("crash:" .. prefix .. "b"))
    local t0 = h.now()
    assert(h.sh("kill -KILL " .. held.pid))
    -- The ttl is 60 s: only recovery frees these keys this soon.
    assert.is_true(h.eventually(3, function()
      return get("crash:" .. prefix .. "a") == ngx.null and get("crash:" .. prefix .. "b") == ngx.null
    end), "the dead worker's set is still taken after 3 s")
    local freed = h.now() - t0
    assert.is_true(freed < 1, "freed after " .. freed .. " s")
    held.sock:close()
  end)
end)

h.check_error_logs({
  "worker process %d+ exited on signal 9",  -- the SIGKILLed peer worker
})
