-- resty.dlock.compat where code written for lua-resty-lock meets its edges:
-- configure() without options, keys of any length lua-resty-lock takes, a
-- Redis that answers "not now", the same key named in two dicts, and an
-- unlock where the request ends (log phase), seen from a second nginx
-- (nginx/spec-compat-edges.conf).
local h = require "helpers"
local resty_lock = require "resty.dlock.compat"

describe("resty.dlock.compat at lua-resty-lock's edges", function()
  before_each(function()
    assert(resty_lock.configure({ redis = { port = h.redis_port } }))
  end)

  it("configure() and configure(nil) take every default and answer true", function()
    assert.same({ true }, { resty_lock.configure() })
    assert.same({ true }, { resty_lock.configure(nil) })
  end)

  it("the lock is the key in Redis, whatever dict the object names (README: Differences)", function()
    -- lua-resty-lock's lock is the pair (dict, key); here the Redis key layout
    -- leaves the dict out, and a fleet in a rolling upgrade must keep one layout.
    local key = h.unique("twodicts")
    local a = assert(resty_lock:new("dlock", { timeout = 0 }))
    local b = assert(resty_lock:new("dlock_other", { timeout = 0 }))
    assert.same({ 0 }, { a:lock(key) })
    assert.same({ nil, "timeout" }, { b:lock(key) })
    assert.equal(1, a:unlock())
    assert.same({ 0 }, { b:lock(key) })
    assert.equal(1, b:unlock())
  end)

  h.check_error_logs({})
end)
