-- Reentrancy (dlock.new({ reentrant = true })): a caller that already holds a
-- key gets a nested lease instead of waiting for itself; the Redis key stays a
-- plain string with a PX expiry, freed with the last lease.
local h = require "helpers"

local function in_timer(fn)
  local done, a, b = false, nil, nil
  assert(ngx.timer.at(0, function() a, b = fn(); done = true end))
  for _ = 1, 200 do
    if done then break end
    ngx.sleep(0.01)
  end
  assert.is_true(done)
  return a, b
end

describe("reentrant locks", function()
  it("give a caller that holds the key a nested lease at once, and free the key with the last release", function()
    local locks = h.locks({ reentrant = true })
    local outer = assert(locks:acquire("r", { ttl = 5000 }))
    local inner, err = locks:acquire("r", { ttl = 5000, wait = 0 })
    assert.is_nil(err)
    assert.equal(outer.token, inner.token)
    -- Still an ordinary lock in Redis: a string with a ttl, as other clients expect.
    assert.equal("string", h.cmd(nil, "type", locks.prefix .. "r"))
    assert.equal(outer.token, h.cmd(nil, "get", locks.prefix .. "r"))
    assert.is_true(h.cmd(nil, "pttl", locks.prefix .. "r") > 0)
    assert.is_true(inner:release())
    assert.equal(outer.token, h.cmd(nil, "get", locks.prefix .. "r"))
    assert.is_true(outer:valid())
    assert.is_true(outer:release())
    assert.equal(ngx.null, h.cmd(nil, "get", locks.prefix .. "r"))
  end)

  it("keep the key until the last lease is released, whatever the order", function()
    local locks = h.locks({ reentrant = true })
    local a = assert(locks:acquire("o", { ttl = 5000 }))
    local b = assert(locks:acquire("o", { ttl = 5000 }))
    local c = assert(locks:acquire("o", { ttl = 5000 }))
    assert.is_true(a:release())
    assert.is_true(c:release())
    assert.equal(b.token, h.cmd(nil, "get", locks.prefix .. "o"))
    local _, again = a:release()
    assert.equal("not_owner", again)  -- a handle is released once
    assert.is_true(b:release())
    assert.equal(ngx.null, h.cmd(nil, "get", locks.prefix .. "o"))
  end)

  it("still exclude every other caller: a timer of the same worker gets busy", function()
    local locks = h.locks({ reentrant = true })
    local l = assert(locks:acquire("x", { ttl = 5000 }))
    local lease, err = in_timer(function() return locks:acquire("x", { wait = 0 }) end)
    assert.is_nil(lease)
    assert.equal("busy", err)
    assert.is_true(l:release())
  end)

  it("are opt-in: without reentrant = true the holder waits for itself like anyone else", function()
    local locks = h.locks()
    local l = assert(locks:acquire("n", { ttl = 5000 }))
    local _, err = locks:acquire("n", { wait = 0 })
    assert.equal("busy", err)
    assert.is_true(l:release())
  end)

  it("take the key again for real once the outer lease has expired", function()
    local locks = h.locks({ reentrant = true })
    local old = assert(locks:acquire("e", { ttl = 100 }))
    ngx.sleep(0.2)
    local new = assert(locks:acquire("e", { ttl = 5000, wait = 0 }))
    assert.are_not.equal(old.token, new.token)
    assert.equal(new.token, h.cmd(nil, "get", locks.prefix .. "e"))
    assert.is_true(new:release())
  end)

  it("work with with(): nested with() calls on one key do not deadlock", function()
    local locks = h.locks({ reentrant = true })
    local r = locks:with("w", { wait = 100 }, function()
      return locks:with("w", { wait = 100 }, function() return "inner" end)
    end)
    assert.equal("inner", r)
    assert.equal(ngx.null, h.cmd(nil, "get", locks.prefix .. "w"))
  end)

  it("refuse a reentrant option that is not a boolean", function()
    local _, err = require("resty.dlock").new({ dict = "dlock", reentrant = 1 })
    assert.equal("dlock: reentrant must be a boolean, got 1", err)
  end)
end)

h.check_error_logs()
