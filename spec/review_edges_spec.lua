-- Where the day's changes meet ordinary life (a reviewer's findings): a light
-- thread killed in the middle of extend(), a Lua handler that holds the event
-- loop a moment, an upstream nginx could not even connect to (a 504 no backend
-- saw), and crash recovery of a guard whose prefix a Lua API factory shares.
-- Real nginx (the runner's, and nginx/spec-review-edges.conf), real redis-server.
local h = require "helpers"

describe("a lease whose extend() was in a light thread that got killed", function()
  it("is still renewed by the watchdog (renew = true): the key does not run out under its holder", function()
    local locks = h.locks()
    local lost
    local lease = assert(locks:acquire("killed", { ttl = 600, renew = true, on_lost = function(_, why) lost = why end }))
    -- The holder gives extend() its own thread and kills it (a deadline of its own,
    -- ngx.thread.kill), as it may kill any thread waiting on a cosocket.
    local t = ngx.thread.spawn(function() return lease:extend(600) end)
    assert(ngx.thread.kill(t))
    ngx.sleep(1.5)   -- 2.5 ttls: the watchdog renews every 180 ms
    local pttl = h.cmd(nil, "pttl", locks.prefix .. "killed")
    local other = h.locks({ prefix = locks.prefix }):acquire("killed", { ttl = 5000 })
    local still = lease:valid()
    if other then other:release() end
    lease:release()
    -- (lease._extending stayed true: the watchdog skips such a lease, for good, and no loss is told.)
    assert.is_true(other == nil, "a second holder took the key (PTTL " .. tostring(pttl) .. ", on_lost told: " ..
      tostring(lost) .. ", valid() = " .. tostring(still) .. ")")
    assert.is_true(pttl > 0)
  end)

  it("lets a later extend() go at once (it does not wait out a renewal that is not on its way)", function()
    local locks = h.locks()
    local lease = assert(locks:acquire("killed2", { ttl = 5000 }))
    local t = ngx.thread.spawn(function() return lease:extend(5000) end)
    assert(ngx.thread.kill(t))
    local took, ok, err = h.took(lease.extend, lease, 5000)
    lease:release()
    assert.is_true(ok, err)
    -- (It slept in quiesce() for connect_timeout + read_timeout, 1.5 s here.)
    assert.is_true(took < 0.3, "extend() took " .. took .. " s")
  end)
end)

describe("auto-pipelining when a Lua handler holds the event loop for a moment", function()
  it("sends a batch whose sender's timer was only late (a handler held the worker 1.2 s), never fails it unsent", function()
    local locks = h.locks()
    -- Four calls on their way at once go out directly (lanes.ts DIRECT): their pooled connections warmed.
    h.parallel(4, function(i) local l = assert(locks:acquire("warm" .. i)); assert(l:release()) end)
    -- Callers woken by an ngx.semaphore (as any application's are) run in nginx's posted events,
    -- after the timers of that turn of the event loop: four calls go out directly, the fifth opens
    -- a batch and starts its sender's timer, for the next turn. Then another woken handler holds
    -- the worker 1.2 s (a shell-out; a large decode does the same).
    local sem = require("ngx.semaphore").new(0)
    local threads = {}
    for i = 1, 5 do
      threads[i] = ngx.thread.spawn(function()
        sem:wait(5)
        local l, err = locks:acquire("k" .. i, { ttl = 5000 })
        if not l then return "acquire: " .. tostring(err) end
        local ok, rerr = l:release()
        return ok and "ok" or ("release: " .. tostring(rerr))
      end)
    end
    threads[6] = ngx.thread.spawn(function() sem:wait(5); os.execute("sleep 1.2"); return "ok" end)
    sem:post(6)
    local out = {}
    for i = 1, 6 do
      local ok, res = ngx.thread.wait(threads[i])
      out[i] = ok and res or ("raised: " .. tostring(res))
    end
    -- (At the next turn the direct calls' replies came first, with the clock moved on 1.2 s: the
    -- first release found the batch open, no sender counted yet, its timer 1.2 s old, "taken for
    -- dropped": the fifth acquire failed, "the pipeline's sender never ran (lua_max_running_timers)",
    -- and a warn line said nginx dropped a timer it had not dropped. Its timer ran right after.)
    assert.same({ "ok", "ok", "ok", "ok", "ok", "ok" }, out)
  end)
end)

local BLACKHOLE = [==[
import socket, sys, time
l = socket.socket()
l.bind(("127.0.0.1", int(sys.argv[1])))
l.listen(0)
# Its one place in the listen queue taken, never accepted: later connects hang (SYNs dropped).
c = socket.socket()
c.connect(("127.0.0.1", int(sys.argv[1])))
open(sys.argv[2], "w").write("ready")
while True:
    time.sleep(3600)
]==]

--- A port nginx cannot connect to (its connects time out): started, ready.
local function blackhole()
  local port = h.free_port()
  local dir = h.env.prefix .. "/blackhole-" .. port
  assert(h.sh("mkdir -p " .. dir))
  local f = assert(io.open(dir .. "/bh.py", "w"))
  f:write(BLACKHOLE)
  f:close()
  assert(h.sh(string.format("/usr/bin/python3 %s/bh.py %d %s/ready > %s/log 2>&1 & echo $! > %s/pid", dir, port, dir, dir, dir)))
  local pid = tonumber(h.read_file(dir .. "/pid"))
  assert(pid, "no pid for the black hole")
  h.track(pid)
  assert(h.eventually(5, function() ngx.sleep(0.05) return h.read_file(dir .. "/ready") == "ready" end), "no black hole")
  return port, pid
end

local function start(vars)
  local own = h.free_port()
  local v = { OWN_BACKEND_PORT = own, BACKEND_PORT = own, BLACKHOLE_PORT = 1 }
  for k, x in pairs(vars or {}) do v[k] = x end
  local n = h.start_nginx("spec-review-edges.conf", v)
  n.backend = v.BACKEND_PORT
  return n
end

local function get(n, path)
  local res, err = h.http(n.port, path)
  assert(res, err)
  return res
end

--- The backend's witness for key: hits, most inside at once, inside now.
local function backend(n, key) return h.backend_stats(n.backend, key) end

describe("guards whose upstream nginx could not connect to (a 504 the backend never saw)", function()
  local n, bh, bhpid

  setup(function()
    bh, bhpid = blackhole()
    n = start({ BLACKHOLE_PORT = bh })
  end)

  teardown(function()
    if n then n.stop() end
    if bhpid then h.stop_pid(bhpid, "KILL") end
  end)

  it("releases a mutex at once after proxy_connect_timeout (nothing runs the job)", function()
    local key = h.unique("noconn")
    assert.equal(504, get(n, "/jobs-noconnect?key=" .. key).status)
    local hits = backend(n, key)
    assert.equal(0, hits)
    -- (Kept as a backend's that goes on: 503 for the ttl, 5 s, though no backend ever had the job.)
    -- Released from the log phase, after the response left: within a moment.
    assert.is_true(h.eventually(1, function() return get(n, "/jobs?key=" .. key .. "&ms=10").status == 200 end))
  end)

  it("gives back a concurrency permit at once after proxy_connect_timeout", function()
    local key = h.unique("noconn-cap")
    assert.equal(504, get(n, "/cap-noconnect?key=" .. key).status)
    -- One permit: given back from the log phase, after the response left, so within a moment.
    assert.is_true(h.eventually(1, function() return get(n, "/cap?key=" .. key .. "&ms=10").status == 200 end))
  end)

  it("releases a mutex whose request the next upstream answered whole (the first one could not be connected to)", function()
    local key = h.unique("next")
    local first = get(n, "/jobs-next?key=" .. key .. "&ms=10")
    assert.equal(200, first.status)
    local hits, _, inside = backend(n, key)
    assert.same({ 1, 0 }, { hits, inside })
    -- (Kept: $upstream_status "504, 200", so the job that ran once and ended locks its key out for 5 s.)
    assert.is_true(h.eventually(1, function() return get(n, "/jobs?key=" .. key .. "&ms=10").status == 200 end))
  end)
end)

describe("crash recovery of a guard whose prefix and dict a Lua API factory shares", function()
  it("leaves the guard's lease of a SIGKILLed worker to its ttl (its backend still runs the request)", function()
    local b = start()   -- the backend, in an nginx of its own: killing the guard's workers does not stop it
    local m = start({ BACKEND_PORT = b.backend })
    finally(function() m.stop(); b.stop() end)
    local key = h.unique("kill-shared")
    local t = h.spawn(h.http, m.port, "/shared?key=" .. key .. "&ms=3000")
    ngx.sleep(0.3)
    local _, _, inside = backend(b, key)
    assert.equal(1, inside)
    for _, w in ipairs(m.workers()) do assert(h.sh("kill -KILL " .. w)) end
    t()
    ngx.sleep(1.0)   -- the new workers' crash recovery has run
    local second = get(m, "/shared?key=" .. key .. "&ms=300")
    local _, max = backend(b, key)
    -- (The record matched the Lua API factory too, which is not kept: released at once, and a
    -- second run of the job started beside the first, as before 9d722b5.)
    assert.equal(1, max, "runs of the job at once (the second answered " .. second.status .. ")")
    assert.equal(503, second.status)
  end)
end)

h.check_error_logs({
  { "worker process %d+ exited on signal 9", max = 2 },  -- the SIGKILLed workers
  "upstream timed out %(110: Connection timed out%) while connecting to upstream",  -- the black hole, on purpose
})
