-- Wake-ups across the fleet: a release anywhere publishes on the key's channel,
-- and a waiter whose holder is elsewhere is woken by it (one subscriber
-- connection per worker), instead of polling. The holder here uses another
-- shared dict and releases through Redis alone, as another nginx would.
local h = require "helpers"

local subscriptions = require "resty.dlock.core.subscriptions"
local wakeups = require "resty.dlock.core.wakeups"
local waits = require "resty.dlock.core.wait"
local now, eventually = h.now, h.eventually

--- Release as another nginx would: the release script run in Redis, nothing in this worker told.
--- With a waiter in line it answers the token of the waiter it handed the key to.
local RELEASE = require("resty.dlock.redis.scripts").RELEASE_QUEUED.src
local function release_elsewhere(lease)
  return h.cmd(nil, "eval", RELEASE, 2, lease._rkey, lease._rkey .. ":queue", lease.token)
end

local function evalshas()
  return tonumber(h.cmd(nil, "info", "commandstats"):match("cmdstat_evalsha:calls=(%d+)")) or 0
end

local function pubsub_clients()
  local list = h.cmd(nil, "client", "list", "type", "pubsub") or ""
  local n = 0
  for _ in list:gmatch("[^\n]+") do n = n + 1 end
  return n
end

describe("wake-ups", function()
  local prefix, holder, waiter
  before_each(function()
    prefix = h.unique("wk")
    holder = h.locks({ dict = "dlock_other", prefix = prefix })  -- another nginx, as far as the waiter knows
    waiter = h.locks({ prefix = prefix })
  end)

  it("wake a waiter within milliseconds of a release elsewhere, long before the holder's ttl", function()
    local lease = assert(holder:acquire("k", { ttl = 10000 }))
    local got, released_at, got_at
    local th = ngx.thread.spawn(function()
      got = waiter:acquire("k", { wait = 8000 })
      got_at = now()
    end)
    -- Subscribed: Redis knows one subscriber for the key's channel.
    assert.is_true(eventually(1, function()
      return h.cmd(nil, "pubsub", "numsub", "dlock:released:" .. prefix .. "k")[2] == 1
    end))
    ngx.sleep(0.3)  -- the waiter now sleeps until the holder's PTTL (10 s) unless woken
    released_at = now()
    assert.is_string(release_elsewhere(lease))
    assert(ngx.thread.wait(th))
    assert.is_truthy(got, "the waiter did not get the key")
    local ms = (got_at - released_at) * 1000
    assert.is_true(ms < 50, "woken " .. ms .. " ms after the release")
    assert.is_true(got:release())
    -- Done waiting: the subscription goes, 2 s after the key's last waiter.
    assert.is_true(eventually(3, function()
      return h.cmd(nil, "pubsub", "numsub", "dlock:released:" .. prefix .. "k")[2] == 0
    end))
  end)

  it("use one subscriber connection per worker, however many waiters and keys", function()
    local before = pubsub_clients()
    local leases = {}
    for i = 1, 5 do leases[i] = assert(holder:acquire("m" .. i, { ttl = 10000 })) end
    local threads = {}
    for i = 1, 20 do
      threads[i] = ngx.thread.spawn(function()
        local l = waiter:acquire("m" .. (i % 5 + 1), { wait = 8000 })
        return l and l:release()
      end)
    end
    assert.is_true(eventually(1, function()
      return h.cmd(nil, "pubsub", "numsub", "dlock:released:" .. prefix .. "m5")[2] == 1
    end))
    assert.is_true(pubsub_clients() - before <= 1)
    local t0 = now()
    for i = 1, 5 do assert.is_string(release_elsewhere(leases[i])) end
    -- Every waiter gets its key in turn (each releases at once), none waits for the ttl.
    for i = 1, 20 do
      local ok, released = ngx.thread.wait(threads[i])
      assert.is_true(ok)
      assert.is_true(released, "waiter " .. i .. " got nothing")
    end
    assert.is_true(now() - t0 < 2, "took " .. (now() - t0) .. " s")
  end)

  it("fall back to polling when the subscription connection is killed, then subscribe again", function()
    local lease = assert(holder:acquire("p", { ttl = 10000 }))
    local got
    local th = ngx.thread.spawn(function() got = waiter:acquire("p", { wait = 8000 }) end)
    assert.is_true(eventually(1, function()
      return h.cmd(nil, "pubsub", "numsub", "dlock:released:" .. prefix .. "p")[2] == 1
    end))
    ngx.sleep(0.1)
    h.cmd(nil, "client", "kill", "type", "pubsub")
    ngx.sleep(0.05)
    -- A release while the subscription is down: the waiter polls and still gets the key quickly.
    local t0 = now()
    assert.is_string(release_elsewhere(lease))
    assert(ngx.thread.wait(th))
    assert.is_truthy(got)
    assert.is_true(now() - t0 < 0.5, "took " .. (now() - t0) .. " s")
    assert.is_true(got:release())
  end)

  it("log nothing while a waiter waits, longer than the subscriber's heartbeat", function()
    local mark = h.error_log_mark()
    local lease = assert(holder:acquire("quiet", { ttl = 10000 }))
    local th = ngx.thread.spawn(function() return select(2, waiter:acquire("quiet", { wait = 6500 })) end)
    assert.is_true(eventually(1, function()
      return h.cmd(nil, "pubsub", "numsub", "dlock:released:" .. prefix .. "quiet")[2] == 1
    end))
    local ok, err = ngx.thread.wait(th)
    assert.is_true(ok)
    assert.equal("timeout", err)
    assert.is_true(release_elsewhere(lease) ~= nil)
    local log = (h.read_file(h.prefix .. "/logs/error.log") or ""):sub(mark.runner + 1)
    assert.is_nil(log:find("[error]", 1, true), log:sub(1, 300))
    assert.is_nil(log:find("[warn]", 1, true), log:sub(1, 300))
  end)
end)

