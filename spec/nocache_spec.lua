-- A developer's nginx.conf: lua_code_cache off (nginx/spec-nocache.conf), every
-- request in a Lua VM of its own. Guards and a locks factory made by a module
-- that init_by_lua loads decide as they do with the cache on, leases end with
-- their requests, and what each VM starts (its pipelines' senders) ends once
-- it is idle: the worker is back to its memory and to the one timer its own VM
-- keeps pending (crash recovery's exit watch, from init_worker).
local h = require "helpers"

local n, redis

local function get(path)
  return assert(h.http(n.port, path))
end

--- The statuses of two requests for path, the second sent 100 ms after the first.
local function overlapping(path)
  return h.parallel(2, function(i)
    if i > 1 then ngx.sleep(0.1) end
    return get(path).status
  end)
end

--- True once the worker runs no timer but the exit watch of its own VM (polled), false after `seconds`.
local function no_timers(seconds)
  return h.eventually(seconds, function()
    if get("/timers").body ~= "1\n" then ngx.sleep(0.5) return false end
    return true
  end)
end

--- The worker's resident memory in kB.
local function rss()
  local f = assert(io.open("/proc/" .. n.workers()[1] .. "/status"))
  local kb = tonumber(f:read("*a"):match("VmRSS:%s*(%d+)"))
  f:close()
  return kb
end

describe("lua_code_cache off", function()
  local name

  setup(function()
    redis = h.start_redis()
    name = h.unique("nocache")
    n = h.start_nginx("spec-nocache.conf", { REDIS_PORT = redis.port, NAME = name, BACKEND_PORT = h.free_port() })
  end)

  teardown(function()
    if n then n.stop() end
  end)

  it("a rate guard admits its limit per key and refuses the rest with 429", function()
    local got = {}
    for i = 1, 4 do got[i] = get("/rate?k=a").status end
    assert.same({ 200, 200, 429, 429 }, got)
    assert.equal(200, get("/rate?k=b").status)
  end)

  it("a mutex guard refuses a second request while the first runs, and lets the next one through once it ended", function()
    assert.same({ 200, 503 }, overlapping("/mutex?k=m&ms=400"))
    assert.equal(200, get("/mutex?k=m").status)
    -- Released from the log phase, after the response: nothing left under the guard's prefix soon after.
    assert.is_true(h.eventually(2, function()
      return #h.cmd(redis.port, "keys", "nocache:" .. name .. ":mutex:*") == 0
    end))
  end)

  it("a dedup guard answers a duplicate in flight 409, and its key is free after the response", function()
    assert.same({ 200, 409 }, overlapping("/dedup?k=d&ms=400"))
    assert.equal(200, get("/dedup?k=d").status)
  end)

  it("a lock taken in a handler gets a random token, and its key is gone after its release", function()
    local res = get("/lock?k=l1")
    assert.equal(200, res.status)
    assert.matches("^" .. ("%x"):rep(32) .. "\n$", res.body)
    assert.equal(ngx.null, h.cmd(redis.port, "get", "nocache:" .. name .. ":lock:l1"))
  end)

  it("what each request's VM starts ends within seconds of the last request: no timer left, the memory back", function()
    assert(no_timers(15), "timers still running 15 s after the specs above")
    local before = rss()
    for i = 1, 150 do
      assert.equal(200, get("/lock?k=load" .. i).status)
      get("/rate?k=load" .. i)
    end
    local busy = tonumber(get("/timers").body)
    assert.is_true(busy > 1, "no timer while 150 VMs were just used")
    assert(no_timers(20), "timers still running 20 s after the last request")
    -- The VMs go with their last timers; what stays is within a few MB of before.
    assert(h.eventually(5, function()
      collectgarbage()
      if rss() > before + 8192 then ngx.sleep(0.5) return false end
      return true
    end), "the worker holds " .. (rss() - before) .. " kB more than before the 150 requests")
  end)
end)

-- nginx's own alert at start, which is why the code cache is on in production.
h.check_error_logs({ { "%[alert%] .*lua_code_cache is off; this will hurt performance", max = 2 } })
