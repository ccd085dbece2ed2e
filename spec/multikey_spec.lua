-- Several keys, all or nothing (locks:acquire_all): one lease holds every key
-- or none; the keys are plain lock keys (token, PX expiry), so single-key
-- holders, plain SET NX PX holders and node-redlock's multi-resource locks
-- exclude a set key by key; waiting never holds a key, so two callers naming
-- the keys in opposite orders never deadlock.
local h = require "helpers"
local witness = require "multiwitness"

local function get(k) return h.cmd(nil, "get", k) end
local function pttl(k) return h.cmd(nil, "pttl", k) end

--- n rounds of acquire_all(keys) in this worker, witnessed: acquired, errors.
local function local_hammer(locks, keys, rounds, wait)
  local w = witness.new(h.redis_port, locks.prefix)
  local got, errs = 0, {}
  for _ = 1, rounds do
    local lease, err = locks:acquire_all(keys, { ttl = 5000, wait = wait })
    if lease then
      got = got + 1
      witness.inside(w, keys, 1)
      assert(lease:release())
    else
      errs[#errs + 1] = err
    end
  end
  witness.close(w)
  return got, errs
end

--- {a,b} and {b,a} from light threads here and from the 4 workers of the peer,
--- `rounds` each: total acquired, errors here, errors there, overlaps.
local function opposite_orders(locks, peer, a, b, rounds, cluster)
  local prefix = locks.prefix
  local threads = {}
  for i = 1, 8 do
    local keys = i % 2 == 0 and { a, b } or { b, a }
    threads[#threads + 1] = ngx.thread.spawn(local_hammer, locks, keys, rounds, 20000)
  end
  for i = 1, 8 do
    local order = i % 2 == 0 and (a .. "," .. b) or (b .. "," .. a)
    threads[#threads + 1] = ngx.thread.spawn(function()
      local res = assert(h.http(peer.port, "/multi-hammer?prefix=" .. ngx.escape_uri(prefix) .. "&keys=" ..
        ngx.escape_uri(order) .. "&rounds=" .. rounds .. "&wait=20000" .. (cluster or ""), { timeout = 120000 }))
      assert.equal(200, res.status)
      local got, errs = res.body:match("^(%d+) (%d+)")
      return tonumber(got), {}, tonumber(errs)
    end)
  end
  local total, here, there = 0, {}, 0
  for _, t in ipairs(threads) do
    local ok, got, errs, remote = ngx.thread.wait(t)
    assert(ok, got)
    total = total + got
    for _, e in ipairs(errs) do here[#here + 1] = e end
    there = there + (remote or 0)
  end
  local overlaps = h.cmd(nil, "get", prefix .. "overlaps")
  return total, here, there, overlaps == ngx.null and 0 or tonumber(overlaps)
end

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

  it("waits in line for the busy key holding nothing else, then takes the set; times out taking nothing", function()
    local locks = h.locks()
    local p = locks.prefix
    local holder = assert(locks:acquire("b", { ttl = 5000 }))
    local seen_a
    local t = ngx.thread.spawn(function()
      ngx.sleep(0.15)
      seen_a = get(p .. "a")
      assert(holder:release())
    end)
    local t0 = h.now()
    local lease, err = locks:acquire_all({ "a", "b" }, { ttl = 5000, wait = 3000 })
    assert.is_truthy(lease, err)
    assert.is_true(h.now() - t0 >= 0.14)
    assert.equal(ngx.null, seen_a)
    ngx.thread.wait(t)
    -- Held by the set: a waiter with a short wait times out, having taken nothing.
    local l2, err2, retry_after = locks:acquire_all({ "c", "b" }, { wait = 100 })
    assert.is_nil(l2)
    assert.equal("timeout", err2)
    assert.is_number(retry_after)
    assert.equal(ngx.null, get(p .. "c"))
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

h.check_error_logs({ "lease on b lost", "outlived the request or timer" })
