-- resty.dlock.compat: lua-resty-lock's API (new, lock, unlock, expire, with its
-- return values and errors, as its README documents them) on a lock that
-- excludes every nginx sharing the Redis, not only the workers of one.
local h = require "helpers"
local resty_lock = require "resty.dlock.compat"

local PREFIX = "dlock:compat:"

local function held_in_redis(key)
  return h.cmd(nil, "get", PREFIX .. key)
end

describe("resty.dlock.compat, lua-resty-lock's API", function()
  local peer

  setup(function()
    assert(resty_lock.configure({ redis = { port = h.redis_port } }))
    peer = h.start_nginx("spec-peer.conf", { WORKERS = 2 })
  end)

  teardown(function()
    if peer then peer.stop() end
  end)

  it("lock takes a number key as its string, as lua-resty-lock's shared dict does", function()
    local lock = assert(resty_lock:new("dlock", { timeout = 0 }))
    local elapsed, err = lock:lock(4242)
    assert.is_nil(err)
    assert.equal(0, elapsed)
    assert.is_string(held_in_redis("4242"))
    assert.equal(1, lock:unlock())
  end)

  it("lock returns 0 when the key is free, and unlock returns 1 and frees the key in Redis", function()
    local lock = assert(resty_lock:new("dlock"))
    local elapsed, err = lock:lock("free")
    assert.is_nil(err)
    assert.equal(0, elapsed)
    assert.is_string(held_in_redis("free"))
    assert.equal(1, lock:unlock())
    assert.equal(ngx.null, held_in_redis("free"))
  end)

  it("new answers \"dictionary not found\" for a dict nginx does not have, like lua-resty-lock", function()
    local lock, err = resty_lock:new("no_such_dict")
    assert.is_nil(lock)
    assert.equal("dictionary not found", err)
  end)

  it("lock(nil) answers \"nil key\"; a second lock on the same object answers \"locked\"", function()
    local lock = assert(resty_lock:new("dlock"))
    assert.same({ nil, "nil key" }, { lock:lock(nil) })
    assert.equal(0, lock:lock("twice"))
    assert.same({ nil, "locked" }, { lock:lock("other") })
    assert.same({ nil, "locked" }, { lock:lock("twice") })
    assert.equal(1, lock:unlock())
  end)

  it("unlock and expire without a lock answer \"unlocked\"", function()
    local lock = assert(resty_lock:new("dlock"))
    assert.same({ nil, "unlocked" }, { lock:unlock() })
    assert.same({ nil, "unlocked" }, { lock:expire(10) })
    assert.equal(0, lock:lock("once"))
    assert.equal(1, lock:unlock())
    assert.same({ nil, "unlocked" }, { lock:unlock() })
  end)

  it("a second object waits for the holder and returns the seconds it waited (more than 0)", function()
    local holder = assert(resty_lock:new("dlock"))
    assert.equal(0, holder:lock("waited"))
    local t = ngx.thread.spawn(function()
      local waiter = assert(resty_lock:new("dlock", { timeout = 3 }))
      local elapsed, err = waiter:lock("waited")
      local unlocked = waiter:unlock()
      return elapsed, err, unlocked
    end)
    ngx.sleep(0.2)
    assert.equal(1, holder:unlock())
    local ok, elapsed, err, unlocked = ngx.thread.wait(t)
    assert.is_true(ok)
    assert.is_nil(err)
    assert.is_true(elapsed > 0.1 and elapsed < 2, "waited " .. tostring(elapsed))
    assert.equal(1, unlocked)
  end)

  it("answers \"timeout\" once the timeout has passed, and at once with timeout = 0", function()
    local holder = assert(resty_lock:new("dlock"))
    assert.equal(0, holder:lock("busy"))
    ngx.update_time()
    local t0 = ngx.now()
    local waiter = assert(resty_lock:new("dlock", { timeout = 0.3 }))
    assert.same({ nil, "timeout" }, { waiter:lock("busy") })
    ngx.update_time()
    assert.is_true(ngx.now() - t0 >= 0.25, "gave up after " .. (ngx.now() - t0))
    local impatient = assert(resty_lock:new("dlock", { timeout = 0 }))
    assert.same({ nil, "timeout" }, { impatient:lock("busy") })
    assert.equal(1, holder:unlock())
  end)

  it("lets the key expire after exptime, as lua-resty-lock does, and expire() resets its expiry", function()
    local lock = assert(resty_lock:new("dlock", { exptime = 0.3 }))
    assert.equal(0, lock:lock("exp"))
    local pttl = h.cmd(nil, "pttl", PREFIX .. "exp")
    assert.is_true(pttl > 0 and pttl <= 300, "pttl " .. pttl)
    assert.is_true(lock:expire(10))
    assert.is_true(h.cmd(nil, "pttl", PREFIX .. "exp") > 9000)
    assert.is_true(lock:expire())  -- back to exptime
    assert.is_true(h.cmd(nil, "pttl", PREFIX .. "exp") <= 300)
    ngx.sleep(0.4)
    assert.equal(ngx.null, held_in_redis("exp"))
    local other = assert(resty_lock:new("dlock", { timeout = 0 }))
    assert.equal(0, other:lock("exp"))
    assert.equal(1, other:unlock())
    -- Its lease ran out and another took the key: unlocking says so instead of freeing theirs.
    assert.same({ nil, "not_owner" }, { lock:unlock() })
  end)

  it("excludes the workers of another nginx: the peer waits while this nginx holds the key", function()
    local lock = assert(resty_lock:new("dlock"))
    assert.equal(0, lock:lock("fleet"))
    local t = ngx.thread.spawn(function()
      return h.http(peer.port, "/compat-hold?key=fleet&hold=0", { timeout = 10000 })
    end)
    ngx.sleep(0.3)
    assert.equal(1, lock:unlock())
    local ok, res = ngx.thread.wait(t)
    assert.is_true(ok)
    assert.equal(200, res.status)
    local elapsed, unlocked = res.body:match("^(%S+) (%S+)")
    assert.is_true(tonumber(elapsed) >= 0.2, res.body)
    assert.equal("1", unlocked)
    -- And the other way round: while the peer holds it, this nginx waits.
    local t2 = ngx.thread.spawn(function()
      return h.http(peer.port, "/compat-hold?key=fleet2&hold=300", { timeout = 10000 })
    end)
    ngx.sleep(0.1)
    local waiter = assert(resty_lock:new("dlock", { timeout = 3 }))
    local waited = assert(waiter:lock("fleet2"))
    assert.is_true(waited >= 0.1, "waited " .. waited)
    assert.equal(1, waiter:unlock())
    assert.is_true(ngx.thread.wait(t2))
  end)

  it("refuses bad options with an error naming the option and the value", function()
    local cases = {
      { { exptime = -1 }, "dlock: exptime must be a number of seconds from 0.001 to 86400, got -1" },
      { { timeout = "5" }, "dlock: timeout must be a number of seconds from 0 to 86400, got \"5\"" },
      { { step = 0 }, "dlock: step must be a positive number, got 0" },
      { { exptme = 5 }, "unknown" },
    }
    for _, c in ipairs(cases) do
      local lock, err = resty_lock:new("dlock", c[1])
      assert.is_nil(lock)
      assert.is_truthy(err:find(c[2], 1, true), err)
    end
    local ok, err = resty_lock.configure({ redis = { port = "x" } })
    assert.is_nil(ok)
    assert.matches("port", err)
    assert.is_nil((resty_lock.configure({ prefx = "a" })))
  end)

  it("answers not_owner to an unlock after exptime, also when nobody took the key since (the exclusion was over)", function()
    local lock = assert(resty_lock:new("dlock", { exptime = 0.2 }))
    local key = h.unique("ranout")
    assert.equal(0, lock:lock(key))
    ngx.sleep(0.3)
    assert.equal(ngx.null, h.cmd(nil, "get", "dlock:compat:" .. key))
    assert.same({ nil, "not_owner" }, { lock:unlock() })
    assert.same({ nil, "unlocked" }, { lock:unlock() })
  end)

  h.check_error_logs({})
end)
