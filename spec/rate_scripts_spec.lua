-- The GCRA scripts of rate limits (redis/ratescripts.ts), run alone in Redis:
-- the one-limit script decides as the general one does, each keeps its TAT
-- exactly where it keeps it, and each reads the other's state, so that a
-- limiter whose limits change finds its clients' state as it was.
local h = require "helpers"
local core = require "resty.dlock.core.rate"

describe("the GCRA scripts", function()
  it("decide one limit with its own script as the general script does: the same answers and the same TAT, in every mode", function()
    local s = require "resty.dlock.redis.ratescripts"
    local one, many = h.unique("gcra1"), h.unique("gcra2")
    -- interval 1 s, burst 5: the microseconds between the two scripts' calls never move a decision
    -- or what remains (each is a whole interval from its edge), only the times (TAT, ms) by as much.
    local iv, burst = "1000000", "5"
    local ls = assert(core.limits({ assert(core.limit("", 1, 1000, 5)) }))
    local steps = { { "1", 1 }, { "1", 3 }, { "0", 1 }, { "1", 1 }, { "0", 2 }, { "1", 2 }, { "-1", 2 },
      { "1", 1 }, { "-1", 10 }, { "-1", 1 }, { "1", 5 }, { "1", 1 }, { "0", 1 }, { "-1", 4 }, { "1", 4 } }
    for i, step in ipairs(steps) do
      local mode, cost = step[1], tostring(step[2])
      local n = assert(h.cmd(nil, "eval", s.RATE_ONE.src, 1, one, mode, cost, iv, burst))
      assert.is_number(n)
      local a = core.answered(n, ls, step[2])
      local b = assert(h.cmd(nil, "eval", s.RATE.src, 1, many, mode, cost, iv, burst))
      local what = "step " .. i .. " (mode " .. mode .. ", cost " .. cost .. ")"
      assert.equal(b[1], a[1], what .. ": outcome")
      assert.is_true(math.abs(b[2] - a[2]) <= 50 and (a[2] == 0) == (b[2] == 0), what .. ": retry ms " .. a[2] .. " and " .. b[2])
      assert.equal(b[3], a[3], what .. ": remaining")
      assert.is_true(math.abs(b[4] - a[4]) <= 50, what .. ": ms until full " .. a[4] .. " and " .. b[4])
      local sa, sb = h.rate_state(nil, one), h.rate_state(nil, many)
      assert.equal(sb["1"] ~= nil, sa["1"] ~= nil, what .. ": a state in both or in neither")
      if sa["1"] then
        assert.is_true(math.abs(tonumber(sa["1"]) - tonumber(sb["1"])) <= 50000, what .. ": TAT " .. sa["1"] .. " and " .. sb["1"])
        local pa, pb = tonumber(h.cmd(nil, "pttl", one)), tonumber(h.cmd(nil, "pttl", many))
        assert.is_true(pa > 0 and math.abs(pa - pb) <= 50, what .. ": pttl " .. pa .. " and " .. pb)
      end
    end
  end)

  it("keep a lone limit's TAT in its key's expiry and the general script's in its hash, each exactly, " ..
     "refusing the request after burst", function()
    local s = require "resty.dlock.redis.ratescripts"
    -- 100 per minute (600000 us apart); 3 per second (333333.33... us apart, as rate.limits sends it).
    for _, iv in ipairs({ "600000", string.format("%.17g", 1000 * 1000 / 3) }) do
      for _, sc in ipairs({ { "one", s.RATE_ONE }, { "many", s.RATE } }) do
        local key = h.unique("tat")
        local what = sc[1] .. ", interval " .. iv
        local t0 = h.cmd(nil, "time")
        local start = tonumber(t0[1]) * 1e6 + tonumber(t0[2])
        local function outcome(r) return sc[1] == "one" and r % 4 or r[1] end
        for i = 1, 3 do
          local r = assert(h.cmd(nil, "eval", sc[2].src, 1, key, "1", "1", iv, "3"))
          assert.equal(1, outcome(r), what .. ": request " .. i .. " of a burst of 3")
        end
        assert.equal(0, outcome(assert(h.cmd(nil, "eval", sc[2].src, 1, key, "1", "1", iv, "3"))), what .. ": the 4th")
        local tat = h.rate_state(nil, key)["1"]
        local n = tonumber(tat)
        local ahead = n - start - 3 * tonumber(iv)
        if sc[1] == "one" then
          assert.equal("string", h.cmd(nil, "type", key), what)
          -- The ms of the first call (Redis' clock as PTTL reads it) and three intervals, the fraction kept.
          local before = h.cmd(nil, "get", key)
          -- On a whole ms (an interval of whole ms) nothing lies before the expiry: "0".
          if iv == "600000" then assert.equal("0", before, what) end
          assert.truthy(before:match(iv == "600000" and "^%d+$" or "^[%d.e+-]+$") and tonumber(before) < 1000, what .. ": written " .. before)
          local past = (n - 3 * tonumber(iv)) % 1000
          assert.is_true(past < 0.001 or past > 999.999, what .. ": TAT " .. tat .. " is " .. past .. " us past a ms")
          assert.is_true(ahead > -1000 and ahead < 50000, what .. ": TAT " .. tat .. " is " .. ahead .. " us past start + 3 intervals")
        else
          local raw = h.cmd(nil, "hget", key, "1")
          if iv == "600000" then
            assert.truthy(raw:match("^%d+$"), what .. ": TAT written " .. raw)
          else
            -- 17 significant digits: the fraction survives, and it reads back as the double written.
            assert.truthy(raw:match("^%d+%.%d+$"), what .. ": TAT written " .. raw)
            assert.equal(raw, string.format("%.17g", tonumber(raw)), what)
          end
          -- Three intervals past the first call's time: at least that, and a few ms at most beyond it.
          assert.is_true(ahead >= 0 and ahead < 50000, what .. ": TAT " .. tat .. " is " .. ahead .. " us past start + 3 intervals")
        end
        h.cmd(nil, "del", key)
      end
    end
  end)

  it("read each other's state: a limiter whose limits change from one to several, and back, finds its clients' TAT as it was",
    function()
    local s = require "resty.dlock.redis.ratescripts"
    local ls = assert(core.limits({ assert(core.limit("", 1, 1000, 5)) }))
    local key = h.unique("switch")
    -- Two charges of one limit (1 per second, burst 5), then the general script with that limit and an hourly one.
    for i = 1, 2 do
      assert.equal(1, core.answered(assert(h.cmd(nil, "eval", s.RATE_ONE.src, 1, key, "1", "1", "1000000", "5")), ls, 1)[1], i)
    end
    local r = assert(h.cmd(nil, "eval", s.RATE.src, 1, key, "1", "1", "1000000", "5", "3600000000", "10"))
    assert.same(1, r[1])
    assert.equal(2, r[3], "the first limit's charges carried over")
    assert.equal(9, r[5])
    assert.equal("hash", h.cmd(nil, "type", key))
    -- And back to the lone limit: it reads field 1 of the hash on Redis' TIME.
    local a = core.answered(assert(h.cmd(nil, "eval", s.RATE_ONE.src, 1, key, "1", "1", "1000000", "5")), ls, 1)
    assert.equal(1, a[1])
    assert.equal(1, a[3], "the charges made under both scripts carried over")
    assert.equal("string", h.cmd(nil, "type", key))
    local function one() return core.answered(assert(h.cmd(nil, "eval", s.RATE_ONE.src, 1, key, "1", "1", "1000000", "5")), ls, 1) end
    assert.equal(1, one()[1], "the fifth of the burst")
    local last = one()
    assert.equal(0, last[1], "a sixth within the second")
    assert.is_true(last[2] > 0 and last[2] <= 1000, tostring(last[2]))
  end)
end)

h.check_error_logs()
