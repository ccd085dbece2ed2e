-- What a Redis administrator does to the Redis a guarded nginx uses, while
-- requests flow: credentials rotated, idle connections timed out, clients
-- killed, writes paused, memory full, the database flushed, scripts flushed,
-- the server asleep, the user deleted, a replica promoted by hand. A gateway
-- of two workers (nginx/spec-redis-admin.conf: mutex, concurrency, dedup, rate,
-- idempotency guards and a core-API location), a redis-server of each test's
-- own, real HTTP. redis_faults_spec covers the core API's side of several.
local h = require "helpers"

local GUARDS = { "mutex", "mutexw", "conc", "dd", "rate", "idem" }

--- Start a Redis (extra args) and a gateway on it; user/pass as Lua literals ("nil" or '"x"').
local function gateway(r, user, pass)
  return h.start_nginx("spec-redis-admin.conf", { RPORT = r.port, RUSER = user or "nil", RPASS = pass or "nil" })
end

local seq = 0
--- One request to guard g (or "core") on nginx n: its status (or "err: ...").
local function hit(n, g, ms)
  seq = seq + 1
  local key = "k" .. ngx.worker.pid() .. "-" .. seq
  local res, err
  if g == "core" then
    res, err = h.http(n.port, "/core?key=" .. key .. "&ms=" .. (ms or 0), { timeout = 5000 })
  elseif g == "idem" or g == "idema" then
    res, err = h.http(n.port, "/g/" .. g .. "?ms=" .. (ms or 0), { method = "POST", body = "x",
      headers = { ["Idempotency-Key"] = '"' .. key .. '"' }, timeout = 5000 })
  else
    res, err = h.http(n.port, "/g/" .. g .. "?key=" .. key .. "&ms=" .. (ms or 0), { timeout = 5000 })
  end
  if not res then return "err: " .. tostring(err), nil end
  return res.status, res
end