describe("waiters of one worker", function()
  local scripts = require "resty.dlock.redis.scripts"

  local function sem(opts)
    local o = { dict = "dlock", redis = h.redis_opts(), prefix = h.unique("wsem"), permits = 2 }
    for k, v in pairs(opts or {}) do o[k] = v end
    return assert(require("resty.dlock.semaphore").new(o))
  end

  local function subscribed(rkey)
    return eventually(2, function()
      return h.cmd(nil, "pubsub", "numsub", "dlock:released:" .. rkey)[2] == 1
    end)
  end

  it("both get in at once when two permits are freed together (one wake-up each, not two for the first)", function()
    local holder = sem({ dict = "dlock_other" })   -- another nginx, as far as the waiters know
    local s = sem({ prefix = holder.prefix })
    local p1 = assert(holder:acquire("k", { ttl = 10000 }))
    local p2 = assert(holder:acquire("k", { ttl = 10000 }))
    local got, threads = {}, {}
    for i = 1, 2 do
      threads[i] = ngx.thread.spawn(function()
        local p, err = s:acquire("k", { wait = 5000 })
        got[i] = now()
        return p, err
      end)
      ngx.sleep(0.01)
    end
    assert.is_true(subscribed(holder.prefix .. "k"))
    ngx.sleep(0.3)
    local t0 = now()
    -- Both freed at the same moment, through Redis alone (as two other nginx do, or one batch of two releases).
    local red = assert(h.admin())
    red:init_pipeline()
    red:eval(scripts.SEM_RELEASE.src, 1, holder.prefix .. "k", p1.token)
    red:eval(scripts.SEM_RELEASE.src, 1, holder.prefix .. "k", p2.token)
    assert.same({ 1, 1 }, red:commit_pipeline())
    red:close()
    for i = 1, 2 do
      local ok, p, err = ngx.thread.wait(threads[i])
      assert.is_true(ok)
      assert.is_table(p, "waiter " .. i .. ": " .. tostring(err))
      local ms = (got[i] - t0) * 1000
      assert.is_true(ms < 200, "waiter " .. i .. " got its permit " .. math.floor(ms) .. " ms after the release")
      assert.is_true(p:release())
    end
  end)

  it("are not held up by one whose light thread was killed (the next one gets the key at its release)", function()
    local holder = h.locks({ dict = "dlock_other" })
    local locks = h.locks({ prefix = holder.prefix })
    local l = assert(holder:acquire("k", { ttl = 10000 }))
    local killed = ngx.thread.spawn(function() return locks:acquire("k", { wait = 8000 }) end)
    assert.is_true(subscribed(holder.prefix .. "k"))
    ngx.sleep(0.05)
    local t0
    local next_waiter = ngx.thread.spawn(function()
      local got, err = locks:acquire("k", { wait = 1500 })
      return got, err, now() - t0
    end)
    ngx.sleep(0.1)
    assert.truthy(ngx.thread.kill(killed))
    t0 = now()
    assert.is_true(l:release())
    local ok, got, err, took = ngx.thread.wait(next_waiter)
    assert.is_true(ok)
    assert.is_table(got, "the next waiter: " .. tostring(err) .. " after " .. tostring(took) .. " s")
    assert.is_true(took < 0.5, "took " .. took .. " s")
    assert.is_true(got:release())
  end)
end)

