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

h.check_error_logs()
