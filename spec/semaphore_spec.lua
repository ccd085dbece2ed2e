-- resty.dlock.semaphore: a counting semaphore of per-holder leases in Redis.
local h = require "helpers"
local semaphore = require "resty.dlock.semaphore"

local function sem(opts)
  local o = { dict = "dlock", redis = h.redis_opts(), prefix = h.unique("sem"), permits = 3 }
  for k, v in pairs(opts or {}) do o[k] = v end
  return assert(semaphore.new(o))
end

describe("resty.dlock.semaphore", function()
  it("hands out exactly `permits` permits per key, then says busy with the earliest expiry", function()
    local s = sem({ permits = 3 })
    local p = {}
    for i = 1, 3 do p[i] = assert(s:acquire("k", { ttl = 5000 })) end
    local none, err, retry_after = s:acquire("k", { ttl = 5000 })
    assert.is_nil(none)
    assert.equal("busy", err)
    assert.is_true(retry_after > 4000 and retry_after <= 5000)
    assert.equal(3, h.cmd(nil, "zcard", s.prefix .. "k"))
    -- Another key has its own permits.
    assert(s:acquire("other")):release()
    assert.is_true(p[2]:release())
    local again = assert(s:acquire("k"))
    for _, x in ipairs({ p[1], p[3], again }) do assert.is_true(x:release()) end
  end)

  it("gets capacity back when a holder's permit expires (a crashed nginx leaks nothing)", function()
    local s = sem({ permits = 1 })
    assert(s:acquire("k", { ttl = 150 }))   -- never released
    local p, err = s:acquire("k", { wait = 1000 })
    assert.is_nil(err)
    assert.is_true(p:release())
  end)

  it("lets a waiter in when a permit is released", function()
    local s = sem({ permits = 2 })
    local a = assert(s:acquire("k", { ttl = 10000 }))
    assert(s:acquire("k", { ttl = 10000 }))
    ngx.thread.spawn(function() ngx.sleep(0.1) a:release() end)
    local p, err = s:acquire("k", { wait = 2000 })
    assert.is_nil(err)
    assert.is_table(p)
  end)

  it("times out when no permit frees up", function()
    local s = sem({ permits = 1 })
    assert(s:acquire("k", { ttl = 10000 }))
    local p, err, retry_after = s:acquire("k", { wait = 200 })
    assert.is_nil(p)
    assert.equal("timeout", err)
    assert.is_true(retry_after > 9000)
  end)

  it("an expired permit can neither release nor extend, and does not free a live one", function()
    local s = sem({ permits = 1 })
    local old = assert(s:acquire("k", { ttl = 100 }))
    ngx.sleep(0.15)
    local new = assert(s:acquire("k", { ttl = 5000 }))
    assert.same({ nil, "not_owner" }, { old:release() })
    assert.same({ nil, "not_owner" }, { old:extend(5000) })
    local _, err = s:acquire("k")
    assert.equal("busy", err)
    assert.is_true(new:extend(8000))
    assert.is_true(h.cmd(nil, "pttl", s.prefix .. "k") > 7000)
    assert.is_true(new:release())
  end)

  it("records each permit in held()", function()
    local s = sem({ permits = 2 })
    local a = assert(s:acquire("k"))
    local b = assert(s:acquire("k"))
    local n = 0
    for _, l in ipairs(s:held()) do if l.key == "k" and (l.token == a.token or l.token == b.token) then n = n + 1 end end
    assert.equal(2, n)
    a:release(); b:release()
  end)

  it("holds the limit under 60 concurrent light threads: never more than 3 inside", function()
    local s = sem({ permits = 3 })
    local inside, max, got = 0, 0, 0
    h.parallel(60, function()
      local p = s:acquire("k", { ttl = 5000, wait = 5000 })
      if p then
        got = got + 1
        inside = inside + 1
        if inside > max then max = inside end
        ngx.sleep(0.005)
        inside = inside - 1
        p:release()
      end
    end)
    assert.equal(60, got)
    assert.equal(3, max)
  end)

  it("extends and releases permits and locks of one list together (extendAll, releaseAll)", function()
    local batch = require "resty.dlock.core.batch"
    local s = sem({ permits = 2 })
    local locks = h.locks()
    local list = { assert(s:acquire("k", { ttl = 1000 })), assert(locks:acquire("k", { ttl = 2000 })),
                   assert(s:acquire("k", { ttl = 3000 })) }
    ngx.update_time()
    local before = ngx.now()
    assert.same({ true, true, true }, batch.extendAll(list))
    ngx.update_time()
    -- Each permit's extend is a script call of its own on Redis' clock (one pipeline): the two
    -- can fall in different ms, never further apart than the round trip took.
    local apart = math.ceil((ngx.now() - before) * 1000) + 1
    local score = tonumber(h.cmd(nil, "zscore", s.prefix .. "k", list[3].token))
    local first = tonumber(h.cmd(nil, "zscore", s.prefix .. "k", list[1].token))
    assert.is_true(math.abs(score - first - 2000) <= apart,
      "each permit to its own ttl: " .. (score - first) .. " ms apart, 2000 +- " .. apart .. " expected")
    assert.is_true(h.cmd(nil, "pttl", locks.prefix .. "k") > 1900)
    assert.same({ 0, nil }, { batch.releaseAll(list) })
    assert.equal(0, h.cmd(nil, "exists", s.prefix .. "k"))
    assert.equal(0, h.cmd(nil, "exists", locks.prefix .. "k"))
    for _, l in ipairs(list) do assert.same({ nil, "not_owner" }, { l:release() }) end
  end)

  it("keeps a permit whose release failed, so that release() can be retried once Redis answers", function()
    local r = h.start_redis()
    finally(r.stop)
    local s = assert(semaphore.new({ dict = "dlock", prefix = h.unique("sem"), permits = 1,
                                     redis = { port = r.port, read_timeout = 200 } }))
    local p = assert(s:acquire("k", { ttl = 10000 }))
    r.signal("STOP")
    local ok, err = p:release()
    assert.is_nil(ok)
    assert.matches("timeout during semaphore release$", err)
    r.signal("CONT")
    assert.same({ true }, { p:release() })
    assert.equal(0, h.cmd(r.port, "exists", s.prefix .. "k"))
    assert(s:acquire("k", { wait = 0 })):release()
  end)

  it("rejects bad permits and unknown options", function()
    local _, err = semaphore.new({ dict = "dlock", permits = 0 })
    assert.equal("dlock: permits must be a positive integer, got 0", err)
    _, err = semaphore.new({ dict = "dlock" })
    assert.equal("dlock: permits must be a positive integer, got nil", err)
    _, err = semaphore.new({ dict = "dlock", permits = 2, owner = "worker" })
    assert.equal('dlock: unknown option in semaphore.new options, got "owner"', err)
  end)
end)

h.check_error_logs({
  { "lua tcp socket read timed out", max = 1 },  -- the release sent to a stopped Redis
})
