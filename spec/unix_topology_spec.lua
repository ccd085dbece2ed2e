-- The core behaviours of spec/topology/suite.lua on a redis-server reached by
-- its unix socket, with a password and the README's least-privilege ACL user;
-- then what a socket adds: the server restarted on the same path.
local h = require "helpers"
local suite = require "topology.suite"

describe("redis on a unix socket", function()
  local t = suite.topology("unix")
  setup(t.start)
  teardown(t.stop)
  suite.run(t)

  it("goes on at once after the server restarts on the same socket: no call fails on a pooled connection it left", function()
    local l = t.locks()
    local function round(tag)
      local threads, errs = {}, {}
      for i = 1, 20 do
        threads[i] = ngx.thread.spawn(function()
          local lease, err = l:acquire(tag .. i)
          if not lease then return err end
          local _, rerr = lease:release()
          return rerr
        end)
      end
      for i = 1, 20 do
        local _, err = ngx.thread.wait(threads[i])
        if err then errs[#errs + 1] = err end
      end
      return errs
    end
    assert.same({}, round("before"))   -- the pool holds connections to the first server now
    local r = t.handle
    local args = r.args
    assert(r.stop())
    t.handle = h.start_redis(r.port, unpack(args))
    t.handle.sock, t.handle.args = r.sock, args
    local lease, err = l:acquire("first")
    assert.is_nil(err)
    assert.is_true(lease:release())
    assert.same({}, round("after"))
  end)
end)

describe("an operator's nginx whose workers run as nobody, on the Redis beside it by its unix socket with a password " ..
         "(nginx/spec-unix.conf)", function()
  local PASSWORD = "unix-default-7"
  local sock, r, n
  --- redis-server on the socket; unless `private`, the socket's group is the workers'
  --- (nobody's is nogroup), as an operator adds www-data to redis' group.
  local function start_server(private)
    r = h.start_redis(r and r.port, "--unixsocket " .. sock .. " --unixsocketperm " .. (private and "700" or "770") ..
      " --requirepass " .. PASSWORD)
    if not private then assert(h.sh("chgrp nogroup " .. sock)) end
  end

  setup(function()
    local dir = h.env.prefix .. "/" .. h.unique("unixgw")
    sock = dir .. "/redis.sock"
    local lib = h.public_lib(dir)
    start_server()
    n = h.start_nginx("spec-unix.conf", { LIB = lib, SOCKET = sock, PASSWORD = PASSWORD })
  end)
  teardown(function()
    if n then n.stop() end
    if r then r.stop() end
  end)

  local function four(key)
    return h.together(n.port, "/g?hold=0.6&key=" .. key, 4, function()
      assert.equal(1, h.cmd(r.port, "zcard", h.guard_key("one_at_a_time", key)))
    end)
  end

  it("lets one request of a key into the backend and refuses the others with 429, the permit given back after", function()
    local key = h.unique("k")
    assert.same({ 200, 429, 429, 429 }, four(key))
    assert.is_true(h.eventually(2, function() return h.cmd(r.port, "zcard", h.guard_key("one_at_a_time", key)) == 0 end))
  end)

  --- The dlock lines of n's error log written after `from` bytes.
  local function said(from)
    local out = {}
    for line in n.error_log():sub(from + 1):gmatch("[^\n]+") do
      if line:find("dlock: ", 1, true) then out[#out + 1] = line end
    end
    return table.concat(out, "\n")
  end

  it("denies while the workers may not open the socket, saying which permission they lack, and decides again once they may", function()
    local from = #n.error_log()
    assert(r.stop())
    start_server(true)
    assert.equal(503, assert(h.http(n.port, "/g?key=" .. h.unique("k"))).status)
    assert.matches("unix:" .. sock:gsub("%p", "%%%0") .. ": permission denied %(nginx's worker processes, as the user " ..
      "nginx%.conf's user directive names, need write permission on the socket: redis%.conf's unixsocketperm", said(from))
    assert(r.stop())
    start_server()
    assert.is_true(h.eventually(8, function()
      return assert(h.http(n.port, "/g?key=" .. h.unique("k"))).status == 200
    end), "still refused once the socket was open to the workers")
  end)

  it("denies while redis-server is stopped, saying no socket is there, and decides again once it is back", function()
    local from = #n.error_log()
    assert(r.stop())
    assert.equal(503, assert(h.http(n.port, "/g?key=" .. h.unique("k"))).status)
    assert.matches("no such file or directory %(no socket at that path: is redis%-server running, with unixsocket set to it%?%)",
      said(from))
    start_server()
    assert.is_true(h.eventually(8, function()
      return assert(h.http(n.port, "/g?key=" .. h.unique("k"))).status == 200
    end), "still refused once redis-server was back")
  end)
end)

-- What the two outages above cause on purpose: nginx's own line for each refused connect, and the guard's.
h.check_error_logs({
  { "connect%(%) to unix:[^ ]+/redis%.sock failed %(13: Permission denied%)", max = 12 },
  { "connect%(%) to unix:[^ ]+/redis%.sock failed %(2: No such file or directory%)", max = 12 },
  { "dlock: [^\n]*unix:[^ ]+/redis%.sock: permission denied", max = 12 },
  { "dlock: [^\n]*unix:[^ ]+/redis%.sock: no such file or directory", max = 12 },
})
