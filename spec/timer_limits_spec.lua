-- At lua_max_running_timers, for a moment: nginx drops a timer whose time
-- comes while every running timer is taken ("N lua_max_running_timers are not
-- enough", at alert), without calling it, though ngx.timer.at had said ok. What
-- the library starts in such a moment must be started again once it has
-- passed, not be taken for running for good. Real nginx
-- (nginx/spec-timer-limits.conf, one worker, 8 running timers), real redis-server.
local h = require "helpers"

local function start(pending)
  return h.start_nginx("spec-timer-limits.conf", { RUNNING = 8, PENDING = pending or 1024 })
end

local function get(n, path) return assert(h.http(n.port, path)) end

--- Take every running timer (8) for s seconds: the moment.
local function fill_running(n, s)
  get(n, "/fill?n=8&s=" .. s)
  assert(h.eventually(1, function() return tonumber(get(n, "/timers").body) == 8 end), "the running timers did not fill")
end

describe("after lua_max_running_timers was reached for a moment", function()
  it("renews a lease taken with renew = true (the watchdog's timer started in the moment was dropped)", function()
    local n = start()
    finally(function() n.stop() end)
    fill_running(n, 1.5)
    -- The watchdog's timer is started now, and dropped.
    assert.matches("^released true", get(n, "/lock?renew=1&key=" .. h.unique("during") .. "&ttl=600&ms=50").body)
    ngx.sleep(2)
    -- A 600 ms lease held for 1.5 s: only the watchdog keeps it. (It was lost, unrenewed and unsaid: the
    -- watchdog's `running` flag stayed set for a timer that never ran.)
    assert.equal("released true nil valid false\n",
      get(n, "/lock?renew=1&key=" .. h.unique("after") .. "&ttl=600&ms=1500").body)
  end)

  it("lets a guard reach Redis again, instead of waiting 8 s for a batch nobody sends and refusing for good", function()
    local n = start()
    finally(function() n.stop() end)
    fill_running(n, 1.5)
    -- Enough requests at once that their calls ride a pipeline: its sender's timer is dropped.
    local during = {}
    for i = 1, 12 do during[i] = ngx.thread.spawn(h.http, n.port, "/conc?key=" .. h.unique("d") .. "&ms=50") end
    for i = 1, 12 do ngx.thread.wait(during[i]) end
    ngx.sleep(6)   -- past the breaker's cool-down those failures opened
    -- One request at a time now, nothing else running: each goes straight to Redis. (They were 507, the
    -- first after 8 s, for good: every later call joined the batch the dropped sender was to send.)
    local statuses, took = {}, {}
    for i = 1, 3 do
      local t0 = h.now()
      statuses[i] = get(n, "/conc?key=" .. h.unique("a") .. "&ms=0").status
      took[i] = math.floor((h.now() - t0) * 10) / 10
    end
    assert.same({ 200, 200, 200 }, statuses, "took " .. table.concat(took, ", ") .. " s")
    assert.is_true(took[1] < 1, "the first took " .. took[1] .. " s")
  end)

  it("adds a worker's lease metrics to the shared dict again (the flush timer started in the moment was dropped)", function()
    local n = start()
    finally(function() n.stop() end)
    fill_running(n, 1.5)
    -- Counted in the worker; the timer that adds the counts to the dict 0.25 s later is dropped.
    assert.matches("^released true", get(n, "/lock?key=" .. h.unique("during")).body)
    ngx.sleep(2)
    assert.matches("^released true", get(n, "/lock?key=" .. h.unique("after")).body)
    -- (They stayed in the worker for good: its `armed` flag stayed set, and no count started another timer.)
    assert.is_true(h.eventually(2, function() return tonumber(get(n, "/acquires").body) == 2 end),
      "acquires in the dict: " .. get(n, "/acquires").body)
  end)

  it("takes back an acquire whose caller went away (the take-back watch's timer started in the moment was dropped)", function()
    local n = start()
    finally(function() n.stop() end)
    -- The acquire script loaded: its EVALSHA runs (no NOSCRIPT for a caller gone to answer).
    local scripts = require "resty.dlock.redis.scripts"
    assert.equal(scripts.ACQUIRE.sha, h.cmd(nil, "script", "load", scripts.ACQUIRE.src))
    -- And a connection in the pool: a fresh one's setup would wait for the busy Redis below, not the acquire.
    assert.matches("^released true", get(n, "/lock?key=" .. h.unique("first")).body)
    fill_running(n, 2)
    -- Redis busy for 300 ms: the acquire sent meanwhile runs after its caller is gone. The watch
    -- that takes it back once its time is up (4 s) is a timer started now, 1 s ahead: dropped.
    local busy = ngx.thread.spawn(h.cmd, nil, "eval", h.SLOW.src, 1, "limits:busy", 300, "x")
    ngx.sleep(0.05)
    local key = h.unique("limits:gone")
    assert.equal("killed\n", get(n, "/gone?key=" .. key).body)
    ngx.thread.wait(busy)
    assert.equal("gone", h.cmd(nil, "get", key))
    ngx.sleep(2.5)
    -- Another acquire sent at once, long after: the watch is started again.
    assert.matches("^released true", get(n, "/lock?key=" .. h.unique("after")).body)
    -- (It was held to the end of its ttl, 30 s: the lane's `watching` flag stayed set for good.)
    assert.is_true(h.eventually(6, function() return h.cmd(nil, "exists", key) == 0 end), "not taken back")
  end)

  it("subscribes a waiter to its key's release (the wake-up subscriber's timer started in the moment was dropped)", function()
    local n = start()
    finally(function() n.stop() end)
    fill_running(n, 1.5)
    -- A key another holder has for 300 ms: the waiter starts the subscriber now, and its timer is dropped.
    local during = h.unique("during")
    h.cmd(nil, "set", "limits:" .. during, "other", "px", 300)
    assert.matches("^released true", get(n, "/lock?key=" .. during .. "&wait=3000").body)
    ngx.sleep(2)
    -- Long after, another waiter: subscribed to the release of its key.
    local after = h.unique("after")
    h.cmd(nil, "set", "limits:" .. after, "other", "px", 4000)
    local waiter = ngx.thread.spawn(get, n, "/lock?key=" .. after .. "&wait=8000")
    -- (Nobody subscribed: the subscriber's `running` flag stayed set for a timer that never ran.)
    assert.is_true(h.eventually(2, function()
      return h.cmd(nil, "pubsub", "numsub", "dlock:released:limits:" .. after)[2] == 1
    end), "no subscriber to the key's release")
    h.cmd(nil, "del", "limits:" .. after)
    h.cmd(nil, "publish", "dlock:released:limits:" .. after, "other")
    local _, res = ngx.thread.wait(waiter)
    assert.matches("^released true", res.body)
  end)

  it("sweeps the releases Redis did not confirm again (the cleanup sweep's timer started in the moment was dropped)", function()
    local n = start()
    finally(function() n.stop() end)
    -- with() holding a lock 600 ms, whose release meets Redis paused: no answer in read_timeout (1 s), left to the sweep.
    local function unconfirmed(key)
      local t = ngx.thread.spawn(get, n, "/with?key=" .. key .. "&ttl=30000&ms=600")
      ngx.sleep(0.3)
      h.cmd(nil, "client", "pause", 1500, "all")
      local _, res = ngx.thread.wait(t)
      assert.matches("^with nil dlock: could not release", res.body)
    end
    fill_running(n, 2.5)
    -- Its sweep's timer is started in the moment, and dropped.
    local during = h.unique("during")
    unconfirmed(during)
    ngx.sleep(1.5)
    -- Long after, another: the sweep is started again, and sees to both.
    local after = h.unique("after")
    unconfirmed(after)
    -- (The first stayed to its ttl, and so did every later one: the `sweeping` flag stayed set for good.)
    assert.is_true(h.eventually(3, function()
      return h.cmd(nil, "exists", "limits:" .. during, "limits:" .. after) == 0
    end), "not swept: " .. h.cmd(nil, "exists", "limits:" .. during) .. " and " .. h.cmd(nil, "exists", "limits:" .. after))
  end)
end)

describe("with every pending timer taken (lua_max_pending_timers)", function()
  it("says once, not for every lease, that the lease metrics' counts cannot be deferred", function()
    local n = start(16)
    finally(function() n.stop() end)
    get(n, "/fill?pending=1&s=5")
    local from = #n.error_log()
    for i = 1, 20 do assert.matches("^released true", get(n, "/lock?key=" .. h.unique("flood") .. i).body) end
    local _, lines = n.error_log():sub(from + 1):gsub("cannot defer the counts of the lease metrics", "")
    -- (It was said at every count that found no flush on its way: 120 lines for 20 leases.)
    assert.equal(1, lines)
  end)

  it("refuses a guard's request whose lease the watchdog cannot renew (on_error = deny): never two beside each other", function()
    local n = start(16)
    finally(function() n.stop() end)
    get(n, "/fill?pending=1&s=5")
    local key = h.unique("unrenewed")
    -- The first would run 2.5 s, past its lease's 1 s: only renewals would keep its key.
    local first = ngx.thread.spawn(h.http, n.port, "/mutex?key=" .. key .. "&ms=2500")
    ngx.sleep(1.4)
    local second = get(n, "/mutex?key=" .. key .. "&ms=300")
    local _, r1 = ngx.thread.wait(first)
    local hits = h.backend_stats(n.port, key)
    -- (Both were let through, 200, the second beside the first: the lease ran out unrenewed under it.)
    assert.same({ 507, 507, 0 }, { r1.status, second.status, hits })
  end)

  it("says in a few lines, not several for every request, that the guards' timers cannot be had", function()
    local n = start(16)
    finally(function() n.stop() end)
    get(n, "/fill?pending=1&s=5")
    local from = #n.error_log()
    for i = 1, 20 do assert.equal(507, get(n, "/mutex?key=" .. h.unique("flood") .. i .. "&ms=0").status) end
    local _, lines = n.error_log():sub(from + 1):gsub("%[error%][^\n]*dlock:", "")
    -- (A watchdog line, a keeper line and a release-queue line for each request, and the meter's three.)
    assert.is_true(lines <= 4, lines .. " dlock [error] lines for 20 requests")
  end)
end)

h.check_error_logs({
  -- The moment itself: nginx drops the timers, and says so.
  { "8 lua_max_running_timers are not enough", max = 24 },
  -- The releases that met Redis paused, on purpose.
  -- (OpenResty's lua-nginx-module 0.10.30 names the upstream before the client.)
  { "lua tcp socket read timed out, .-request: \"GET /with%?key=", max = 2 },
  -- The guard's calls in the batch the dropped sender was to send, and the breaker they opened.
  { "no answer from the pipeline in", max = 12 },
  { "Redis keeps failing, not calling it for", max = 2 },
  -- Every pending timer taken: said once.
  { "cannot defer the counts of the lease metrics, adding them at once: too many pending timers", max = 3 },
  -- A guard that cannot have its timers: one line of each kind per test.
  { "dlock: guard mutex: cannot start the lease watchdog: too many pending timers: requests go by on_error", max = 2 },
  { "dlock: guard mutex: cannot start the gateway keeper: too many pending timers", max = 2 },
  { "dlock: gateway: cannot schedule %d+ release%(s%)", max = 2 },
})
