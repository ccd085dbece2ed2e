-- A worker's questions to Redis (core/question.ts: the sentinels' master, a
-- Cluster's slot map), asked once for all callers by a timer of the worker, at
-- nginx's timer limits: a question whose timer nginx dropped is asked by a
-- waiter, not waited out. Real nginx (the spec worker), real redis Cluster.
local h = require "helpers"

local function since(t0)
  ngx.update_time()
  return ngx.now() - t0
end

--- Take every running timer of this worker (lua_max_running_timers, 1024 in nginx/spec.conf) for s seconds.
local function fill_running(s)
  local max = 1024
  local n = max - ngx.timer.running_count()
  for _ = 1, n do assert(ngx.timer.at(0, function(p) if not p then ngx.sleep(s) end end)) end
  ngx.sleep(0.05)
  assert.equal(max, ngx.timer.running_count(), "the running timers did not fill")
end

describe("a question whose timer nginx dropped (every running timer taken for a moment)", function()
  it("is asked by its waiter: a Cluster's first acquire made in the moment is answered soon after it, not after the read's whole bound", function()
    local c = h.start_cluster()
    finally(function() c.stop() end)
    local locks = c.locks("qdrop")
    -- The moment: 1.2 s. The slot map's question (a timer at 0) is started in it, and dropped.
    fill_running(1.2)
    local t0 = h.now()
    local l, err = locks:acquire("k", { wait = 0 })
    local took = math.floor(since(t0) * 10) / 10
    if l then l:release() end
    -- Waiting out the bound: (masters + seeds) * (connect + 3 * read) + 1 s, 7.6 s here, then failing.
    assert.is_true(took < 3, "the acquire took " .. took .. " s: " .. tostring(err))
    assert.is_not_nil(l, err)
  end)
end)

h.check_error_logs({
  -- The moment of this spec's own making: nginx says so once per timer it drops.
  "lua_max_running_timers are not enough",
})