describe("the subscriber's connection", function()
  it("comes back after a Redis restart, subscribed again, with one line in the log for the outage", function()
    local r = h.start_redis()
    local prefix = h.unique("rs")
    local opts = { redis = h.redis_opts({ port = r.port }), prefix = prefix }
    local holder = h.locks({ dict = "dlock_other", redis = opts.redis, prefix = prefix })
    local waiter = h.locks(opts)
    local channel = "dlock:released:" .. prefix .. "k"
    assert(holder:acquire("k", { ttl = 10000 }))
    local _, err = waiter:acquire("k", { wait = 200 })
    assert.equal("timeout", err)
    assert.equal(1, h.cmd(r.port, "pubsub", "numsub", channel)[2])
    -- Someone still waits for the key in this worker's line, napping and
    -- asking for its releases as a waiter does, but asks Redis nothing (a
    -- waiter would, and log its own refused connects).
    local waiting = true
    local keep = ngx.thread.spawn(function()
      local turn = waits.turn(prefix .. "k")
      while waiting do
        wakeups.want(waiter._store.redis, prefix .. "k")
        waits.pause(turn, 200)
      end
      waits.leave(turn, false)
    end)
    local mark = h.error_log_mark()
    r.stop()
    r = h.start_redis(r.port)
    assert.is_true(eventually(5, function() return h.cmd(r.port, "pubsub", "numsub", channel)[2] == 1 end),
      "not subscribed again")
    local log = (h.read_file(h.prefix .. "/logs/error.log") or ""):sub(mark.runner + 1)
    local errors, warnings = 0, 0
    for line in log:gmatch("[^\n]+") do
      if line:find("[error]", 1, true) then errors = errors + 1 end
      if line:find("[warn]", 1, true) then warnings = warnings + 1 end
    end
    -- A reconnection attempt may come before Redis is back (nginx logs the refused connect).
    assert.is_true(errors <= 1, errors .. " error lines:\n" .. log:sub(1, 600))
    assert.equal(1, warnings, log:sub(1, 600))
    assert.matches("wake%-up subscription: closed %(waiters poll until it is back%)", log)
    waiting = false
    ngx.thread.wait(keep)
    -- Its key's grace over, the subscriber lets go of it; then this Redis can go without a word.
    assert.is_true(eventually(4, function() return h.cmd(r.port, "pubsub", "numsub", channel)[2] == 0 end))
    r.stop()
  end)

  it("does not dial a Redis that is gone when nobody waits for its keys, though a key is in its grace", function()
    local r = h.start_redis()
    local prefix = h.unique("gone")
    local redis = h.redis_opts({ port = r.port })
    local holder = h.locks({ dict = "dlock_other", redis = redis, prefix = prefix })
    local waiter = h.locks({ redis = redis, prefix = prefix })
    assert(holder:acquire("k", { ttl = 10000 }))
    local _, err = waiter:acquire("k", { wait = 200 })
    assert.equal("timeout", err)
    assert.equal(1, h.cmd(r.port, "pubsub", "numsub", "dlock:released:" .. prefix .. "k")[2])
    local s = subscriptions.existing(waiter._store.redis)
    assert.is_true(s.running)
    local mark = h.error_log_mark()
    r.stop()
    -- The key was only in its grace (2 s after its last waiter): nobody to
    -- reconnect for, so the subscriber lets go at once, without a word and
    -- without dialing a Redis that is gone.
    assert.is_true(eventually(1, function() return not s.running end), "still dialing")
    ngx.sleep(1.5)   -- past the first reconnection attempt, had there been one
    assert.same({}, h.unexpected_errors(mark, {}))
    local log = (h.read_file(h.prefix .. "/logs/error.log") or ""):sub(mark.runner + 1)
    assert.is_nil(log:find("wake-up subscription", 1, true), log)
  end)

  it("lets a worker exit at once on reload, although its subscription is up", function()
    local locks = assert(require("resty.dlock").new({ dict = "dlock", prefix = "crash:", redis = h.redis_opts() }))
    local peer = h.start_nginx("spec-peer.conf", { WORKERS = 1 })
    local key = h.unique("reload")
    local lease = assert(locks:acquire(key, { ttl = 10000 }))
    local res = assert(h.http(peer.port, "/wait-turn?key=" .. key .. "&wait=300"))
    assert.equal("err timeout\n", res.body)
    local old = peer.workers()[1]
    assert.is_true(h.sh("kill -HUP " .. peer.pid))
    local t0 = now()
    assert.is_true(eventually(5, function() return not h.sh("kill -0 " .. old .. " 2>/dev/null") end),
      "the old worker still runs")
    assert.is_true(now() - t0 < 1, "exited after " .. (now() - t0) .. " s")
    assert(lease:release())
    peer.stop()
  end)
end)

