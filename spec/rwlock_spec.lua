-- Shared and exclusive locks: acquire(key, { shared = true }) takes a key as
-- one of its readers. Readers share; a writer (a plain acquire) excludes
-- everyone; a waiting writer holds back readers that come after it; each
-- reader's lease is owner-checked, renewed, fenced and recovered like a lock.
local h = require "helpers"
local dlock = require "resty.dlock"
local semaphore = require "resty.dlock.semaphore"

local now = h.now
local MARK = "dlock!shared"

--- Run fn in a light thread now; returns a function that waits for its results.
local function spawn(fn, ...)
  local t = ngx.thread.spawn(fn, ...)
  return function()
    local res = (function(...) return { n = select("#", ...), ... } end)(ngx.thread.wait(t))
    assert(res[1], res[2])
    return unpack(res, 2, res.n)
  end
end

local witness = require "witness"

--- Hammer `keys` keys from 40 light threads here and 16 requests to a peer nginx
--- (path /rw-hammer), `reads` % readers; the witness's counters (prefix).
local function hammer(locks, peer, keys, reads, extra)
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
    assert.equal(200, res.status)
    local got, errs = res.body:match("^(%d+) (%d+)")
    assert.equal("0", errs)
    return tonumber(got)
  end
  local threads = {}
  for _ = 1, 40 do threads[#threads + 1] = spawn(local_client) end
  for _ = 1, 16 do threads[#threads + 1] = spawn(remote_client) end
  local total = 0
  for _, wait in ipairs(threads) do total = total + wait() end
  assert.equal(56 * rounds, total)
  local overlaps = h.cmd(nil, "get", prefix .. "overlaps")
  local shared = tonumber(h.cmd(nil, "get", prefix .. "shared")) or 0
  io.stdout:write(string.format("rwlock: %d leases (%d %% readers) on %d keys%s: %s overlaps, readers side by side %d times\n",
    total, reads, keys, extra and " (cluster)" or "", overlaps == ngx.null and "0" or tostring(overlaps), shared))
  return overlaps, shared
end

--- The tests of behaviour, against a factory made by make(opts) (standalone or Cluster).
local function behaves(make, cmd, readers_key)
  it("lets two readers hold a key at once, each with a lease of its own that says shared", function()
    local locks = make()
    local a = assert(locks:acquire("doc", { shared = true, wait = 0 }))
    local b = assert(locks:acquire("doc", { shared = true, wait = 0 }))
    assert.is_true(a.shared)
    assert.is_true(b.shared)
    assert.is_true(a:valid() and b:valid())
    assert.are_not.equal(a.token, b.token)
    -- The key says readers hold it; the readers are listed beside it.
    assert.equal(MARK, cmd("get", locks.prefix .. "doc"))
    local r = cmd("zrange", readers_key(a._rkey), 0, -1)
    table.sort(r)
    local want = { a.token, b.token }
    table.sort(want)
    assert.same(want, r)
    assert.is_true(a:release())
    -- One reader left: still held.
    assert.equal(MARK, cmd("get", locks.prefix .. "doc"))
    assert.is_true(b:release())
    assert.equal(ngx.null, cmd("get", locks.prefix .. "doc"))
    assert.equal(0, cmd("exists", readers_key(a._rkey)))
  end)

  it("keeps readers and other writers out while a writer holds the key", function()
    local locks = make()
    local w = assert(locks:acquire("doc", { ttl = 3000, wait = 0 }))
    assert.is_false(w.shared)
    local r, err, retry = locks:acquire("doc", { shared = true, wait = 0 })
    assert.is_nil(r)
    assert.equal("busy", err)
    assert.is_true(retry > 2000 and retry <= 3000, tostring(retry))
    local w2, err2 = locks:acquire("doc", { wait = 0 })
    assert.is_nil(w2)
    assert.equal("busy", err2)
    assert.is_true(w:release())
    assert(assert(locks:acquire("doc", { shared = true, wait = 0 })):release())
  end)

  it("keeps a writer out while readers hold the key, and lets it in when the last reader leaves", function()
    local locks = make()
    local a = assert(locks:acquire("doc", { shared = true, ttl = 5000 }))
    local b = assert(locks:acquire("doc", { shared = true, ttl = 5000 }))
    local w, err, retry = locks:acquire("doc", { wait = 0 })
    assert.is_nil(w)
    assert.equal("busy", err)
    assert.is_true(retry > 4000, tostring(retry))
    local writer = spawn(function()
      local l, e = locks:acquire("doc", { wait = 3000 })
      return l, e, now()
    end)
    ngx.sleep(0.1)
    assert(a:release())
    ngx.sleep(0.1)
    local released = now()
    assert(b:release())
    local l, e, at = writer()
    assert.is_truthy(l, e)
    assert.is_true(at >= released, "the writer got in while a reader held the key")
    assert.is_true(at - released < 0.2, "the writer came " .. (at - released) .. " s after the last reader left")
    assert.equal(l.token, cmd("get", locks.prefix .. "doc"))
    assert(l:release())
  end)

  it("holds back a reader that comes while a writer waits, and lets it in after that writer", function()
    local locks = make()
    local first = assert(locks:acquire("doc", { shared = true, ttl = 5000 }))
    local order = {}
    local writer = spawn(function()
      local l = assert(locks:acquire("doc", { wait = 3000 }))
      order[#order + 1] = "writer"
      ngx.sleep(0.05)
      order[#order + 1] = "writer done"
      assert(l:release())
    end)
    ngx.sleep(0.05)
    -- A writer waits: a new reader does not overtake it, though only readers hold the key.
    local r, err = locks:acquire("doc", { shared = true, wait = 0 })
    assert.is_nil(r)
    assert.equal("busy", err)
    local reader = spawn(function()
      local l = assert(locks:acquire("doc", { shared = true, wait = 3000 }))
      order[#order + 1] = "reader"
      assert(l:release())
    end)
    ngx.sleep(0.1)
    assert.same({}, order)
    assert(first:release())
    writer()
    reader()
    assert.same({ "writer", "writer done", "reader" }, order)
  end)

  it("lets every reader waiting behind a writer in together when it releases", function()
    local locks = make()
    local w = assert(locks:acquire("doc", { ttl = 5000 }))
    local inside, most = 0, 0
    local waiting = {}
    for i = 1, 4 do
      waiting[i] = spawn(function()
        local l, e = locks:acquire("doc", { shared = true, wait = 3000 })
        assert(l, e)
        inside = inside + 1
        most = math.max(most, inside)
        ngx.sleep(0.1)
        inside = inside - 1
        return l:release()
      end)
    end
    ngx.sleep(0.1)
    local t0 = now()
    assert(w:release())
    for i = 1, 4 do assert.is_true(waiting[i]()) end
    assert.equal(4, most)
    assert.is_true(now() - t0 < 0.4, "the readers took " .. (now() - t0) .. " s to pass")
  end)

  it("lets a writer in within a bound while readers keep coming (no writer starvation)", function()
    local locks = make()
    local stop = false
    local readers_done = 0
    local function reader_stream()
      -- A reader every 20 ms, each holding 50 ms: readers always overlap.
      local mine = {}
      while not stop do
        mine[#mine + 1] = spawn(function()
          local l = locks:acquire("doc", { shared = true, ttl = 5000, wait = 5000 })
          if l then
            ngx.sleep(0.05)
            l:release()
            readers_done = readers_done + 1
          end
        end)
        ngx.sleep(0.02)
      end
      for _, wait in ipairs(mine) do wait() end
    end
    local stream = spawn(reader_stream)
    ngx.sleep(0.2)
    local t0 = now()
    local w, err = locks:acquire("doc", { ttl = 5000, wait = 3000 })
    local waited = now() - t0
    assert.is_truthy(w, err)
    -- It waited for the readers inside when it came (50 ms) and a few round trips, not for the stream to end
    -- (which only ends once it got in: a writer that starved would wait its full 3 s).
    assert.is_true(waited < 0.5, "the writer waited " .. waited .. " s")
    io.stdout:write(string.format("rwlock: a writer among readers every 20 ms waited %.3f s\n", waited))
    assert(w:release())
    ngx.sleep(0.1)
    stop = true
    stream()
    assert.is_true(readers_done > 10, tostring(readers_done))
  end)

  it("frees a writer when a reader's lease runs out unreleased", function()
    local locks = make()
    local r = assert(locks:acquire("doc", { shared = true, ttl = 300 }))
    local t0 = now()
    local w, err = locks:acquire("doc", { wait = 2000 })
    assert.is_truthy(w, err)
    local waited = now() - t0
    assert.is_true(waited >= 0.25 and waited < 0.8, "the writer waited " .. waited .. " s")
    assert.is_false(r:valid())
    assert.same({ nil, "not_owner" }, { r:release() })
    assert(w:release())
  end)

  it("frees the key at once when a reader whose lease runs out as it goes releases it (ttl = 1, 1000 times)", function()
    -- A reader's lease of 1 ms ends within the ms Redis's clock crosses while
    -- the acquire sets the expiries: the key must never outlive its readers.
    local locks = make()
    local held = {}
    for i = 1, 1000 do
      local key = "brief" .. i
      local r = locks:acquire(key, { shared = true, ttl = 1 })
      if r then r:release() end
      local w, err = locks:acquire(key, { wait = 0 })
      if w then w:release() elseif #held < 3 then
        local rkey = locks.prefix .. key
        held[#held + 1] = key .. ": " .. tostring(err) .. ", the key holds " .. tostring(cmd("get", rkey)) ..
          " for " .. tostring(cmd("pttl", rkey)) .. " ms, readers " .. tostring(cmd("zcard", readers_key(rkey)))
      end
    end
    assert.same({}, held)
  end)

  it("frees a key left shared with no reader (its readers' set evicted) at the next reader's release", function()
    local locks = make()
    local r = assert(locks:acquire("doc", { shared = true, ttl = 5000 }))
    local key = locks.prefix .. "doc"
    cmd("del", readers_key(r._rkey))
    assert.equal(MARK, cmd("get", key))
    assert.same({ nil, "not_owner" }, { r:release() })
    assert.equal(ngx.null, cmd("get", key))
    local w = assert(locks:acquire("doc", { wait = 0 }))
    assert(w:release())
  end)

  it("refuses a plain SET NX of another client (node-redlock) while readers hold, and readers while it holds", function()
    local locks = make()
    local r = assert(locks:acquire("doc", { shared = true, ttl = 5000 }))
    local key = locks.prefix .. "doc"
    assert.equal(ngx.null, cmd("set", key, "foreign", "nx", "px", 5000))
    assert(r:release())
    assert.equal("OK", cmd("set", key, "foreign", "nx", "px", 2000))
    local r2, err = locks:acquire("doc", { shared = true, wait = 0 })
    assert.is_nil(r2)
    assert.equal("busy", err)
    cmd("del", key)
  end)

  it("owner-checks a reader's release and extend, and moves the key's expiry with its latest reader", function()
    local locks = make()
    local a = assert(locks:acquire("doc", { shared = true, ttl = 1000 }))
    local b = assert(locks:acquire("doc", { shared = true, ttl = 2000 }))
    local key = locks.prefix .. "doc"
    assert.is_true(cmd("pttl", key) > 1500)
    assert.is_true(a:extend(5000))
    assert.is_true(cmd("pttl", key) > 4500)
    assert.is_true(b:release())
    assert.same({ nil, "not_owner" }, { b:release() })
    assert.same({ nil, "not_owner" }, { b:extend() })
    -- A reader whose place is gone cannot extend its way back in.
    cmd("zrem", readers_key(a._rkey), a.token)
    assert.same({ nil, "not_owner" }, { a:extend() })
    cmd("del", key)
  end)

  it("renews a reader's lease with the watchdog (renew = true)", function()
    local locks = make()
    local r = assert(locks:acquire("doc", { shared = true, ttl = 300, renew = true }))
    ngx.sleep(0.8)
    assert.is_true(r:valid())
    local w, err = locks:acquire("doc", { wait = 0 })
    assert.is_nil(w)
    assert.equal("busy", err)
    assert.is_true(r:release())
    assert(assert(locks:acquire("doc", { wait = 0 })):release())
  end)

  it("gives readers and writers of a fenced factory fences that only grow", function()
    local locks = make({ fencing = true })
    local last = 0
    for _ = 1, 3 do
      local a = assert(locks:acquire("doc", { shared = true }))
      local b = assert(locks:acquire("doc", { shared = true }))
      assert.is_true(a.fence > last and b.fence > a.fence)
      assert(a:release())
      assert(b:release())
      local w = assert(locks:acquire("doc"))
      assert.is_true(w.fence > b.fence)
      last = w.fence
      assert(w:release())
    end
  end)
end

describe("shared locks", function()
  behaves(function(opts) return h.locks(opts) end, function(...) return h.cmd(nil, ...) end,
    function(rkey) return rkey .. ":readers" end)

  it("refuses shared for semaphores and reentrant factories, and a shared that is not a boolean", function()
    local sem = assert(semaphore.new({ dict = "dlock", permits = 2, redis = h.redis_opts(), prefix = h.unique("sem") }))
    local p, err = sem:acquire("k", { shared = true })
    assert.is_nil(p)
    assert.equal("dlock: shared is an option of locks (resty.dlock), not of semaphores, whose permits are all alike, got true", err)
    local re = h.locks({ reentrant = true })
    local l, rerr = re:acquire("k", { shared = true })
    assert.is_nil(l)
    assert.matches("shared = true is refused by reentrant factories", rerr, 1, true)
    -- shared = false is a plain lock, reentrant or not.
    assert(assert(re:acquire("k", { shared = false })):release())
    local _, berr = h.locks():acquire("k", { shared = "yes" })
    assert.matches("^dlock: shared must be a boolean", berr)
  end)

  it("refuses shared under redis.redlock, saying why", function()
    local locks = assert(dlock.new({ dict = "dlock", prefix = h.unique("rl"),
      redis = { redlock = { "127.0.0.1:" .. h.redis_port, "127.0.0.1:1", "127.0.0.1:2" } } }))
    local l, err = locks:acquire("k", { shared = true })
    assert.is_nil(l)
    assert.equal("dlock: shared = true is refused with redis.redlock: holding back readers while a writer waits takes " ..
      "one line of waiters, which independent masters do not have (writers would starve)", err)
  end)

  it("gives back what a reader whose wait ended left in line", function()
    local locks = h.locks()
    local w = assert(locks:acquire("doc", { ttl = 5000 }))
    local r, err = locks:acquire("doc", { shared = true, wait = 200 })
    assert.is_nil(r)
    assert.equal("timeout", err)
    assert(w:release())
    -- The key is free: the reader's ticket, past its deadline, is skipped.
    assert(assert(locks:acquire("doc", { wait = 0 })):release())
  end)
end)

describe("shared locks across nginx", function()
  local peer
  setup(function() peer = h.start_nginx("spec-peer.conf", { WORKERS = 4 }) end)
  teardown(function() if peer then peer.stop() end end)

  it("never has a writer beside anyone, across 40 light threads and 4 workers of another nginx: readers side by side", function()
    local overlaps, shared = hammer(h.locks(), peer, 2, 80)
    assert.equal(ngx.null, overlaps)
    assert.is_true(shared > 0, "no two readers were ever inside at once")
    -- The witness works: it sees a writer beside a reader.
    local w = witness.new(h.redis_port, "probe:" .. h.unique())
    local t = spawn(witness.inside_shared, w, "x", true, 50)
    local w2 = witness.new(h.redis_port, w.prefix)
    witness.inside_shared(w2, "x", false, 1)
    t()
    assert.equal("1", h.cmd(nil, "get", w.prefix .. "overlaps"))
  end)

  it("never has a writer beside anyone while the other nginx reloads under load: no request fails, no key is left locked", function()
    local locks = h.locks()
    local prefix = locks.prefix
    local failures, taken = {}, 0
    local old = peer.workers()
    local w = {}
    -- 12 light threads here and 8 clients of the peer (3 rounds a request), 80 % readers on 2 keys, for 2.5 s;
    -- the peer reloaded 1 s in: requests in flight finish in its old workers, the next ones go to the new.
    local after = h.under_load(2.5, 20, function(i)
      if i <= 12 then
        w[i] = w[i] or witness.new(h.redis_port, prefix)
        local key = "k" .. math.random(2)
        local shared = math.random(100) <= 80
        local lease, err = locks:acquire(key, { ttl = 5000, wait = 10000, shared = shared })
        if not lease then failures[#failures + 1] = "here: " .. tostring(err) return end
        taken = taken + 1
        witness.inside_shared(w[i], key, shared, 2)
        assert(lease:release())
        return
      end
      local got, why = h.hammered(peer.port, "/rw-hammer?prefix=" .. ngx.escape_uri(prefix) .. "&keys=2&rounds=3&reads=80", 30000)
      if not got then
        failures[#failures + 1] = why
        return
      end
      taken = taken + got
    end, 1, function() assert.is_true(peer.reload()) end)
    for _, x in pairs(w) do witness.close(x) end
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

describe("shared locks on redis.cluster", function()
  local c, peer
  setup(function()
    c = h.start_cluster()
    peer = h.start_nginx("spec-peer.conf", { WORKERS = 2 })
  end)
  teardown(function()
    if peer then peer.stop() end
    if c then c.stop() end
  end)

  local function make(opts)
    local o = { dict = "dlock", prefix = h.unique("rwc"), redis = c.redis() }
    for k, v in pairs(opts or {}) do o[k] = v end
    return assert(dlock.new(o))
  end

  behaves(make, function(name, key, ...) return h.cmd(c.slot_owner(key), name, key, ...) end,
    function(rkey) return "{" .. rkey .. "}:readers" end)

  it("keeps a key, its readers and its queue in one slot", function()
    local locks = make()
    local w = assert(locks:acquire("doc", { ttl = 5000 }))
    local r = spawn(function() return locks:acquire("doc", { shared = true, wait = 3000 }) end)
    ngx.sleep(0.05)
    local rkey = locks.prefix .. "doc"
    local slot = c.keyslot(rkey)
    assert.equal(slot, c.keyslot("{" .. rkey .. "}:readers"))
    assert.equal(slot, c.keyslot("{" .. rkey .. "}:queue"))
    assert.equal(1, h.cmd(c.slot_owner(rkey), "zcard", "{" .. rkey .. "}:queue"))
    assert(w:release())
    local l = assert(r())
    assert.same({ l.token }, h.cmd(c.slot_owner(rkey), "zrange", "{" .. rkey .. "}:readers", 0, -1))
    assert(l:release())
  end)

  it("never has a writer beside anyone across 2 nginx", function()
    local ports = {}
    for _, m in ipairs(c.masters()) do ports[#ports + 1] = m end
    local overlaps, shared = hammer(make(), peer, 3, 80, "&cluster=" .. table.concat(ports, ","))
    assert.equal(ngx.null, overlaps)
    assert.is_true(shared > 0, "no two readers were ever inside at once")
  end)
end)

describe("gateway mutex guards with shared methods", function()
  local n
  setup(function()
    local own = h.free_port()
    n = h.start_nginx("spec-guards.conf", { OWN_BACKEND_PORT = own, BACKEND_PORT = own,
      AUTH_REQUEST = h.nginx_has("http_auth_request_module") and "auth_request" or "root" })
    n.backend = own
  end)
  teardown(function() if n then n.stop() end end)

  --- "hits max_in_flight" of the backend for key.
  local function stats(key)
    local res = assert(h.http(n.backend, "/stats?key=" .. key))
    local hits, max = res.body:match("^(%d+) (%d+)")
    return tonumber(hits), tonumber(max)
  end

  local function request(method, key, ms)
    return spawn(function()
      local res = assert(h.http(n.port, "/rw?key=" .. key .. "&ms=" .. ms, { method = method,
        headers = { ["Content-Length"] = "0" } }))
      return res.status, now()
    end)
  end

  it("lets GETs through side by side, and a PUT alone, the GETs that came after it waiting for it", function()
    local key = h.unique("gw"):gsub(":", "_")
    local gets = {}
    for i = 1, 4 do gets[i] = request("GET", key, 200) end
    for i = 1, 4 do assert.equal(200, (gets[i]())) end
    local hits, max = stats(key)
    assert.equal(4, hits)
    assert.equal(4, max)
    -- The readers gave the key back as their requests ended: a write goes through at once.
    local t0 = now()
    assert.equal(200, (request("PUT", key, 0)()))
    assert.is_true(now() - t0 < 1, "the PUT waited " .. (now() - t0) .. " s")
    -- A write, then reads while it runs: they wait for it, and then share.
    key = key .. "_2"
    local put = request("PUT", key, 300)
    ngx.sleep(0.1)
    for i = 1, 3 do gets[i] = request("GET", key, 100) end
    local status, put_done = put()
    assert.equal(200, status)
    for i = 1, 3 do
      local s, at = gets[i]()
      assert.equal(200, s)
      assert.is_true(at > put_done - 0.05, "a GET ended before the PUT it waited for")
    end
    hits, max = stats(key)
    assert.equal(4, hits)
    assert.equal(3, max)
  end)

  it("refuses shared outside mode mutex, a list that is not of methods, and under redis.redlock", function()
    local gateway = require "resty.dlock.gateway"
    local base = { mode = "dedup", key = "$arg_k", on_error = "deny", redis = h.redis_opts(), shared = { "GET" } }
    local g, err = gateway.new(base)
    assert.is_nil(g)
    assert.matches("shared applies to mode mutex only, not dedup", err, 1, true)
    base.mode = "mutex"
    base.shared = { "get" }
    g, err = gateway.new(base)
    assert.is_nil(g)
    assert.matches("shared must be a list of upper-case HTTP methods", err, 1, true)
    base.shared = "GET"
    g, err = gateway.new(base)
    assert.is_nil(g)
    assert.matches("shared must be a list of HTTP methods", err, 1, true)
    base.shared = { "GET" }
    base.redis = { redlock = { "127.0.0.1:" .. h.redis_port, "127.0.0.1:1", "127.0.0.1:2" } }
    g, err = gateway.new(base)
    assert.is_nil(g)
    assert.matches("shared = true is refused with redis.redlock", err, 1, true)
  end)
end)

h.check_error_logs({
  "worker process %d+ exited on signal 9",  -- the SIGKILLed peer worker
})
