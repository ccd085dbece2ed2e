-- The gateway's release queue, driven directly from the spec worker (a timer,
-- like the drains): real leases in the test Redis.
local h = require "helpers"
local releases = require "resty.dlock.gateway.releases"
local pipeline = require "resty.dlock.redis.pipeline"

local function gone(key, within)
  local t0 = ngx.now()
  repeat
    if h.cmd(nil, "exists", key) == 0 then return true end
    ngx.sleep(0.01)
    ngx.update_time()
  until ngx.now() - t0 > within
  return false
end

describe("the gateway's release queue", function()
  local owner = { name = "queue-spec", _dict = ngx.shared.dlock, _ttl = 5000, _renew = false, _release = true, _hold = 0 }

  it("keeps draining after queued work raises: later releases still go out", function()
    local locks = h.locks()
    -- Work that raises as soon as it is touched (a hold re-arm calls lease:extend).
    local broken = setmetatable({}, { __index = function() error("broken lease") end })
    for _ = 1, 40 do releases.enqueue(owner, broken, 100) end
    ngx.sleep(0.05)
    local lease = assert(locks:acquire("after-the-broken-ones"))
    releases.enqueue(owner, lease, 0)
    assert.is_true(gone(lease._store.prefix .. "after-the-broken-ones", 0.5), "the release never went out")
  end)

  it("sends a request's release in the worker's next pipeline, with no drain timer or thread of its own", function()
    local locks = h.locks()
    local lease = assert(locks:acquire("posted"))
    local key = lease._store.prefix .. "posted"
    local calls = pipeline.stats(locks._store.redis)
    releases.done({ owner = owner, lease = lease, done = false, answered = releases.answered }, 0)
    assert.is_true(gone(key, 0.5), "the release never went out")
    -- Alone, a call of a timer's thread goes on a connection of its own: only a posted one rides a batch.
    assert.equal(calls + 1, (pipeline.stats(locks._store.redis)))
    -- Redis deletes the key before the sender reads the reply and settles the lease.
    local t0 = ngx.now()
    while lease:valid() and ngx.now() - t0 < 0.5 do
      ngx.sleep(0.01)
      ngx.update_time()
    end
    assert.is_false(lease:valid())
  end)

  it("keeps a lease held (dedup's hold after a 2xx) through the queue, for the time asked", function()
    local locks = h.locks()
    local lease = assert(locks:acquire("held", { ttl = 1000 }))
    local key = lease._store.prefix .. "held"
    releases.done({ owner = owner, lease = lease, done = false, answered = releases.answered }, 8000)
    local t0 = ngx.now()
    repeat
      ngx.sleep(0.01)
      ngx.update_time()
    until h.cmd(nil, "pttl", key) > 5000 or ngx.now() - t0 > 1
    assert.is_true(h.cmd(nil, "pttl", key) > 5000, "not held")
    assert.is_true(lease:release())
  end)

  it("queues releases behind one drain timer, not a timer each", function()
    local locks = h.locks()
    local keys, leases = {}, {}
    for i = 1, 50 do
      leases[i] = assert(locks:acquire("one-timer:" .. i))
      keys[i] = leases[i]._store.prefix .. "one-timer:" .. i
    end
    -- Queued in one go, as the log phases of one event loop turn do: one drain (or the
    -- threads of the last one, waiting for work) takes them all.
    local before = ngx.timer.pending_count()
    for i = 1, 50 do releases.enqueue(owner, leases[i], 0) end
    assert.is_true(ngx.timer.pending_count() - before <= 1)
    for i = 1, 50 do assert.is_true(gone(keys[i], 1.0), keys[i] .. " still held") end
  end)

  it("releases many queued leases, with more queued than one timer's share", function()
    local locks = h.locks()
    local keys = {}
    for i = 1, 300 do
      local lease = assert(locks:acquire("many:" .. i))
      keys[i] = lease._store.prefix .. "many:" .. i
      releases.enqueue(owner, lease, 0)
    end
    for i = 1, 300, 37 do assert.is_true(gone(keys[i], 1.0), keys[i] .. " still held") end
    assert.is_true(gone(keys[300], 1.0))
  end)
end)

h.check_error_logs({
  "dlock: gateway release queue: spec/inflight_spec%.lua:%d+: broken lease",  -- the work that raises on purpose
})
