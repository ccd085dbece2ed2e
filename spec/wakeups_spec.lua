-- Wake-ups across the fleet: a release anywhere publishes on the key's channel,
-- and a waiter whose holder is elsewhere is woken by it (one subscriber
-- connection per worker), instead of polling. The holder here uses another
-- shared dict and releases through Redis alone, as another nginx would.
local h = require "helpers"

local now, eventually = h.now, h.eventually

--- Release as another nginx would: the release script run in Redis, nothing in this worker told.
--- With a waiter in line it answers the token of the waiter it handed the key to.
local RELEASE = require("resty.dlock.scripts").RELEASE_QUEUED.src
local function release_elsewhere(lease)
  return h.cmd(nil, "eval", RELEASE, 2, lease.rkey, lease.rkey .. ":queue", lease.token)
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
end)
