-- core/clock: the one place the library reads the time and waits for it.
-- nginx's timers count whole ms: a wait of less than 1 ms is a wait of none
-- (ngx.sleep(0), a semaphore's wait returning "timeout" at once), which a
-- loop waiting for its deadline spins through, and for which a stock nginx
-- logs "[warn] ngx.sleep(0) called without delayed events patch" each time
-- (this file's last test fails on that line).
local h = require "helpers"
local clock = require "resty.dlock.core.clock"

describe("core/clock", function()
  it("now() is the event loop's cached time, as ngx.now() reads it", function()
    ngx.update_time()
    assert.equal(ngx.now(), clock.now())
    ngx.sleep(0.01)
    assert.equal(ngx.now(), clock.now())
  end)

  it("timeout() is 1 ms for anything shorter, else the time it is given", function()
    assert.equal(0.001, clock.timeout(0))
    assert.equal(0.001, clock.timeout(0.0004))
    assert.equal(0.001, clock.timeout(-0.2))
    assert.equal(0.001, clock.timeout(0.001))
    assert.equal(0.0015, clock.timeout(0.0015))
    assert.equal(2.5, clock.timeout(2.5))
  end)

  it("sleep() of less than 1 ms waits for the next ms and logs nothing", function()
    -- Each would be an ngx.sleep(0) and a [warn] line on a stock nginx.
    for _ = 1, 20 do
      ngx.update_time()
      local t0 = ngx.now()
      clock.sleep(0.0002)
      ngx.update_time()
      -- ngx.now() counts whole ms (a float: 0.001 may read 0.00099993).
      assert.is_true(ngx.now() - t0 >= 0.0009, "slept " .. (ngx.now() - t0) .. " s")
    end
  end)

  it("a semaphore wait of timeout(less than 1 ms) yields to the worker instead of returning at once", function()
    local sem = require("ngx.semaphore").new(0)
    local ran = false
    assert(ngx.timer.at(0, function() ran = true end))
    -- What the library did before: wait(0.0004) answers "timeout" at once, the timer not run yet.
    local ok, err = sem:wait(0.0004)
    assert.is_falsy(ok)
    assert.equal("timeout", err)
    assert.is_false(ran)
    ok, err = sem:wait(clock.timeout(0.0004))
    assert.is_falsy(ok)
    assert.equal("timeout", err)
    assert.is_true(ran)
  end)
end)

h.check_error_logs()
