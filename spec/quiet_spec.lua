-- core/quiet: lines an outage would write once per lease or request are
-- written once an interval, saying how many they stand for. Driven on the real
-- clock with short intervals; gateway_spec shows it under requests in flight.
local h = require "helpers"
local quiet = require "resty.dlock.core.quiet"

local function sleep_past(s)
  ngx.sleep(s + 0.02)
  ngx.update_time()
end

describe("core/quiet", function()
  it("logs the first at once, nothing for the rest of the interval, then one line counting all it stood for", function()
    local q = quiet.make()
    assert.equal(1, quiet.due(q, 0.2))
    for _ = 1, 9 do assert.equal(0, quiet.due(q, 0.2)) end
    sleep_past(0.2)
    -- The nine kept quiet, and this one.
    assert.equal(10, quiet.due(q, 0.2))
    assert.equal(0, quiet.due(q, 0.2))
    sleep_past(0.2)
    assert.equal(2, quiet.due(q, 0.2))
  end)

  it("after a quiet spell longer than the interval, logs the next one at once, alone", function()
    local q = quiet.make()
    assert.equal(1, quiet.due(q, 0.1))
    sleep_past(0.1)
    assert.equal(1, quiet.due(q, 0.1))
  end)

  it("keeps one line per name: a guard's failures do not silence another's", function()
    local qs = {}
    local saved = quiet.settings.interval
    quiet.settings.interval = 0.2
    finally(function() quiet.settings.interval = saved end)
    assert.equal(1, quiet.dueFor(qs, "orders"))
    assert.equal(0, quiet.dueFor(qs, "orders"))
    assert.equal(1, quiet.dueFor(qs, "reports"))
    assert.equal(0, quiet.dueFor(qs, "reports"))
    assert.equal(0, quiet.dueFor(qs, "orders"))
    sleep_past(0.2)
    assert.equal(3, quiet.dueFor(qs, "orders"))
    assert.equal(2, quiet.dueFor(qs, "reports"))
  end)

  it("waits 10 s between two lines by default", function()
    assert.equal(10, quiet.settings.interval)
    local q = quiet.make()
    assert.equal(1, quiet.due(q))
    sleep_past(0.1)
    assert.equal(0, quiet.due(q))
  end)

  it("names the first three keys a line stands for and counts the rest", function()
    local t = quiet.tally()
    assert.equal(0, t.count)
    quiet.add(t, "a")
    assert.equal("a", quiet.named(t))
    quiet.add(t, "b")
    quiet.add(t, "c")
    assert.equal("a, b, c", quiet.named(t))
    for i = 1, 41 do quiet.add(t, "k" .. i) end
    assert.equal(44, t.count)
    assert.equal("a, b, c and 41 more", quiet.named(t))
  end)

  it("says how many more a line stands for, and nothing when it stands for itself alone", function()
    assert.equal("", quiet.more(1))
    assert.equal(" (and 1 more like it in this worker since the last such line)", quiet.more(2))
    assert.equal(" (and 41 more like it in this worker since the last such line)", quiet.more(42))
  end)
end)

h.check_error_logs()
