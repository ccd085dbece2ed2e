-- Several keys, all or nothing (locks:acquire_all): one lease holds every key
-- or none; the keys are plain lock keys (token, PX expiry), so single-key
-- holders, plain SET NX PX holders and node-redlock's multi-resource locks
-- exclude a set key by key; waiting takes the keys in one global order, so two
-- callers naming the keys in opposite orders never deadlock. On Redlock and
-- on a Cluster too; across nginx, through a reload and a SIGKILL, in
-- multikey_fleet_spec.lua.
local h = require "helpers"
local hammers = require "hammers"

local function get(k) return h.cmd(nil, "get", k) end
local function pttl(k) return h.cmd(nil, "pttl", k) end

describe("acquire_all", function()
  it("takes every key with one token and PX expiries, and returns one lease listing them in the caller's order", function()
    local locks = h.locks()
    local p = locks.prefix
    local lease = assert(locks:acquire_all({ "c", "a", "b" }, { ttl = 5000 }))
    assert.same({ "c", "a", "b" }, lease.keys)
    assert.equal("c", lease.key)
    assert.equal(5000, lease.ttl)
    assert.is_false(lease.shared)
    for _, k in ipairs({ "a", "b", "c" }) do
      assert.equal(lease.token, get(p .. k))
      local t = pttl(p .. k)
      assert.is_true(t > 4000 and t <= 5000, k .. " pttl " .. t)
    end
    assert.is_true(lease:valid())
    -- held() lists each key.
    local held = {}
    for _, l in ipairs(locks:held()) do if l.token == lease.token then held[#held + 1] = l.key end end
    table.sort(held)
    assert.same({ "a", "b", "c" }, held)
    assert.is_true(lease:release())
    for _, k in ipairs({ "a", "b", "c" }) do assert.equal(ngx.null, get(p .. k)) end
    assert.is_false(lease:valid())
    assert.same({ nil, "not_owner" }, { lease:release() })
  end)

  it("takes nothing when one key is held (by a plain SET NX PX holder): busy, with that holder's time left", function()
    local locks = h.locks()
    local p = locks.prefix
    assert.equal("OK", h.cmd(nil, "set", p .. "b", "someone-else", "NX", "PX", 3000))
    local lease, err, retry_after = locks:acquire_all({ "a", "b", "c" }, { ttl = 5000 })
    assert.is_nil(lease)
    assert.equal("busy", err)
    assert.is_true(retry_after > 2000 and retry_after <= 3000, tostring(retry_after))
    assert.equal(ngx.null, get(p .. "a"))
    assert.equal(ngx.null, get(p .. "c"))
    assert.equal("someone-else", get(p .. "b"))
    -- The holder's key is untouched, and once it is gone the set is taken.
    h.cmd(nil, "del", p .. "b")
    assert(locks:acquire_all({ "a", "b", "c" })):release()
  end)

  it("excludes single-key locks key by key, both ways, and hands a released key to the single waiter in line", function()
    local locks = h.locks()
    local set = assert(locks:acquire_all({ "a", "b" }, { ttl = 5000 }))
    local l1, e1 = locks:acquire("b")
    assert.is_nil(l1)
    assert.equal("busy", e1)
    local single = assert(locks:acquire("c", { ttl = 5000 }))
    local l2, err = locks:acquire_all({ "c", "d" })
    assert.is_nil(l2)
    assert.equal("busy", err)
    assert.equal(ngx.null, get(locks.prefix .. "d"))
    assert(single:release())
    -- A single waiter in line for b gets it when the set is released.
    local t = ngx.thread.spawn(function() return locks:acquire("b", { ttl = 5000, wait = 3000 }) end)
    ngx.sleep(0.1)
    assert(set:release())
    local ok, got, gerr = ngx.thread.wait(t)
    assert(ok)
    assert.is_truthy(got, gerr)
    assert(got:release())
  end)

  it("does not cut in front of a single-key waiter in line for a free key", function()
    local locks = h.locks()
    local holder = assert(locks:acquire("b", { ttl = 5000 }))
    local t = ngx.thread.spawn(function()
      local l, err = locks:acquire("b", { ttl = 5000, wait = 3000 })
      if not l then return nil, err end
      ngx.sleep(0.2)
      assert(l:release())
      return true
    end)
    ngx.sleep(0.05)
    assert(holder:release())
    -- b is handed to the waiter; the set waits behind it, taking nothing meanwhile.
    local set, err = locks:acquire_all({ "a", "b" }, { ttl = 5000, wait = 3000 })
    assert.is_truthy(set, err)
    assert.same({ true, true }, { ngx.thread.wait(t) })
    assert(set:release())
  end)

  it("extends every key, and says not_owner (releasing the rest) when one is gone", function()
    local locks = h.locks()
    local p = locks.prefix
    local lease = assert(locks:acquire_all({ "a", "b" }, { ttl = 1000 }))
    assert.is_true(lease:extend(20000))
    assert.equal(20000, lease.ttl)
    for _, k in ipairs({ "a", "b" }) do assert.is_true(pttl(p .. k) > 19000) end
    h.cmd(nil, "del", p .. "b")
    assert.same({ nil, "not_owner" }, { lease:extend() })
    assert.equal(ngx.null, get(p .. "a"))
    assert.is_false(lease:valid())
    assert.same({ nil, "dlock: ttl must be a positive integer of ms, got -5" }, { lease:extend(-5) })
  end)

  it("gives one fence per key, each above every earlier holder's of that key", function()
    local locks = h.locks({ fencing = true })
    local first = assert(locks:acquire("b"))
    local fb = first.fence
    assert(first:release())
    local lease = assert(locks:acquire_all({ "a", "b" }))
    assert.equal(2, #lease.fences)
    assert.equal(lease.fences[1], lease.fence)
    assert.is_true(lease.fences[2] > fb)
    assert(lease:release())
    local again = assert(locks:acquire_all({ "b", "a" }))
    assert.is_true(again.fences[1] > lease.fences[2])
    assert.is_true(again.fences[2] > lease.fences[1])
    assert(again:release())
  end)

  it("renews every key with renew = true, and tells on_lost once when one is taken away", function()
    local locks = h.locks()
    local p = locks.prefix
    local told = {}
    local lease = assert(locks:acquire_all({ "a", "b" }, { ttl = 300, renew = true,
      on_lost = function(l, why) told[#told + 1] = { l, why } end }))
    ngx.sleep(0.8)
    assert.equal(lease.token, get(p .. "a"))
    assert.equal(lease.token, get(p .. "b"))
    assert.is_true(lease:valid())
    h.cmd(nil, "set", p .. "b", "thief", "PX", 5000)
    ngx.sleep(0.4)
    assert.equal(1, #told)
    assert.equal(lease, told[1][1])
    assert.matches("^b: ", told[1][2])
    assert.is_false(lease:valid())
    assert.same({ nil, "not_owner" }, { lease:release() })
    assert.equal(ngx.null, get(p .. "a"))
    assert.equal("thief", get(p .. "b"))
  end)

  it("waits taking the keys in sorted order, holding those before the busy one, then renews them all; " ..
     "times out holding nothing", function()
    local locks = h.locks()
    local p = locks.prefix
    local holder = assert(locks:acquire("b", { ttl = 5000 }))
    local seen_a
    local t = ngx.thread.spawn(function()
      ngx.sleep(0.3)
      seen_a = get(p .. "a")
      assert(holder:release())
    end)
    local t0 = h.now()
    local lease, err = locks:acquire_all({ "b", "a" }, { ttl = 1000, wait = 3000 })
    assert.is_truthy(lease, err)
    assert.is_true(h.now() - t0 >= 0.29)
    assert.equal(lease.token, seen_a)   -- a (before b in the order) was held while waiting for b
    assert.is_true(pttl(p .. "a") > 900)
    assert.is_true(pttl(p .. "b") > 900)
    assert.is_true(lease:valid())
    ngx.thread.wait(t)
    -- Held by the set: a waiter with a short wait times out, having taken nothing (c comes before d).
    local l2, err2, retry_after = locks:acquire_all({ "d", "c", "b" }, { wait = 100 })
    assert.is_nil(l2)
    assert.equal("timeout", err2)
    assert.is_number(retry_after)
    assert.equal(ngx.null, get(p .. "c"))
    assert.equal(ngx.null, get(p .. "d"))
    assert(lease:release())
  end)

  it("sends a set back to waiting when a key it held ran out during the wait, and takes it again", function()
    local locks = h.locks()
    local p = locks.prefix
    local holder = assert(locks:acquire("b", { ttl = 5000 }))
    local t = ngx.thread.spawn(function()
      -- a is held by the waiting set (ttl 200): it runs out, and someone else takes it for a while.
      ngx.sleep(0.35)
      assert.equal(ngx.null, get(p .. "a"))
      local other = assert(locks:acquire("a", { ttl = 5000 }))
      assert(holder:release())
      ngx.sleep(0.2)
      assert(other:release())
    end)
    local t0 = h.now()
    local lease, err = locks:acquire_all({ "a", "b" }, { ttl = 200, wait = 3000 })
    assert.is_truthy(lease, err)
    assert.is_true(h.now() - t0 >= 0.5)
    assert.equal(lease.token, get(p .. "a"))
    assert.equal(lease.token, get(p .. "b"))
    assert(ngx.thread.wait(t))
    assert(lease:release())
  end)

  it("checks its keys and options, naming the bad value", function()
    local locks = h.locks()
    local function err_of(...) return select(2, locks:acquire_all(...)) end
    assert.equal('dlock: acquire_all needs a list of keys, got "a"', err_of("a"))
    assert.equal("dlock: acquire_all needs at least one key, got a table", err_of({}))
    local many = {}
    for i = 1, 65 do many[i] = "k" .. i end
    assert.equal("dlock: acquire_all takes at most 64 keys, got 65", err_of(many))
    assert.equal('dlock: acquire_all\'s keys must be distinct: keys[3] repeats an earlier key, got "a"',
      err_of({ "a", "b", "a" }))
    assert.equal("dlock: keys[2] must be a string, got 5", err_of({ "a", 5 }))
    assert.equal('dlock: keys[1] must not be empty, got ""', err_of({ "" }))
    assert.matches("^dlock: acquire_all's keys must be a list", err_of({ "a", x = "b" }))
    assert.equal("dlock: shared = true is refused by acquire_all: a set of keys is taken exclusive (take each key " ..
      "with acquire(key, { shared = true }) to read it), got true", err_of({ "a" }, { shared = true }))
    assert.equal("dlock: ttl must be a positive integer of ms, got -5", err_of({ "a" }, { ttl = -5 }))
    assert.matches("bogus", err_of({ "a" }, { bogus = 1 }))
    assert.matches("^dlock: acquire_all is refused by reentrant factories", select(2, h.locks({ reentrant = true }):acquire_all({ "a" })))
    -- Nothing was taken by any of these.
    assert.same({}, h.cmd(nil, "keys", locks.prefix .. "*"))
    -- shared = false is a lock's default, accepted.
    assert(locks:acquire_all({ "a" }, { shared = false })):release()
  end)

  it("releases every key of a renewed set whose timer ended without releasing it", function()
    local locks = h.locks()
    local p = locks.prefix
    local took, returned
    assert(ngx.timer.at(0, function()
      took = assert(locks:acquire_all({ "a", "b" }, { ttl = 300, renew = true })).token
      ngx.sleep(0.5)  -- renewed while the timer runs
      returned = true
    end))
    ngx.sleep(0.45)
    assert.is_string(took)
    assert.equal(took, get(p .. "a"))
    assert.equal(took, get(p .. "b"))
    assert.is_true(h.eventually(1, function() return returned end))
    -- Released by the watchdog soon after, well before the ttl would have run out.
    assert.is_true(h.eventually(0.25, function() return get(p .. "a") == ngx.null and get(p .. "b") == ngx.null end))
  end)
end)

describe("acquire_all and node-redlock's multi-resource lock", function()
  local modules = h.root .. "/bench/peer/node_modules"
  local have = h.sh("test -d " .. modules .. "/redlock && command -v node >/dev/null")

  --- node-redlock takes keys (one acquire, no retries) and holds them hold_ms: a function returning its output so far.
  local function redlock(keys, hold_ms)
    local out = h.prefix .. "/logs/redlock-" .. ngx.now() .. "-" .. math.random(1e9) .. ".out"
    assert(h.sh("NODE_PATH=" .. modules .. " node " .. h.root .. "/spec/tools/redlock-multi.js " .. h.redis_port .. " " ..
      hold_ms .. " " .. table.concat(keys, " ") .. " > " .. out .. " 2>&1 &"))
    return function() return h.read_file(out) or "" end
  end

  it("excludes each other on shared keys, both ways", function()
    if not have then
      pending("node or bench/peer/node_modules (npm ci there) is missing")
      return
    end
    local locks = h.locks()
    local p = locks.prefix
    -- node-redlock holds {a, b}: a set naming b is busy and takes nothing; waiting, it gets them once released.
    local node = redlock({ p .. "a", p .. "b" }, 600)
    assert.is_true(h.eventually(5, function() return node():match("^held ") ~= nil end), node())
    local value = node():match("^held (%S+)")
    assert.equal(value, get(p .. "b"))
    local l, err = locks:acquire_all({ "c", "b" })
    assert.is_nil(l)
    assert.equal("busy", err)
    assert.equal(ngx.null, get(p .. "c"))
    local t0 = h.now()
    local set = assert(locks:acquire_all({ "b", "a" }, { wait = 5000 }))
    assert.is_true(h.now() - t0 > 0.3)
    assert.matches("released", node())
    -- We hold {a, b}: node-redlock's {b, c} is refused, and takes nothing.
    local node2 = redlock({ p .. "c", p .. "b" }, 0)
    assert.is_true(h.eventually(5, function() return node2() ~= "" end))
    assert.equal("busy\n", node2())
    assert.equal(ngx.null, get(p .. "c"))
    assert(set:release())
  end)
end)

describe("acquire_all on redis.redlock", function()
  local r
  setup(function() r = h.start_redlock(3) end)
  teardown(function() if r then r.stop() end end)

  local function make()
    return assert(require("resty.dlock").new({ dict = "dlock", prefix = h.unique("mkr"),
      redis = { redlock = r.addrs, connect_timeout = 200, read_timeout = 500 } }))
  end
  local function on(i, ...) return h.cmd(r.ports[i], ...) end

  it("takes the set on every master, or on a majority; one master holding a key does not stop it, two do", function()
    local locks = make()
    local p = locks.prefix
    local set = assert(locks:acquire_all({ "a", "b" }, { ttl = 5000 }))
    for i = 1, 3 do
      assert.equal(set.token, on(i, "get", p .. "a"))
      assert.equal(set.token, on(i, "get", p .. "b"))
    end
    assert.is_true(set:extend(9000))
    assert.is_true(on(2, "pttl", p .. "b") > 8000)
    assert.is_true(set:release())
    for i = 1, 3 do assert.equal(ngx.null, on(i, "get", p .. "a")) end
    -- b held by someone else on one master: a majority still takes the set.
    on(1, "set", p .. "b", "other", "PX", 5000)
    set = assert(locks:acquire_all({ "a", "b" }, { ttl = 5000 }))
    assert.equal(ngx.null, on(1, "get", p .. "a"))   -- all or nothing on each master too
    assert.equal(set.token, on(2, "get", p .. "a"))
    assert.is_true(set:release())
    -- On two masters: no majority, busy, and nothing left behind on any master.
    on(2, "set", p .. "b", "other", "PX", 5000)
    local l, err, retry_after = locks:acquire_all({ "a", "b" })
    assert.is_nil(l)
    assert.equal("busy", err)
    assert.is_true(retry_after > 4000 and retry_after <= 5000, tostring(retry_after))
    for i = 1, 3 do assert.equal(ngx.null, on(i, "get", p .. "a")) end
    assert.equal(ngx.null, on(3, "get", p .. "b"))
  end)

  it("never deadlocks nor overlaps with {a,b} and {b,a} from 8 light threads, none timing out", function()
    local locks = make()
    local threads = {}
    for i = 1, 8 do
      threads[i] = ngx.thread.spawn(hammers.sets, locks, i % 2 == 0 and { "a", "b" } or { "b", "a" }, 10, 20000)
    end
    local total = 0
    for _, t in ipairs(threads) do
      local ok, got, errs = ngx.thread.wait(t)
      assert(ok, got)
      assert.same({}, errs)
      total = total + got
    end
    assert.equal(80, total)
    assert.equal(ngx.null, h.cmd(nil, "get", locks.prefix .. "overlaps"))
  end)
end)

describe("acquire_all on redis.cluster", function()
  local fleet = hammers.cluster_fleet()

  local function make(opts) return fleet.c.locks("mkc", opts) end
  local function cget(k) return h.cmd(fleet.c.slot_owner(k), "get", k) end

  it("takes keys of one slot (a hash tag) in one script, keys of different slots in order, all or nothing", function()
    local locks = make({ fencing = true })
    local p = locks.prefix
    -- One slot.
    local set = assert(locks:acquire_all({ "{t}x", "{t}y" }, { ttl = 5000 }))
    assert.equal(set.token, cget(p .. "{t}x"))
    assert.equal(set.token, cget(p .. "{t}y"))
    assert.equal(2, #set.fences)
    assert(set:release())
    -- Different slots, on different masters: a key, then one of another master (b), then any (c).
    local a, b = "a", nil
    for i = 1, 50 do
      if fleet.c.slot_owner(p .. "b" .. i) ~= fleet.c.slot_owner(p .. a) then b = "b" .. i break end
    end
    assert.is_truthy(b, "no key on another master than " .. a)
    local cc = "c"
    local single = assert(locks:acquire(b, { ttl = 5000 }))
    local l, err = locks:acquire_all({ a, b, cc })
    assert.is_nil(l)
    assert.equal("busy", err)
    assert.equal(ngx.null, cget(p .. a))
    assert.equal(ngx.null, cget(p .. cc))
    assert(single:release())
    set = assert(locks:acquire_all({ cc, b, a }, { ttl = 5000 }))
    assert.same({ cc, b, a }, set.keys)
    for _, k in ipairs({ a, b, cc }) do assert.equal(set.token, cget(p .. k)) end
    assert.is_true(set:extend(8000))
    assert.is_true(h.cmd(fleet.c.slot_owner(p .. a), "pttl", p .. a) > 7000)
    assert(set:release())
    for _, k in ipairs({ a, b, cc }) do assert.equal(ngx.null, cget(p .. k)) end
  end)

  for _, case in ipairs({ { "one slot", "{t}a", "{t}b" }, { "different slots", "a", "b" } }) do
    it("never deadlocks nor overlaps with {a,b} and {b,a} across 2 nginx (" .. case[1] .. ")", function()
      local locks = make()
      local rounds = 15
      local total, here, there, overlaps = hammers.opposite_orders(locks, fleet.peer, case[2], case[3], rounds,
        fleet.c.peer_arg())
      ngx.log(ngx.NOTICE, "multikey cluster (", case[1], "): ", total, " sets, ", overlaps, " overlaps")
      assert.same({}, here)
      assert.equal(0, there)
      assert.equal(16 * rounds, total)
      assert.equal(0, overlaps)
    end)
  end
end)

h.check_error_logs({
  { "dlock: lease on b lost: the key is gone from Redis, or someone else's", max = 1 },  -- the key taken away on purpose
})
