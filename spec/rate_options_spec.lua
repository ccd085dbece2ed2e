-- What resty.dlock.rate and a guard of mode rate refuse, and say: each bad
-- option named with its value, a key that is no key, Redlock (no one clock to
-- decide on), and a Redis that is not there. What a limit admits is in
-- rate_spec.lua.
local h = require "helpers"
local rate = require "resty.dlock.rate"
-- What a Redlock factory answers rate.new and a rate guard (the quorum backend refuses them).
local REDLOCK = "dlock: rate limits are refused with redis.redlock: counting on each master of a majority does not " ..
  "bound the total (use redis.sentinel or redis.cluster)"

local new = h.rate_limiter

describe("gateway.new mode rate", function()
  local gateway = require "resty.dlock.gateway"
  local function err_of(o)
    local base = { mode = "rate", key = "$arg_k", on_error = "deny", redis = h.redis_opts(), rate = 5 }
    for k, v in pairs(o) do base[k] = v end
    for k, v in pairs(o) do if v == "nil" then base[k] = nil end end
    local g, err = gateway.new(base)
    assert.is_nil(g)
    return err
  end

  it("refuse bad options with messages naming the option and the value", function()
    assert.equal("dlock: rate must be a positive integer, got 0", err_of({ rate = 0 }))
    assert.equal("dlock: period must be a positive integer of ms, got 0.5", err_of({ period = 0.5 }))
    assert.equal("dlock: cost must be a positive integer, at most the smallest burst (5), got 6", err_of({ cost = 6 }))
    assert.equal("dlock: cost must be a positive integer, at most the smallest burst (2), got 3",
      err_of({ rate = "nil", limits = { { rate = 5 }, { rate = 10, period = 60000, burst = 2 } }, cost = 3 }))
    assert.equal("dlock: ratelimit_headers must be a boolean, got 1", err_of({ ratelimit_headers = 1 }))
    assert.equal("dlock: ttl does not apply to mode rate, got 1000", err_of({ ttl = 1000 }))
    assert.equal("dlock: wait does not apply to mode rate, got 10", err_of({ wait = 10 }))
    assert.equal('dlock: on_error must be "allow" (fail open), "deny" (fail closed) or "local" (this nginx\'s share of the limit), got "open"',
      err_of({ on_error = "open" }))
    assert.equal(REDLOCK, err_of({ redis = { redlock = { "127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3" } } }))
    local g, err = gateway.new({ mode = "dedup", key = "$arg_k", on_error = "deny", rate = 5 })
    assert.is_nil(g)
    assert.equal("dlock: rate applies to mode rate only, not dedup, got 5", err)
  end)
end)

describe("resty.dlock.rate", function()
  it("answer nil and the error when Redis is unreachable", function()
    local lim = new({ host = "127.0.0.1", port = h.free_port(), connect_timeout = 200 }, { rate = 1 })
    local d, err = lim:incoming("k", true)
    assert.is_nil(d)
    assert.matches("connection refused", err)
  end)

  it("refuse bad options with messages naming the option and the value", function()
    local cases = {
      { { dict = "dlock", rate = 0 }, "dlock: rate must be a positive integer, got 0" },
      { { dict = "dlock", rate = 1.5 }, "dlock: rate must be a positive integer, got 1.5" },
      { { dict = "dlock", rate = 5, period = -1 }, "dlock: period must be a positive integer of ms, got -1" },
      { { dict = "dlock", rate = 5, burst = "x" }, 'dlock: burst must be a positive integer, got "x"' },
      { { dict = "dlock" }, "dlock: rate must be a positive integer (requests per period), or limits a list of { rate =, period = }, got nil" },
      { { dict = "dlock", rate = 5, limit = 3 }, 'dlock: unknown option in rate.new options, got "limit"' },
      { { dict = "nope", rate = 5 }, 'dlock: no lua_shared_dict named nope (declare it in nginx.conf), got "nope"' },
      { { dict = "dlock", rate = 5, limits = { { rate = 1 } } }, "dlock: rate and limits exclude each other: give each limit its own rate, got 5" },
      { { dict = "dlock", limits = {} }, "dlock: limits must be a list of 1 to 8 tables { rate =, period =, burst =, name = }, got a table" },
      { { dict = "dlock", limits = { { rate = 1 }, { rate = 0 } } }, "dlock: limits[2].rate must be a positive integer, got 0" },
      { { dict = "dlock", limits = { { rate = 1, per = 5 } } }, 'dlock: unknown option in limits[1], got "per"' },
      { { dict = "dlock", limits = { { rate = 1 }, { rate = 1 } } }, 'dlock: two limits share the policy name 1-per-1s (give each a name), got "1-per-1s"' },
      { { dict = "dlock", limits = { { rate = 1, name = "a b" } } }, 'dlock: limits[1].name must be letters, digits and -_.:/, got "a b"' },
      { { dict = "dlock", rate = 1, period = 30 * 86400000, burst = 1000000000 },
        "dlock: burst * period / rate (the ms a whole burst takes to come back) must be at most 315360000000 (10 years), got 2.592e+18" },
      { { dict = "dlock", limits = { { rate = 1 }, { rate = 1, period = 30 * 86400000, burst = 200, name = "slow" } } },
        "dlock: limits[2].burst * period / rate (the ms a whole burst takes to come back) must be at most 315360000000 (10 years), got 518400000000" },
      { { dict = "dlock", rate = 5, redis = { redlock = { "127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3" } } }, REDLOCK },
    }
    for _, c in ipairs(cases) do
      local lim, err = rate.new(c[1])
      assert.is_nil(lim)
      assert.equal(c[2], err)
    end
    assert.equal("dlock: rate.new needs an options table with dict and rate", select(2, rate.new()))
  end)

  it("refuse a key that is not a non-empty string", function()
    local lim = new(h.redis_opts(), { rate = 5 })
    for _, k in ipairs({ 42, "", string.rep("x", 1025) }) do
      local d, err = lim:incoming(k, true)
      assert.is_nil(d)
      assert.matches("^dlock: key must be a non%-empty string of at most 1024 bytes, got ", err)
    end
  end)
end)

-- The limiter asked on purpose of a Redis that is not there.
h.check_error_logs({ { "connect%(%) failed %(111: Connection refused%)", max = 1 } })