describe("a waiter on a key another client holds (prefix = \"\")", function()
  local locks
  before_each(function() locks = h.locks({ prefix = "" }) end)

  --- The key as another client holds it: SET key token NX PX ttl, and later DEL.
  local function held_by_another(key)
    assert.equal("OK", h.cmd(nil, "set", key, "their-token", "nx", "px", 10000))
  end

  it("gets it within a few hundred ms of that client's DEL, although the DEL announces nothing", function()
    local key = h.unique("foreign")
    held_by_another(key)
    local got_at
    local th = ngx.thread.spawn(function()
      local l = locks:acquire(key, { wait = 5000, ttl = 5000 })
      got_at = now()
      return l
    end)
    assert.is_true(eventually(1, function()
      return h.cmd(nil, "pubsub", "numsub", "dlock:released:" .. key)[2] == 1
    end))
    ngx.sleep(0.6)   -- the waiter sleeps on a live subscription: no word will come
    local deleted_at = now()
    assert.equal(1, h.cmd(nil, "del", key))
    local ok, l = ngx.thread.wait(th)
    assert.is_true(ok)
    assert.is_truthy(l, "the waiter did not get the key")
    local ms = (got_at - deleted_at) * 1000
    assert.is_true(ms < 400, string.format("got it %.0f ms after the DEL", ms))
    assert.is_true(l:release())
  end)

  it("gets it within a few hundred ms of the DEL under Redlock too (waiters taking turns)", function()
    local r = h.start_redlock(3)
    local redlocks = assert(require("resty.dlock").new({ dict = "dlock", prefix = "",
      redis = { redlock = r.addrs, connect_timeout = 500, read_timeout = 1000 } }))
    local key = h.unique("foreign")
    for _, port in ipairs(r.ports) do assert.equal("OK", h.cmd(port, "set", key, "their-token", "nx", "px", 10000)) end
    local got_at
    local th = ngx.thread.spawn(function()
      local l = redlocks:acquire(key, { wait = 5000, ttl = 5000 })
      got_at = now()
      return l
    end)
    ngx.sleep(0.8)
    local deleted_at = now()
    for _, port in ipairs(r.ports) do assert.equal(1, h.cmd(port, "del", key)) end
    local ok, l = ngx.thread.wait(th)
    assert.is_true(ok)
    assert.is_truthy(l, "the waiter did not get the key")
    local ms = (got_at - deleted_at) * 1000
    assert.is_true(ms < 400, string.format("got it %.0f ms after the DEL", ms))
    assert.is_true(l:release())
    r.stop()
  end)

  it("asks Redis at most about every 200 ms per worker meanwhile", function()
    local key = h.unique("foreign")
    held_by_another(key)
    local th = ngx.thread.spawn(function() return select(2, locks:acquire(key, { wait = 1500 })) end)
    ngx.sleep(0.5)
    local before = evalshas()
    local ok, err = ngx.thread.wait(th)
    assert.is_true(ok)
    assert.equal("timeout", err)
    local sent = evalshas() - before
    -- 1 s of waiting: about 5 looks at 200 ms (a waiter that polled would send 15 or more).
    assert.is_true(sent <= 7, sent .. " scripts in 1 s")
    h.cmd(nil, "del", key)
  end)
end)

h.check_error_logs({
  -- The Redis restart: a reconnection attempt may come before Redis is back.
  "connect%(%) failed %(111: Connection refused%), context: ngx%.timer",
})