--- Clients sending requests to every guard in `gs` in turn (distinct keys: nothing is ever busy)
--- until stop() is called; stop() returns { [guard] = { [status] = count } } and the bodies of
--- the first few non-200 answers.
local function flow(n, gs, clients, ms)
  local running, counts, bodies = true, {}, {}
  for _, g in ipairs(gs) do counts[g] = {} end
  local threads = {}
  for c = 1, clients or 4 do
    threads[c] = ngx.thread.spawn(function()
      local i = c
      while running do
        local g = gs[i % #gs + 1]
        i = i + 1
        local st, res = hit(n, g, ms or 20)
        counts[g][st] = (counts[g][st] or 0) + 1
        if st ~= 200 and #bodies < 12 then bodies[#bodies + 1] = g .. " " .. tostring(st) .. " " .. (res and res.body or "") end
      end
    end)
  end
  return function()
    running = false
    for _, t in ipairs(threads) do ngx.thread.wait(t) end
    return counts, bodies
  end
end

--- "guard: status=count ..." of the answers that were not 200.
local function not_ok(counts)
  local out = {}
  for g, byst in pairs(counts) do
    for st, c in pairs(byst) do
      if st ~= 200 then out[#out + 1] = g .. ":" .. tostring(st) .. "=" .. c end
    end
  end
  table.sort(out)
  return out
end

local function total(counts, g, st)
  local s = 0
  for k, c in pairs(counts[g] or {}) do
    if st == nil or k == st then s = s + c end
  end
  return s
end

--- The lines of n's error log at `level` (or worse when level is "error") from byte `from` on.
local function lines(n, from, level)
  local log = n.error_log():sub((from or 0) + 1)
  local out = {}
  for line in log:gmatch("[^\n]+") do
    local lv = line:match("^%S+ %S+ %[(%a+)%]")
    if (level == "error" and (lv == "error" or lv == "crit" or lv == "alert" or lv == "emerg")) or lv == level then
      out[#out + 1] = line:gsub("^%S+ %S+ ", "")
    end
  end
  return out
end

local function mark(n) return #n.error_log() end

local function summary(ls, max)
  local out = {}
  for i = 1, math.min(#ls, max or 8) do out[i] = ls[i] end
  return #ls .. " line(s):\n" .. table.concat(out, "\n")
end

--- Every guard (and core) answers 200 again within `seconds`.
local function back_within(n, seconds, gs)
  return h.eventually(seconds, function()
    for _, g in ipairs(gs or GUARDS) do
      if hit(n, g) ~= 200 then ngx.sleep(0.1) return false end
    end
    return hit(n, "core") == 200
  end)
end

local function row(n, g) return h.guard_row(n.port, g) end

describe("an administrator at work on the gateway's Redis", function()
  it("rotates the nginx user's password without a refused request or an [error] line (second password, reload, old one removed, its connections killed)", function()
    local r = h.start_redis()
    finally(function() r.stop() end)
    assert.equal("OK", h.cmd(r.port, "acl", "setuser", "gw", "on", ">old-pw", "~*", "&*", "+@all"))
    local n = gateway(r, '"gw"', '"old-pw"')
    finally(function() n.stop() end)
    local from = mark(n)
    local stop = flow(n, { "mutex", "mutexw", "conc", "dd", "rate", "idem", "core" }, 4)
    ngx.sleep(0.5)
    -- 1. A second password for the user.
    assert.equal("OK", h.cmd(r.port, "acl", "setuser", "gw", ">new-pw"))
    ngx.sleep(0.3)
    -- 2. nginx.conf gets the new one; reload.
    local conf = n.prefix .. "/nginx.conf"
    local text = h.read_file(conf)
    local f = assert(io.open(conf, "w"))
    f:write((text:gsub('"old%-pw"', '"new-pw"')))
    f:close()
    local old = n.workers()
    assert.is_true(n.reload())
    assert(n.replaced(old, 2))
    ngx.sleep(0.3)
    local counts, bodies = stop()
    assert.same({}, not_ok(counts), table.concat(bodies, "\n"))
    -- 3. The old password removed, the connections that signed in with it killed (between
    -- requests: a call in flight on a killed connection fails, CLIENT KILL's own test below).
    assert.equal("OK", h.cmd(r.port, "acl", "setuser", "gw", "<old-pw"))
    h.cmd(r.port, "acl", "log", "reset")
    h.cmd(r.port, "client", "kill", "user", "gw")
    stop = flow(n, { "mutex", "mutexw", "conc", "dd", "rate", "idem", "core" }, 4)
    ngx.sleep(1.5)
    counts, bodies = stop()
    local acllog = h.cmd(r.port, "acl", "log") or {}
    assert.same({}, not_ok(counts), table.concat(bodies, "\n"))
    assert.is_true(total(counts, "core") > 5)
    assert.equal(0, #acllog, "Redis refused " .. #acllog .. " sign-in(s) after the old password was removed")
    local errs = lines(n, from, "error")
    assert.equal(0, #errs, summary(errs))
  end)

  it("CONFIG SET timeout 1 (idle connections closed after 1 s), traffic in bursts 2 s apart: no failed request, no breaker, no [error]", function()
    local r = h.start_redis()
    finally(function() r.stop() end)
    local n = gateway(r)
    finally(function() n.stop() end)
    assert.equal("OK", h.cmd(r.port, "config", "set", "timeout", "1"))
    local from = mark(n)
    local all = {}
    for burst = 1, 4 do
      local stop = flow(n, { "mutex", "mutexw", "conc", "dd", "rate", "idem", "core" }, 6, 5)
      ngx.sleep(0.4)
      local counts, bodies = stop()
      for _, x in ipairs(not_ok(counts)) do all[#all + 1] = "burst " .. burst .. " " .. x end
      for _, b in ipairs(bodies) do all[#all + 1] = "  " .. b end
      ngx.sleep(2.2)
    end
    assert.same({}, all)
    for _, g in ipairs(GUARDS) do
      local rw = row(n, g)
      assert.equal(0, rw.breaker_opened or 0, g .. " opened its breaker")
      assert.equal(0, rw.redis_errors or 0, g .. " counted redis_errors")
    end
    local errs = lines(n, from, "error")
    assert.equal(0, #errs, summary(errs))
  end)

  it("CLIENT KILL TYPE normal in the middle of load: idle pooled connections are not failures, every guard answers at once after it", function()
    local r = h.start_redis()
    finally(function() r.stop() end)
    local n = gateway(r)
    finally(function() n.stop() end)
    -- Warm every worker's pool.
    local stop = flow(n, { "mutex", "conc", "dd", "rate", "idem", "core" }, 6, 5)
    ngx.sleep(0.5)
    stop()
    local from = mark(n)
    -- Idle pooled connections killed: the next requests find them dead.
    assert.is_true(tonumber(h.cmd(r.port, "client", "kill", "type", "normal", "skipme", "yes")) >= 2)
    local counts, bodies
    stop = flow(n, { "mutex", "conc", "dd", "rate", "idem", "core" }, 6, 5)
    ngx.sleep(0.6)
    counts, bodies = stop()
    assert.same({}, not_ok(counts), table.concat(bodies, "\n"))
    local errs = lines(n, from, "error")
    assert.equal(0, #errs, summary(errs))
  end)

  it("CLIENT KILL TYPE normal while requests are in flight: what fails is only what was in flight, and all comes back at once", function()
    local r = h.start_redis()
    finally(function() r.stop() end)
    local n = gateway(r)
    finally(function() n.stop() end)
    local from = mark(n)
    local stop = flow(n, { "mutex", "conc", "dd", "rate", "idem", "core" }, 8, 5)
    ngx.sleep(0.5)
    for _ = 1, 3 do
      h.cmd(r.port, "client", "kill", "type", "normal", "skipme", "yes")
      ngx.sleep(0.3)
    end
    ngx.sleep(0.5)
    local counts, bodies = stop()
    local bad = not_ok(counts)
    -- Recovers without waiting for a breaker's cooldown.
    assert.is_true(back_within(n, 1), "not back within 1 s: " .. table.concat(bad, " "))
    for _, g in ipairs({ "mutex", "conc", "dd", "rate", "idem" }) do
      assert.equal(0, row(n, g).breaker_opened or 0, g .. " opened its breaker after a CLIENT KILL")
    end
    local errs = lines(n, from, "error")
    print("\n[client kill in flight] not 200: " .. table.concat(bad, " ") .. "\n" .. table.concat(bodies, "\n") ..
      "\nerrors: " .. summary(errs, 6))
  end)

  it("CLIENT PAUSE 1500 WRITE: deny guards never let a request through while Redis cannot decide; after it, a key a denied request asked for is free", function()
    local r = h.start_redis()
    finally(function() r.stop() end)
    local n = gateway(r)
    finally(function() n.stop() end)
    assert.equal(200, hit(n, "mutex"))   -- warm
    local from = mark(n)
    assert.equal("OK", h.cmd(r.port, "client", "pause", "1500", "write"))
    -- Requests for fixed keys during the pause, all at once: their acquires reach Redis and run when the pause ends.
    local IK = { ["Idempotency-Key"] = '"pay-paused-' .. ngx.worker.pid() .. '"' }
    local ths = {
      ngx.thread.spawn(h.http, n.port, "/g/mutex?key=fixed"),
      ngx.thread.spawn(h.http, n.port, "/g/dd?key=fixed"),
      ngx.thread.spawn(h.http, n.port, "/g/rate?key=fixed"),
      ngx.thread.spawn(h.http, n.port, "/g/idem?ms=0", { method = "POST", body = "x", headers = IK }),
      ngx.thread.spawn(h.http, n.port, "/g/conc?key=fixed"),
      ngx.thread.spawn(h.http, n.port, "/g/conc?key=fixed"),
    }
    local t0 = h.now()
    local during = {}
    for i, t in ipairs(ths) do during[i] = select(2, ngx.thread.wait(t)).status end
    assert.is_true(h.now() - t0 < 1.4, "the answers came after the pause")
    assert.same({ 503, 503, 503, 503, 503, 503 }, during)
    -- Wait for the pause to end and the breaker's cooldown (5 s) to pass.
    assert.is_true(back_within(n, 7, { "mutex", "dd", "rate" }), "not back within 7 s after the pause")
    -- The key the denied request asked for is not left held for its ttl (10 s) by an acquire nobody holds.
    local again = assert(h.http(n.port, "/g/mutex?key=fixed"))
    assert.equal(200, again.status, "the mutex key of a request denied during the pause is still taken: " .. again.body)
    local again2 = assert(h.http(n.port, "/g/dd?key=fixed"))
    assert.equal(200, again2.status, "the dedup key of a request denied during the pause is still taken: " .. again2.body)
    -- The idempotency key a denied request sent runs when sent again (never ran: no stored response, no claim left).
    local again3 = assert(h.http(n.port, "/g/idem?ms=0", { method = "POST", body = "x", headers = IK }))
    assert.equal(200, again3.status, "the idempotency key of a request denied during the pause: " .. again3.body)
    -- Both permits of the concurrency key free: two requests in at once, neither waits.
    t0 = h.now()
    local d1 = ngx.thread.spawn(h.http, n.port, "/g/conc?key=fixed&ms=300")
    local d2 = ngx.thread.spawn(h.http, n.port, "/g/conc?key=fixed&ms=300")
    assert.equal(200, select(2, ngx.thread.wait(d1)).status)
    assert.equal(200, select(2, ngx.thread.wait(d2)).status)
    assert.is_true(h.now() - t0 < 0.6, "a permit of a request denied during the pause was still taken")
    print("\n[client pause] " .. summary(lines(n, from, "error"), 10))
  end)

  describe("Redis out of memory (maxmemory just above used, noeviction)", function()
    local r, n
    before_each(function()
      r = h.start_redis(nil, "--maxmemory-policy noeviction")
      n = gateway(r)
      -- Warm every guard (scripts loaded, eviction checked) before the memory runs out.
      for _, g in ipairs({ "mutex", "dd", "rate", "ratea", "ratel", "idem", "idema", "mutexl", "dda", "core" }) do
        assert.equal(200, hit(n, g))
      end
    end)
    after_each(function()
      n.stop()
      r.stop()
    end)
    local function oom()
      h.cmd(r.port, "set", "ballast", string.rep("x", 2 * 1024 * 1024))
      local used = tonumber((h.cmd(r.port, "info", "memory")):match("used_memory:(%d+)"))
      assert.equal("OK", h.cmd(r.port, "config", "set", "maxmemory", tostring(used - 1024 * 1024)))
      local _, err = h.cmd(r.port, "set", "probe", "1")
      assert.matches("OOM", tostring(err))
    end

    it("guards answer as their on_error says: deny refuses (503), allow lets through, local decides locally; the log names OOM", function()
      local from = mark(n)
      oom()
      local got = {}
      for _, g in ipairs({ "mutex", "dd", "rate", "idem", "ratea", "idema", "dda", "ratel", "mutexl", "core" }) do
        got[g] = hit(n, g)
      end
      assert.same({ mutex = 503, dd = 503, rate = 503, idem = 503, ratea = 200, idema = 200, dda = 200, ratel = 200,
        mutexl = 200, core = 503 }, got)
      local errs = lines(n, from, "error")
      local oomlines = 0
      for _, l in ipairs(errs) do if l:find("OOM", 1, true) then oomlines = oomlines + 1 end end
      assert.is_true(oomlines > 0, "no error line names OOM: " .. summary(errs))
      h.cmd(r.port, "config", "set", "maxmemory", "0")
      assert.is_true(back_within(n, 7, { "mutex", "dd", "rate", "idem" }), "not back within 7 s after memory was freed")
    end)

    it("a lease taken before the memory ran out is released at its request's end (DEL needs no memory): its key is free at once", function()
      local th = ngx.thread.spawn(h.http, n.port, "/g/mutex?key=held&ms=800")
      local th2 = ngx.thread.spawn(h.http, n.port, "/g/dd?key=held&ms=800")
      local th3 = ngx.thread.spawn(h.http, n.port, "/g/conc?key=held&ms=800")
      local th4 = ngx.thread.spawn(h.http, n.port, "/g/conc?key=held&ms=800")
      ngx.sleep(0.3)
      local from = mark(n)
      oom()
      local _, a = ngx.thread.wait(th)
      local _, b = ngx.thread.wait(th2)
      assert.equal(200, a.status)
      assert.equal(200, b.status)
      assert.equal(200, select(2, ngx.thread.wait(th3)).status)
      assert.equal(200, select(2, ngx.thread.wait(th4)).status)
      ngx.sleep(0.5)
      local keys = h.cmd(r.port, "keys", "dlock:gw:*") or {}
      local left = {}
      for _, k in ipairs(keys) do if not k:find("breaker") then left[#left + 1] = k end end
      h.cmd(r.port, "config", "set", "maxmemory", "0")
      -- Memory back: the same key is free at once (not held for its 10 s ttl).
      local again = assert(h.http(n.port, "/g/mutex?key=held"))
      local again2 = assert(h.http(n.port, "/g/dd?key=held"))
      local t0 = h.now()
      local e1 = ngx.thread.spawn(h.http, n.port, "/g/conc?key=held&ms=200")
      local e2 = ngx.thread.spawn(h.http, n.port, "/g/conc?key=held&ms=200")
      assert.equal(200, select(2, ngx.thread.wait(e1)).status)
      assert.equal(200, select(2, ngx.thread.wait(e2)).status)
      assert.is_true(h.now() - t0 < 0.5, "a permit released under OOM was still taken")
      print("\n[oom release] keys left in Redis: " .. table.concat(left, " ") .. "\n" .. summary(lines(n, from, "error")) ..
        "\nwarn: " .. summary(lines(n, from, "warn")))
      assert.equal(200, again.status, again.body)
      assert.equal(200, again2.status, again2.body)
    end)

    it("an idempotent response whose store meets OOM is stored once memory is back: the retry is a replay, never a second run", function()
      local key = '"pay-oom-' .. ngx.worker.pid() .. '"'
      local th = ngx.thread.spawn(h.http, n.port, "/g/idem?ms=600", { method = "POST", body = "x", headers = { ["Idempotency-Key"] = key } })
      ngx.sleep(0.2)
      local from = mark(n)
      oom()
      local _, first = ngx.thread.wait(th)
      assert.equal(200, first.status)
      ngx.sleep(1)
      local warned = lines(n, from, "warn")
      h.cmd(r.port, "del", "ballast")
      h.cmd(r.port, "config", "set", "maxmemory", "0")
      ngx.sleep(1.5)
      local retry = assert(h.http(n.port, "/g/idem?ms=600", { method = "POST", body = "x", headers = { ["Idempotency-Key"] = key } }))
      local ran = tonumber(assert(h.http(n.port, "/app?k=idem:-")).body:match("^(%d+)"))
      print("\n[oom store] retry " .. retry.status .. " " .. retry.body .. " runs " .. ran .. "\nerror " ..
        summary(lines(n, from, "error")) .. "\nwarn: " .. summary(lines(n, from, "warn")))
      assert.equal(200, retry.status)
      assert.equal("true", retry.headers["idempotent-replayed"], "the retry ran the operation again (" .. ran .. " runs)")
      assert.is_not_nil(warned)
    end)

    -- README, What it logs: releases, holds and renewals Redis did not confirm are said at warn at once (then one
    -- line per guard, worker and 10 s); a store is retried the same way (until the claim runs out, `lease`, 60 s
    -- by default) but said only at its end. Meanwhile every retry of the client waits `wait` and gets 409.
    it("an idempotent response whose store Redis refuses (OOM) is said at once, not only when its claim runs out (60 s later)", function()
      local key = '"pay-oom2-' .. ngx.worker.pid() .. '"'
      local th = ngx.thread.spawn(h.http, n.port, "/g/idem?ms=600", { method = "POST", body = "x", headers = { ["Idempotency-Key"] = key } })
      ngx.sleep(0.2)
      local from = mark(n)
      oom()
      local _, first = ngx.thread.wait(th)
      assert.equal(200, first.status)
      ngx.sleep(1.5)
      local said = lines(n, from, "warn")
      for _, l in ipairs(lines(n, from, "error")) do said[#said + 1] = l end
      local redis_errors = row(n, "idem").redis_errors or 0
      h.cmd(r.port, "del", "ballast")
      h.cmd(r.port, "config", "set", "maxmemory", "0")
      assert.is_true(redis_errors > 3, "the store was not retried? redis_errors " .. redis_errors)
      assert.is_true(#said > 0, "the store failed " .. redis_errors .. " times in 1.5 s (OOM) and not a line said so")
    end)
  end)

  describe("ACL DELUSER while requests hold their keys, the user back 1 s later", function()
    it("the keys are released once Redis takes the user's sign-in again, long before their ttl (10 s)", function()
      local r = h.start_redis()
      finally(function() r.stop() end)
      assert.equal("OK", h.cmd(r.port, "acl", "setuser", "gw", "on", ">pw", "~*", "&*", "+@all"))
      local n = gateway(r, '"gw"', '"pw"')
      finally(function() n.stop() end)
      for _, g in ipairs({ "mutex", "dd", "conc" }) do assert.equal(200, hit(n, g)) end
      local ths = {}
      for _, g in ipairs({ "mutex", "dd", "conc" }) do
        ths[g] = ngx.thread.spawn(h.http, n.port, "/g/" .. g .. "?key=held&ms=500")
      end
      ngx.sleep(0.2)
      assert.equal(1, h.cmd(r.port, "acl", "deluser", "gw"))
      for _, t in pairs(ths) do assert.equal(200, select(2, ngx.thread.wait(t)).status) end
      ngx.sleep(0.7)
      assert.equal("OK", h.cmd(r.port, "acl", "setuser", "gw", "on", ">pw", "~*", "&*", "+@all"))
      local free = h.eventually(3, function()
        local keys = h.cmd(r.port, "keys", "dlock:gw:*") or {}
        for _, k in ipairs(keys) do
          if not k:find(":idem", 1, true) then ngx.sleep(0.1) return false end
        end
        return true
      end)
      assert.is_true(free, "keys still held 3 s after the user came back: " .. table.concat(h.cmd(r.port, "keys", "dlock:gw:*") or {}, " "))
    end)
  end)

  it("CLIENT KILL TYPE pubsub while requests wait for a key: the waiter still gets it as soon as it is free, no [error]", function()
    local r = h.start_redis()
    finally(function() r.stop() end)
    local n = gateway(r)
    finally(function() n.stop() end)
    local from = mark(n)
    local holder = ngx.thread.spawn(h.http, n.port, "/g/mutexw?key=w&ms=600")
    ngx.sleep(0.1)
    local waiter = ngx.thread.spawn(function()
      local t0 = h.now()
      local res = h.http(n.port, "/g/mutexw?key=w&ms=0")
      return res, h.now() - t0
    end)
    ngx.sleep(0.2)
    local killed = h.cmd(r.port, "client", "kill", "type", "pubsub")
    local _, a = ngx.thread.wait(holder)
    local _, b, took = ngx.thread.wait(waiter)
    assert.equal(200, a.status)
    assert.equal(200, b.status)
    assert.is_true(took < 1.0, "the waiter took " .. took .. " s for a key held 0.6 s (" .. tostring(killed) .. " subscriptions killed)")
    local errs = lines(n, from, "error")
    assert.equal(0, #errs, summary(errs))
  end)

  it("CLIENT PAUSE 300 WRITE (under the read timeout): requests wait and pass, no [error]", function()
    local r = h.start_redis()
    finally(function() r.stop() end)
    local n = gateway(r)
    finally(function() n.stop() end)
    local from = mark(n)
    local stop = flow(n, { "mutex", "conc", "dd", "rate", "idem", "core" }, 6, 5)
    ngx.sleep(0.3)
    assert.equal("OK", h.cmd(r.port, "client", "pause", "300", "write"))
    ngx.sleep(0.6)
    local counts, bodies = stop()
    assert.same({}, not_ok(counts), table.concat(bodies, "\n"))
    local errs = lines(n, from, "error")
    assert.equal(0, #errs, summary(errs))
  end)

  it("a Redis restarted between bursts (shutdown, started again on its port): the next burst passes, no [error] while no request came", function()
    local r = h.start_redis()
    local n = gateway(r)
    finally(function() n.stop() end)
    local stop = flow(n, { "mutex", "mutexw", "conc", "dd", "rate", "idem", "core" }, 6, 5)
    ngx.sleep(0.4)
    stop()
    ngx.sleep(0.2)
    local from = mark(n)
    local port = r.port
    r.stop()
    r = h.start_redis(port)
    finally(function() r.stop() end)
    ngx.sleep(0.5)
    stop = flow(n, { "mutex", "mutexw", "conc", "dd", "rate", "idem", "core" }, 6, 5)
    ngx.sleep(0.5)
    local counts, bodies = stop()
    assert.same({}, not_ok(counts), table.concat(bodies, "\n"))
    local errs = lines(n, from, "error")
    assert.equal(0, #errs, summary(errs))
  end)

  describe("FLUSHDB while guarded requests hold their keys", function()
    local r, n
    before_each(function()
      r = h.start_redis()
      n = gateway(r)
    end)
    after_each(function()
      n.stop()
      r.stop()
    end)

    it("the requests finish, the guards work on at once, and the Lua API's release says not_owner", function()
      local from = mark(n)
      local ths = {}
      for _, g in ipairs({ "mutex", "conc", "dd", "idem", "core" }) do ths[g] = ngx.thread.spawn(hit, n, g, 800) end
      ngx.sleep(0.3)
      assert.equal("OK", h.cmd(r.port, "flushdb"))
      local got = {}
      for g, t in pairs(ths) do
        local _, st, res = ngx.thread.wait(t)
        got[g] = st
        if g == "core" then assert.matches("not_owner", res.body) end
      end
      assert.same({ mutex = 200, conc = 200, dd = 200, idem = 200, core = 500 }, got)
      ngx.sleep(0.5)
      assert.is_true(back_within(n, 1), "guards not back at once after FLUSHDB")
      print("\n[flushdb] error " .. summary(lines(n, from, "error")) .. "\nwarn " .. summary(lines(n, from, "warn")))
    end)

    -- README, What it logs: error, "a lease lost: renewals failed until it expired, or the key was gone or
    -- someone else's (... a guard's `lease on <key> lost while its request is in flight`)", counted `lost`.
    -- A renewal that finds the key gone says so; a release that finds it gone should too: the request ran
    -- without exclusion from the flush on, whether or not a renewal happened to fall in that time.
    it("a guard whose key was flushed under its request counts it lost and says so, whether a renewal or the release finds it gone", function()
      local from = mark(n)
      -- mutexs (ttl 1500): a renewal at 500 ms finds the key gone. mutex, conc, dd (ttl 10000): only the release does.
      local ths = {}
      for _, g in ipairs({ "mutexs", "mutex", "conc", "dd" }) do ths[g] = ngx.thread.spawn(hit, n, g, 1200) end
      ngx.sleep(0.2)
      assert.equal("OK", h.cmd(r.port, "flushdb"))
      for _, t in pairs(ths) do assert.equal(200, select(2, ngx.thread.wait(t))) end
      ngx.sleep(0.5)
      local lost, said = {}, {}
      for _, g in ipairs({ "mutexs", "mutex", "conc", "dd" }) do lost[g] = row(n, g).lost or 0 end
      for _, l in ipairs(lines(n, from, "error")) do
        for _, g in ipairs({ "mutexs", "mutex", "conc", "dd" }) do
          if l:find("guard " .. g .. ":", 1, true) and l:find("lost", 1, true) then said[g] = true end
        end
      end
      local metrics = assert(h.http(n.port, "/dlock/metrics")).body
      print("\n[flushdb lost] " .. table.concat((function()
        local o = {}
        for l in metrics:gmatch("[^\n]+") do if l:find("lost", 1, true) and not l:find("^#") then o[#o + 1] = l end end
        return o
      end)(), "\n"))
      assert.same({ mutexs = 1, mutex = 1, conc = 1, dd = 1 }, lost)
      assert.same({ mutexs = true, mutex = true, conc = true, dd = true }, said)
    end)
  end)

  it("SCRIPT FLUSH under gateway load with 2 workers: no failed request, no [error]", function()
    local r = h.start_redis()
    finally(function() r.stop() end)
    local n = gateway(r)
    finally(function() n.stop() end)
    local from = mark(n)
    local stop = flow(n, { "mutex", "mutexw", "conc", "dd", "rate", "idem", "core" }, 6, 5)
    ngx.sleep(0.4)
    for _ = 1, 3 do
      assert.equal("OK", h.cmd(r.port, "script", "flush"))
      ngx.sleep(0.3)
    end
    local counts, bodies = stop()
    assert.same({}, not_ok(counts), table.concat(bodies, "\n"))
    local errs = lines(n, from, "error")
    assert.equal(0, #errs, summary(errs))
  end)

  it("DEBUG SLEEP 0.3 (under the read timeout): every request waits and passes, no [error]", function()
    local r = h.start_redis(nil, "--enable-debug-command yes")
    finally(function() r.stop() end)
    local n = gateway(r)
    finally(function() n.stop() end)
    local from = mark(n)
    local stop = flow(n, { "mutex", "conc", "dd", "rate", "idem", "core" }, 6, 5)
    ngx.sleep(0.3)
    h.cmd(r.port, "debug", "sleep", "0.3")
    ngx.sleep(0.3)
    local counts, bodies = stop()
    assert.same({}, not_ok(counts), table.concat(bodies, "\n"))
    local errs = lines(n, from, "error")
    assert.equal(0, #errs, summary(errs))
  end)

  it("DEBUG SLEEP 0.5 (the read timeout): deny guards refuse, never pass, and everything is back after the breaker's cooldown with no key left taken", function()
    local r = h.start_redis(nil, "--enable-debug-command yes")
    finally(function() r.stop() end)
    local n = gateway(r)
    finally(function() n.stop() end)
    local from = mark(n)
    local stop = flow(n, { "mutex", "conc", "dd", "rate", "idem", "core" }, 6, 5)
    ngx.sleep(0.3)
    h.cmd(r.port, "debug", "sleep", "0.6")
    ngx.sleep(0.3)
    local counts, bodies = stop()
    for _, g in ipairs({ "mutex", "conc", "dd", "rate", "idem" }) do
      for st in pairs(counts[g]) do assert.is_true(st == 200 or st == 503, g .. " answered " .. tostring(st)) end
    end
    assert.is_true(back_within(n, 7), "not back within 7 s")
    print("\n[debug sleep] not 200: " .. table.concat(not_ok(counts), " ") .. "\n" .. table.concat(bodies, "\n") ..
      "\nerror " .. summary(lines(n, from, "error")))
  end)

  it("ACL DELUSER of the user nginx signs in as: deny guards refuse (503) and never pass, the log says why once the breaker opens, and all comes back when the user is", function()
    local r = h.start_redis()
    finally(function() r.stop() end)
    assert.equal("OK", h.cmd(r.port, "acl", "setuser", "gw", "on", ">pw", "~*", "&*", "+@all"))
    local n = gateway(r, '"gw"', '"pw"')
    finally(function() n.stop() end)
    for _, g in ipairs({ "mutex", "dd", "rate", "idem", "ratea", "mutexl", "core" }) do assert.equal(200, hit(n, g)) end
    local from = mark(n)
    assert.equal(1, h.cmd(r.port, "acl", "deluser", "gw"))
    local stop = flow(n, { "mutex", "conc", "dd", "rate", "idem", "ratea", "mutexl" }, 4, 5)
    ngx.sleep(1.5)
    local counts = stop()
    for _, g in ipairs({ "mutex", "conc", "dd", "rate", "idem" }) do
      assert.equal(0, total(counts, g, 200), g .. " let requests through without Redis")
    end
    assert.equal(total(counts, "ratea"), total(counts, "ratea", 200))
    assert.equal(total(counts, "mutexl"), total(counts, "mutexl", 200))
    local errs = lines(n, from, "error")
    local said = false
    for _, l in ipairs(errs) do if l:find("WRONGPASS", 1, true) or l:find("gw", 1, true) then said = true end end
    assert.is_true(said, "no error line says the user cannot sign in: " .. summary(errs))
    assert.is_true(#errs < 40, "a flood: " .. summary(errs, 12))
    assert.equal("OK", h.cmd(r.port, "acl", "setuser", "gw", "on", ">pw", "~*", "&*", "+@all"))
    assert.is_true(back_within(n, 7), "not back within 7 s of the user's return")
    print("\n[deluser] " .. summary(errs, 10))
  end)

  it("a replica promoted by hand while nginx points at the old master: deny guards refuse, the log says READONLY clearly, nothing passes", function()
    local m = h.start_redis()
    finally(function() m.stop() end)
    local rep = h.start_redis(nil, "--replicaof 127.0.0.1 " .. m.port)
    finally(function() rep.stop() end)
    assert.is_true(h.eventually(5, function()
      return (h.cmd(rep.port, "info", "replication") or ""):find("master_link_status:up", 1, true) ~= nil end))
    local n = gateway(m)
    finally(function() n.stop() end)
    for _, g in ipairs({ "mutex", "dd", "rate", "idem", "core" }) do assert.equal(200, hit(n, g)) end
    local from = mark(n)
    local stop = flow(n, { "mutex", "conc", "dd", "rate", "idem", "core" }, 4, 5)
    ngx.sleep(0.3)
    assert.equal("OK", h.cmd(rep.port, "replicaof", "no", "one"))
    assert.equal("OK", h.cmd(m.port, "replicaof", "127.0.0.1", tostring(rep.port)))
    ngx.sleep(1.5)
    local counts = stop()
    local res = assert(h.http(n.port, "/core?key=ro"))
    print("\n[promoted] not 200: " .. table.concat(not_ok(counts), " ") .. "\ncore: " .. res.status .. " " .. res.body ..
      "\n" .. summary(lines(n, from, "error"), 10))
    assert.equal(503, res.status)
    assert.matches("READONLY", res.body)
    assert.matches("this server is a replica now", res.body, 1, true)
    local errs = lines(n, from, "error")
    local said = false
    for _, l in ipairs(errs) do if l:find("READONLY", 1, true) then said = true end end
    assert.is_true(said, "no error line says READONLY: " .. summary(errs))
  end)
end)
