-- redis.redlock under the faults node-redlock and Redisson document: a master
-- refused, paused, restarted without persistence, slow; with waiters, sets,
-- renewals and gateway guards (spec/redlock_spec.lua has the topology's basics).
local h = require "helpers"
local dlock = require "resty.dlock"

describe("redis.redlock under faults", function()
  local r

  setup(function() r = h.start_redlock(3) end)
  teardown(function() if r then r.stop() end end)

  -- Every master runs again after each test, whatever the test did to it.
  after_each(function()
    for i, n in ipairs(r.nodes) do
      n.signal("CONT")
      if not h.listening(r.ports[i]) then
        os.remove(n.dir .. "/redis.pid")
        r.nodes[i] = h.start_redis(r.ports[i])
      end
    end
  end)

  local function redis(extra)
    local o = { redlock = r.addrs, connect_timeout = 50, read_timeout = 200 }
    for k, v in pairs(extra or {}) do o[k] = v end
    return o
  end

  local function locks(prefix, dict, extra)
    return assert(dlock.new({ dict = dict or "dlock", prefix = prefix, redis = redis(extra) }))
  end

  --- Master i crashes (SIGKILL; its data gone: the specs' servers run without persistence).
  local function down(i)
    h.sh("kill -KILL " .. r.nodes[i].pid)
    assert(h.eventually(2, function() return not h.listening(r.ports[i]) end))
  end
  --- Start master i again on its port, empty.
  local function up(i)
    os.remove(r.nodes[i].dir .. "/redis.pid")   -- a killed server leaves its pid file behind
    r.nodes[i] = h.start_redis(r.ports[i])
  end
  --- Master i restarted without persistence.
  local function restart(i) down(i) up(i) end

  local function values(key)
    local out = {}
    for i, port in ipairs(r.ports) do out[i] = h.cmd(port, "get", key) end
    return out
  end

  it("keeps a lease exclusive when its masters restart without persistence one at a time, more than a ttl apart", function()
    -- README, What each topology guarantees: under Redlock a lock is lost when "a majority restarts without
    -- persistence within a ttl". Here one master restarts, the lease is extended for more than a ttl, and a
    -- second master restarts: no two restarts within any ttl. The extends put the key back on the first.
    local prefix = h.unique("rlf_restart")
    local a, b = locks(prefix, "dlock"), locks(prefix, "dlock_other")
    local lease = assert(a:acquire("k", { ttl = 1500 }))
    assert.same({ lease.token, lease.token, lease.token }, values(prefix .. "k"))
    restart(3)
    for _ = 1, 4 do
      ngx.sleep(0.5)
      assert.is_true(lease:extend(1500))
    end
    -- The extends put the key back on the restarted master.
    assert.same({ lease.token, lease.token, lease.token }, values(prefix .. "k"))
    -- 2 s (more than the ttl) after the first restart, another master restarts.
    restart(2)
    assert.is_true(lease:valid())
    -- Connections pooled before the restart are dead: acquires meet them until all three masters answer.
    assert.is_true(h.eventually(2, function()
      local w = b:acquire("warm", { wait = 0 })
      local all = w ~= nil and h.cmd(r.ports[2], "get", prefix .. "warm") == w.token
      if w then w:release() end
      return all
    end))
    local second, err = b:acquire("k", { ttl = 1500, wait = 0 })
    local stolen = second ~= nil
    if second then second:release() end
    lease:release()
    assert.is_false(stolen, "a second lease was given while the first is valid (masters now hold " ..
      "the first lease's key on 1 of 3: its extends never put it back on the restarted master); err " .. tostring(err))
  end)

  it("puts the key back on a restarted master when the watchdog renews (renew = true), and when a set is extended", function()
    local prefix = h.unique("rlf_rerenew")
    local a = locks(prefix)
    local lease = assert(a:acquire("w", { ttl = 600, renew = true }))
    local set = assert(a:acquire_all({ "s1", "s2" }, { ttl = 5000 }))
    restart(3)
    assert.is_true(h.eventually(2, function()
      ngx.sleep(0.05)
      return h.cmd(r.ports[3], "get", prefix .. "w") == lease.token
    end), "the watchdog's renewals did not put the key back on the restarted master")
    -- Connections pooled before the restart are dead: an extend may meet one on master 3 (a majority still says yes).
    assert.is_true(h.eventually(2, function()
      assert.is_true(set:extend(5000))
      return h.cmd(r.ports[3], "get", prefix .. "s1") == set.token and h.cmd(r.ports[3], "get", prefix .. "s2") == set.token
    end), "the set's extend did not put its keys back on the restarted master")
    assert.is_true(lease:valid())
    assert.is_true(lease:release())
    assert.is_true(set:release())
  end)

  it("puts nothing back once the lease's validity ran out: the extend says not_owner", function()
    -- Past its validity the key may have been someone else's meanwhile (taken and given back): an extend that put it
    -- back would say yes across that gap.
    local prefix = h.unique("rlf_late")
    local a = locks(prefix)
    local lease = assert(a:acquire("l", { ttl = 200 }))
    ngx.sleep(0.3)
    assert.same({ ngx.null, ngx.null, ngx.null }, values(prefix .. "l"))
    assert.same({ nil, "not_owner" }, { lease:extend(5000) })
    assert.same({ ngx.null, ngx.null, ngx.null }, values(prefix .. "l"))
  end)

  it("keeps waiting (wait > 0) while one master is paused and the holder keeps the key on a master that answers", function()
    -- The holder took its lease while master 3 was down (a minority failing): its key is on masters 1 and 2.
    -- Master 3 comes back, master 1 pauses: a waiter sees busy on 2, free on 3, nothing from 1.
    local prefix = h.unique("rlf_wait")
    local a, b = locks(prefix, "dlock"), locks(prefix, "dlock_other")
    assert(a:acquire("warm")):release()
    down(3)
    local lease = assert(a:acquire("w", { ttl = 3000 }))
    up(3)
    ngx.sleep(0.2)   -- past the 100 ms a refused connect is remembered
    assert(a:acquire("warm")):release()   -- all three answer again
    r.nodes[1].signal("STOP")
    local releaser = ngx.thread.spawn(function()
      ngx.sleep(0.6)
      return lease:release()
    end)
    local took, got, err = h.elapsed(function() return b:acquire("w", { ttl = 3000, wait = 4000 }) end)
    local rel_ok, released = ngx.thread.wait(releaser)
    r.nodes[1].signal("CONT")
    if got then got:release() end
    assert.is_true(rel_ok and released == true, "the holder's release with one master paused: " .. tostring(released))
    assert.is_nil(err, "the waiter gave up after " .. string.format("%.3f", took) .. " s of a 4 s wait: " .. tostring(err))
    assert.is_table(got)
  end)

  it("gives an acquire that took longer than its ttl back on every master (validity ran out), and retries within wait", function()
    local prefix = h.unique("rlf_slow")
    local a = locks(prefix, "dlock", { read_timeout = 2000 })
    assert(a:acquire("warm")):release()
    local function slow_once(ms)
      r.nodes[1].signal("STOP")
      ngx.timer.at(ms / 1000, function() r.nodes[1].signal("CONT") end)
    end
    slow_once(400)
    local took, none, err = h.elapsed(function() return a:acquire("s", { ttl = 200, wait = 0 }) end)
    assert.is_nil(none)
    assert.is_string(err)
    assert.matches("127.0.0.1", err, 1, true)
    assert.is_true(took >= 0.35, "took " .. took)
    assert.same({ ngx.null, ngx.null, ngx.null }, values(prefix .. "s"))
    -- Waiting: the next attempt is quick, and the lease is valid for the ttl less the drift.
    slow_once(400)
    local lease, werr = a:acquire("s2", { ttl = 300, wait = 2000 })
    assert.is_nil(werr)
    assert.is_table(lease)
    assert.is_true(lease:valid())
    lease:release()
  end)

  it("extends on the two masters left when one is down, and says which masters failed when two are", function()
    local prefix = h.unique("rlf_ext")
    local a = locks(prefix)
    local lease = assert(a:acquire("e", { ttl = 1000 }))
    down(1)
    assert.is_true(lease:extend(3000))
    assert.is_true(lease:valid())
    down(2)
    local ok, err = lease:extend(3000)
    assert.is_nil(ok)
    assert.is_string(err)
    assert.matches(r.addrs[1], err, 1, true)
    assert.matches(r.addrs[2], err, 1, true)
    -- Still valid for the 3000 ms the last confirmed extend gave it, less the drift allowance: then not.
    assert.is_true(lease:valid())
    ngx.sleep(3.0)
    assert.is_false(lease:valid())
    up(1) up(2)
  end)

  it("says the extend took too long (not 'extended on 3 of 3 masters, a majority is 2') when a slow master outlasts the ttl", function()
    local prefix = h.unique("rlf_slowext")
    local a = locks(prefix, "dlock", { read_timeout = 2000 })
    local lease = assert(a:acquire("x", { ttl = 5000 }))
    r.nodes[1].signal("STOP")
    ngx.timer.at(0.4, function() r.nodes[1].signal("CONT") end)
    local ok, err = lease:extend(200)
    assert.is_nil(ok)
    lease:release()
    assert.is_string(err)
    assert.is_nil(err:find("extended on 3 of 3 masters, a majority is 2", 1, true), "err: " .. err)
    assert.matches("extended on a majority, but only after %d+ ms of a 200 ms ttl", err)
  end)

  it("renew = true with two masters down: on_lost is called and valid() is false once the validity ran out", function()
    local prefix = h.unique("rlf_renew")
    local a = locks(prefix)
    local why
    local co = ngx.thread.spawn(function()
      local lease = assert(a:acquire("r", { ttl = 600, renew = true, on_lost = function(_, w) why = w end }))
      down(1)
      ngx.sleep(0.5)
      local still = lease:valid()   -- one master down: renewed on the two left
      down(2)
      ngx.sleep(1.2)
      return still, lease:valid(), lease
    end)
    local ok, still, later, lease = ngx.thread.wait(co)
    assert.is_true(ok)
    assert.is_true(still)
    assert.is_false(later)
    h.eventually(1, function() ngx.sleep(0.05) return why ~= nil end)
    assert.is_string(why)
    up(1) up(2)
    lease:release()
  end)

  it("releases with one master down: true, the key deleted on the other two; with two down an error naming them", function()
    local prefix = h.unique("rlf_rel")
    local a = locks(prefix)
    local lease = assert(a:acquire("d", { ttl = 5000 }))
    down(1)
    assert.is_true(lease:release())
    assert.equal(0, h.cmd(r.ports[2], "exists", prefix .. "d"))
    assert.equal(0, h.cmd(r.ports[3], "exists", prefix .. "d"))
    up(1)
    local l2 = assert(a:acquire("d2", { ttl = 5000 }))
    down(1) down(2)
    local ok, err = l2:release()
    assert.is_nil(ok)
    assert.is_string(err)
    assert.matches(r.addrs[1], err, 1, true)
    assert.matches(r.addrs[2], err, 1, true)
    up(1) up(2)
  end)

  it("acquire_all takes a set on the two masters that answer while one is paused, and leaves nothing behind", function()
    local prefix = h.unique("rlf_all")
    local a = locks(prefix)
    assert(a:acquire("warm")):release()
    r.nodes[1].signal("STOP")
    local took, set, err = h.elapsed(function() return a:acquire_all({ "a", "b" }, { ttl = 5000 }) end)
    assert.is_nil(err)
    assert.is_table(set)
    assert.is_true(took < 0.5, "took " .. took)
    assert.is_true(set:valid())
    assert.equal(set.token, h.cmd(r.ports[2], "get", prefix .. "a"))
    assert.equal(set.token, h.cmd(r.ports[3], "get", prefix .. "b"))
    assert.is_true(set:release())
    r.nodes[1].signal("CONT")
    assert.is_true(h.eventually(2, function()
      return h.cmd(r.ports[1], "exists", prefix .. "a") == 0 and h.cmd(r.ports[2], "exists", prefix .. "a") == 0
        and h.cmd(r.ports[3], "exists", prefix .. "b") == 0
    end))
  end)

  it("acquire_all keeps waiting (wait > 0) while one master is paused and another holds a key of the set on a master that answers", function()
    local prefix = h.unique("rlf_allw")
    local a = locks(prefix)
    assert(a:acquire("warm")):release()
    -- Someone else's key b on master 2 alone (a lease taken while master 3 was down, whose master 1 now pauses).
    assert.equal("OK", h.cmd(r.ports[2], "set", prefix .. "b", "someone", "px", 600))
    r.nodes[1].signal("STOP")
    local took, set, err = h.elapsed(function() return a:acquire_all({ "a", "b" }, { ttl = 3000, wait = 3000 }) end)
    r.nodes[1].signal("CONT")
    if set then set:release() end
    assert.is_nil(err, "gave up after " .. string.format("%.3f", took) .. " s of a 3 s wait: " .. tostring(err))
    assert.is_table(set)
  end)

  describe("gateway guards on it, two nginx", function()
    local n1, n2
    setup(function()
      local masters = table.concat(r.addrs, ",")
      n1 = h.start_nginx("spec-redlock-faults.conf", { MASTERS = masters })
      n2 = h.start_nginx("spec-redlock-faults.conf", { MASTERS = masters })
    end)
    teardown(function()
      if n1 then n1.stop() end
      if n2 then n2.stop() end
    end)

    --- `clients` loops of requests to path (alternating nginx) for `seconds`, `during()` run meanwhile: statuses counted.
    local function hammer(path, clients, seconds, during)
      local counts, stop = {}, false
      local threads = {}
      for c = 1, clients do
        threads[c] = ngx.thread.spawn(function()
          local i = c
          while not stop do
            local res, err = h.http(i % 2 == 0 and n1.port or n2.port, path, { timeout = 8000 })
            local k = res and tostring(res.status) or ("err:" .. tostring(err))
            counts[k] = (counts[k] or 0) + 1
            i = i + 1
          end
        end)
      end
      if during then during() end
      ngx.sleep(seconds)
      stop = true
      for _, t in ipairs(threads) do ngx.thread.wait(t) end
      return counts
    end

    local function show(counts)
      local out = {}
      for k, v in pairs(counts) do out[#out + 1] = k .. "=" .. v end
      table.sort(out)
      return table.concat(out, " ")
    end

    it("mutex: requests from two nginx wait their turn (never side by side, never refused) while one master is paused", function()
      local p = h.unique("rlf_gw")
      local path = "/mutex?key=" .. p .. "k&ms=60&prefix=" .. p
      assert.equal(200, assert(h.http(n1.port, path)).status)
      local counts = hammer(path, 6, 3.5, function()
        ngx.timer.at(0.5, function() r.nodes[1].signal("STOP") end)
        ngx.timer.at(2.5, function() r.nodes[1].signal("CONT") end)
      end)
      local overlaps = tonumber(h.cmd(h.redis_port, "get", p .. "overlaps")) or 0
      assert.equal(0, overlaps, "overlaps: " .. overlaps .. "; statuses " .. show(counts))
      local others = 0
      for k, v in pairs(counts) do if k ~= "200" then others = others + v end end
      assert.equal(0, others, "statuses " .. show(counts))
    end)

    --- A request to /<guard> for key inside its guard for 1.5 s, taken while master 3 was down (its lease on masters
    --- 1 and 2, a majority); then master 3 back and master 1 paused: what a second request for key, on the other nginx, gets.
    local function behind_a_holder(guard)
      local p = h.unique("rlf_h" .. guard)
      local key = p .. "k"
      assert.equal(200, assert(h.http(n2.port, "/" .. guard .. "?key=" .. p .. "warm&ms=0&prefix=" .. p)).status)
      down(3)
      local first = ngx.thread.spawn(h.http, n1.port, "/" .. guard .. "?key=" .. key .. "&ms=1500&prefix=" .. p, { timeout = 5000 })
      local rkey = h.guard_key(guard, key)
      assert.is_true(h.eventually(2, function() return h.cmd(r.ports[2], "exists", rkey) == 1 end))
      up(3)
      ngx.sleep(0.2)
      r.nodes[1].signal("STOP")
      local second = h.http(n2.port, "/" .. guard .. "?key=" .. key .. "&ms=0&prefix=" .. p, { timeout = 5000 })
      r.nodes[1].signal("CONT")
      local _, res = ngx.thread.wait(first)
      return res and res.status, second and second.status, tonumber(h.cmd(h.redis_port, "get", p .. "overlaps")) or 0
    end

    it("dedup, on_error = allow: a request whose key is in flight elsewhere is refused (409) while one master (a minority) is paused", function()
      local first, second, overlaps = behind_a_holder("dedup_allow")
      assert.equal(200, first)
      assert.equal(409, second, "the duplicate was answered " .. tostring(second) .. " (overlaps " .. overlaps .. ")")
      assert.equal(0, overlaps)
    end)

    it("dedup, on_error = deny: a request whose key is in flight elsewhere is refused with 409 (not error_status 503) while one master is paused", function()
      local first, second = behind_a_holder("dedup")
      assert.equal(200, first)
      assert.equal(409, second)
    end)
  end)
end)

h.check_error_logs({
  "lua tcp socket read timed out",  -- masters paused on purpose
  "connect%(%) failed %(111: Connection refused%)",  -- masters down on purpose
  -- Masters SIGKILLed on purpose: a renewal's read in flight on one meets a reset (its kernel's answer to unread data).
  { "recv%(%) failed %(104: Connection reset by peer%)", max = 2 },
  { "lost: Redis could not renew it", max = 1 },  -- renew with two masters down, on purpose
})
