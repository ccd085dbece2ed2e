-- At lua_max_running_timers, for a moment: nginx drops a timer whose time
-- comes while every running timer is taken ("N lua_max_running_timers are not
-- enough", at alert), without calling it, though ngx.timer.at had said ok. What
-- the library starts in such a moment must be started again once it has
-- passed, not be taken for running for good. Real nginx
-- (nginx/spec-timer-limits.conf, one worker, 8 running timers), real redis-server.
local h = require "helpers"

local function start()
  return h.start_nginx("spec-timer-limits.conf", { RUNNING = 8 })
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
end)

h.check_error_logs({
  -- The moment itself: nginx drops the timers, and says so.
  { "8 lua_max_running_timers are not enough", max = 4 },
})
