-- Crash recovery: the leases of a worker that died without running its Lua
-- (SIGKILL) are released, owner-checked, by the worker nginx starts in its
-- place, from the shared-dict records; leases of live workers are untouched.
local h = require "helpers"

--- GET /crash-hold?key=K on a connection kept open: { pid, lock token, permit token, sock }.
local function hold(port, key)
  local sock = ngx.socket.tcp()
  sock:settimeout(5000)
  assert(sock:connect("127.0.0.1", port))
  assert(sock:send("GET /crash-hold?key=" .. key .. " HTTP/1.1\r\nHost: x\r\n\r\n"))
  while true do
    local line = assert(sock:receive("*l"))
    local pid, lt, pt = line:match("^(%d+) (%S+) (%S+)$")
    if pid then return { pid = tonumber(pid), lock = lt, permit = pt, sock = sock } end
  end
end

local now = h.now

describe("crash recovery", function()
  local peer
  setup(function() peer = h.start_nginx("spec-peer.conf", { WORKERS = 2 }) end)
  teardown(function() if peer then peer.stop() end end)

  it("releases the leases of a SIGKILLed worker within a second, and not those of the worker still alive", function()
    local prefix = h.unique("k")
    -- Two holders in two different workers.
    local a = hold(peer.port, prefix .. "a")
    local b
    for i = 1, 20 do
      b = hold(peer.port, prefix .. "b" .. i)
      if b.pid ~= a.pid then break end
      b.sock:close()
      b = nil
    end
    assert.is_truthy(b, "both requests landed in one worker")
    assert.equal(a.lock, h.cmd(nil, "get", "crash:" .. prefix .. "a"))
    assert.is_truthy(h.cmd(nil, "zscore", "crash:sem:" .. prefix .. "a", a.permit) ~= ngx.null)

    local t0 = now()
    assert(h.sh("kill -KILL " .. a.pid))
    -- The ttl is 60 s: only recovery frees these keys this soon.
    local freed
    while now() - t0 < 3 do
      if h.cmd(nil, "get", "crash:" .. prefix .. "a") == ngx.null
        and h.cmd(nil, "zscore", "crash:sem:" .. prefix .. "a", a.permit) == ngx.null then
        freed = now() - t0
        break
      end
      ngx.sleep(0.02)
    end
    assert.is_truthy(freed, "the dead worker's lock and permit are still taken after 3 s")
    assert.is_true(freed < 1, "freed after " .. tostring(freed) .. " s")
    -- The live worker's lease is untouched.
    a.sock:close()
    local held = h.cmd(nil, "keys", "crash:" .. prefix .. "b*")
    assert.equal(1, #held)
    assert.equal(b.lock, h.cmd(nil, "get", held[1]))
    b.sock:close()
  end)

  it("never releases a key a successor took after the dead worker's lease", function()
    local prefix = h.unique("s")
    local a = hold(peer.port, prefix)
    -- The lock is deleted and taken by someone else before the worker dies.
    h.cmd(nil, "set", "crash:" .. prefix, "successor", "px", 10000)
    assert(h.sh("kill -KILL " .. a.pid))
    a.sock:close()
    ngx.sleep(1)
    assert.equal("successor", h.cmd(nil, "get", "crash:" .. prefix))
    h.cmd(nil, "del", "crash:" .. prefix)
  end)
end)

h.check_error_logs({
  "worker process %d+ exited on signal 9",  -- the SIGKILLed peer workers
})
