-- Auto-pipelining: calls of concurrent requests of one worker to one Redis
-- share round trips; an idle worker's call goes out at once. Every call keeps
-- its own outcome, also when the connection breaks in the middle of a batch.
local h = require "helpers"
local pipeline = require "resty.dlock.redis.pipeline"
local redis = require "resty.dlock.redis.client"
local command = require "resty.dlock.redis.command"
local connection = require "resty.dlock.redis.connection"
local roundtrip = require "resty.dlock.redis.roundtrip"
local derived = require "resty.dlock.redis.derived"

local script = h.script
local SLOW = h.SLOW

--- Calls of this worker on their way to c's Redis, as many as go out on their own: the next calls form a batch.
local function occupy(c)
  local threads = {}
  for i = 1, pipeline.DIRECT do threads[i] = ngx.thread.spawn(pipeline.call, c, SLOW, "p:o" .. i, 30, "busy") end
  return function() for i = 1, #threads do ngx.thread.wait(threads[i]) end end
end

--- A thread that calls SLOW on c twice (the first held ms), and returns the second answer.
local function twice(c, tag, ms)
  return ngx.thread.spawn(function()
    assert.equal("1", (pipeline.call(c, SLOW, "p:" .. tag, ms, "1")))
    return (pipeline.call(c, SLOW, "p:" .. tag, 0, "2"))
  end)
end

local function conf(extra)
  local c = assert(redis.parse(h.redis_opts(extra), ngx.shared.dlock))
  return c
end

describe("auto-pipelining", function()
  it("sends the calls of a worker at low load at once, each on a connection of its own", function()
    local locks = h.locks()
    local c = locks._store.redis
    local calls, batches = pipeline.stats(c)
    h.parallel(pipeline.DIRECT, function(i) local l = assert(locks:acquire("idle" .. i)) return l:release() end)
    local calls2, batches2 = pipeline.stats(c)
    assert.same({ calls, batches }, { calls2, batches2 })
  end)

  it("sends the calls of concurrent requests in shared pipelines, each with its own answer", function()
    local locks = h.locks()
    local c = locks._store.redis
    local calls, batches = pipeline.stats(c)
    local got = h.parallel(40, function(i)
      local l, err = locks:acquire("k" .. i, { ttl = 5000 })
      if not l then return err end
      assert(l:release())
      return l.key
    end)
    for i = 1, 40 do assert.equal("k" .. i, got[i]) end
    local calls2, batches2 = pipeline.stats(c)
    -- 80 calls (40 acquires, 40 releases). Only the first few went out on
    -- their own: the releases of the callers a batch woke rode the next batch,
    -- not a connection each.
    assert.is_true(calls2 - calls >= 80 - pipeline.DIRECT, (calls2 - calls) .. " calls batched")
    assert.is_true(batches2 - batches <= (calls2 - calls) / 4, (batches2 - batches) .. " batches for " .. (calls2 - calls) .. " calls")
    -- Once the load is gone, calls go out at once again.
    ngx.sleep(0.01)
    h.parallel(pipeline.DIRECT, function(i) local l = assert(locks:acquire("after" .. i)) return l:release() end)
    assert.equal(calls2, (pipeline.stats(c)))
  end)

  it("sends the next calls of the callers a batch woke in a batch too, not each on a connection of its own", function()
    local c = conf()
    assert.equal(SLOW.sha, h.cmd(nil, "script", "load", SLOW.src))
    -- As many calls on their own as go out at once, done (5 ms each) well before the batch behind them (30 ms).
    local threads = {}
    for i = 1, pipeline.DIRECT do threads[i] = ngx.thread.spawn(pipeline.call, c, SLOW, "p:d" .. i, 5, "direct") end
    local calls = pipeline.stats(c)
    local callers = {}
    for i = 1, 10 do
      callers[i] = ngx.thread.spawn(function()
        assert.equal("first", (pipeline.call(c, SLOW, "p:w" .. i, i == 1 and 30 or 0, "first")))
        -- Woken with the whole batch, nothing else on its way: the next call joins the next batch.
        return (pipeline.call(c, SLOW, "p:w" .. i, 0, "second"))
      end)
    end
    for i = 1, #threads do assert(ngx.thread.wait(threads[i])) end
    for i = 1, 10 do
      local ok, r = ngx.thread.wait(callers[i])
      assert(ok, r)
      assert.equal("second", r)
    end
    assert.equal(calls + 20, (pipeline.stats(c)))
  end)

  it("on a master of a set (one sender), puts the next calls of the callers a batch woke into the very next batch, " ..
     "beside the calls that queued meanwhile", function()
    local base = conf()
    -- Each master of a Cluster or Redlock set is such a configuration: one sender per worker.
    local c = derived.node(base, base.host, base.port)
    assert.equal(1, c.senders)
    assert.equal(SLOW.sha, h.cmd(nil, "script", "load", SLOW.src))
    local done = occupy(c)
    local calls, batches = pipeline.stats(c)
    -- Batch A (held 60 ms by its first call) goes out; batch B queues behind it.
    local threads = {}
    for i = 1, 10 do threads[i] = twice(c, "a" .. i, i == 1 and 60 or 0) end
    ngx.sleep(0.02)
    for i = 11, 20 do threads[i] = twice(c, "b" .. i, 0) end
    for i = 1, 20 do
      local ok, r = ngx.thread.wait(threads[i])
      assert(ok, r)
      assert.equal("2", r)
    end
    done()
    -- A; B with A's second calls; B's second calls. A sender that went on at
    -- once sent B alone and A's second calls in a batch of their own: four.
    local calls2, batches2 = pipeline.stats(c)
    assert.equal(40, calls2 - calls)
    assert.equal(3, batches2 - batches)
  end)

  it("on a master of a set (one sender), answers the callers left when others were killed while their batch was out, " ..
     "and sends their next calls at once", function()
    local base = conf()
    local c = derived.node(base, base.host, base.port)
    assert.equal(SLOW.sha, h.cmd(nil, "script", "load", SLOW.src))
    local done = occupy(c)
    local calls, batches = pipeline.stats(c)
    ngx.update_time()
    local t0 = ngx.now()
    local threads = {}
    for i = 1, 6 do threads[i] = twice(c, "k" .. i, i == 1 and 60 or 0) end
    ngx.sleep(0.02)
    for i = 2, 6, 2 do assert(ngx.thread.kill(threads[i])) end
    for i = 1, 5, 2 do
      local ok, r = ngx.thread.wait(threads[i])
      assert(ok, r)
      assert.equal("2", r)
    end
    ngx.update_time()
    -- Behind the three that came back, the sender was not left waiting its turn (1 s) for the three gone.
    assert.is_true(ngx.now() - t0 < 0.5, (ngx.now() - t0) .. " s")
    done()
    local calls2, batches2 = pipeline.stats(c)
    assert.equal(9, calls2 - calls)
    assert.equal(2, batches2 - batches)
  end)

  it("sends a batch while the batch ahead of it is still unanswered, on a connection of its own", function()
    local c = conf()
    assert.equal(SLOW.sha, h.cmd(nil, "script", "load", SLOW.src))
    local done = occupy(c)
    -- The first batch: one call Redis takes 60 ms over (after the 4 x 30 ms of the calls on their own).
    local first = ngx.thread.spawn(pipeline.call, c, SLOW, "p:b1", 60, "first")
    ngx.sleep(0.01)
    local _, _, out = pipeline.stats(c)
    assert.equal(1, out)
    -- The next call does not wait for the first batch's replies to go out.
    local second = ngx.thread.spawn(pipeline.call, c, SLOW, "p:b2", 0, "second")
    ngx.sleep(0.01)
    _, _, out = pipeline.stats(c)
    assert.equal(2, out)
    local ok, r = ngx.thread.wait(first)
    assert.is_true(ok)
    assert.equal("first", r)
    ok, r = ngx.thread.wait(second)
    assert.is_true(ok)
    assert.equal("second", r)
    done()
    _, _, out = pipeline.stats(c)
    assert.equal(0, out)
  end)

  it("keeps a caller waiting for its own answer when its batch's semaphore wakes it early (a resource another " ..
     "caller left), and the batches after it still get theirs", function()
    local lanes = require "resty.dlock.redis.lanes"
    local c = conf()
    assert.equal(SLOW.sha, h.cmd(nil, "script", "load", SLOW.src))
    local done = occupy(c)
    local t0 = h.now()
    local mine = ngx.thread.spawn(pipeline.call, c, SLOW, "p:stray", 50, "mine")
    -- The call waits in the open batch, which its sender has not taken yet.
    local b = assert(lanes.laneOf(c).open, "the call did not join a batch")
    assert.is_truthy(b.sem)
    ngx.sleep(0.02)
    b.sem:post(1)
    local ok, r, err = ngx.thread.wait(mine)
    assert.is_true(ok)
    assert.equal("mine", r, err)
    -- Its answer came after the 4 x 30 ms of the calls ahead of it and its own 50 ms, not at the stray wake-up.
    assert.is_true(h.now() - t0 >= 0.15, "answered after " .. (h.now() - t0) .. " s")
    done()
    -- Semaphores go round from batch to batch: every caller of the next ones still gets its own answer.
    local more = occupy(c)
    local threads = {}
    for i = 1, 20 do threads[i] = ngx.thread.spawn(pipeline.call, c, SLOW, "p:after" .. i, 0, "after" .. i) end
    for i = 1, 20 do
      local tok, tr = ngx.thread.wait(threads[i])
      assert.is_true(tok)
      assert.equal("after" .. i, tr)
    end
    more()
  end)

  it("hands a call's table to a later call once its caller has the answer, but none of a batch whose acquires " ..
     "a gone caller left for the take-back", function()
    local scripts = require "resty.dlock.redis.scripts"
    local lanes = require "resty.dlock.redis.lanes"
    local c = conf()
    assert.equal(SLOW.sha, h.cmd(nil, "script", "load", SLOW.src))
    local key = h.unique("spare")
    local function acquire(k) return pipeline.call(c, scripts.ACQUIRE, k, "tok", 30000) end
    --- Acquires of key .. tag .. 1..n in threads; a function that waits for each and checks it got the key.
    local function acquiring(tag, n)
      local threads = {}
      for i = 1, n do threads[i] = ngx.thread.spawn(acquire, key .. tag .. i) end
      return function()
        for i = 1, n do
          local ok, r = ngx.thread.wait(threads[i])
          assert.is_true(ok)
          assert.equal("OK", r, tag .. i)
        end
      end
    end
    -- A batch of 5 acquires whose callers all come back: each table waits for a later call.
    local done = occupy(c)
    local answered = acquiring("a", 5)
    local open = assert(lanes.laneOf(c).open, "the calls did not join a batch")
    answered()
    done()
    assert.is_false(open.kept)
    assert.is_true(#open.jobs >= 5)
    for i, j in ipairs(open.jobs) do assert.is_true(command.spared(j), "call " .. i) end
    -- A batch whose first caller is gone (its thread killed while it waited):
    -- the take-back timer reads the batch's calls after its callers were
    -- woken, so none of those that came back hands its table on.
    done = occupy(c)
    local gone = ngx.thread.spawn(acquire, key .. "gone")
    local b = assert(lanes.laneOf(c).open, "the call did not join a batch")
    answered = acquiring("b", 4)
    assert.truthy(ngx.thread.kill(gone))
    answered()
    done()
    assert.is_true(b.kept)
    assert.is_true(#b.jobs >= 5)
    for i, j in ipairs(b.jobs) do assert.is_false(command.spared(j), "call " .. i) end
    -- The gone caller's acquire is taken back; every other key stays held.
    h.eventually(2, function() return h.cmd(nil, "exists", key .. "gone") == 0 end)
    assert.equal(0, h.cmd(nil, "exists", key .. "gone"))
    for i = 1, 4 do assert.equal(1, h.cmd(nil, "exists", key .. "b" .. i), "b" .. i) end
    for i = 1, 5 do assert.equal(1, h.cmd(nil, "exists", key .. "a" .. i), "a" .. i) end
  end)

  it("carries batches that come back to back on one connection, gives it back to the pool after a refused call, and the pool hands it out again", function()
    local r = h.start_redis()
    finally(function() r.stop() end)
    local c = assert(redis.parse(h.redis_opts({ port = r.port }), ngx.shared.dlock))
    assert.equal(SLOW.sha, h.cmd(r.port, "script", "load", SLOW.src))
    local function accepted()
      return tonumber(h.cmd(r.port, "info", "stats"):match("total_connections_received:(%d+)"))
    end
    local function batch(...)
      local b, jobs = command.batchOf(nil, false), {}
      for i, v in ipairs({ ... }) do jobs[i] = command.add(b, SLOW, "p:rt" .. i, v == "bad" and "not a number" or 0, v) end
      return b, jobs
    end
    local before = accepted()
    local b1, j1 = batch("a", "b")
    local red = roundtrip.runOn(c, b1, nil)
    assert.is_truthy(red)
    assert.same({ "a", "b" }, { j1[1].res, j1[2].res })
    local b2, j2 = batch("c")
    assert.equal(red, roundtrip.runOn(c, b2, red))
    assert.equal("c", j2[1].res)
    -- One connection for both batches, and the INFO that counts.
    assert.equal(before + 2, accepted())
    -- A call Redis refused: the connection goes back to its pool, not on to the next batch.
    local b3, j3 = batch("d", "bad")
    assert.is_nil(roundtrip.runOn(c, b3, red))
    assert.equal("d", j3[1].res)
    assert.is_truthy(j3[2].fault)
    local b4, j4 = batch("e")
    local again = roundtrip.runOn(c, b4, nil)
    assert.equal("e", j4[1].res)
    connection.done(again, c, true)
    -- The pool handed it out again: only the INFO is new.
    assert.equal(before + 3, accepted())
  end)

  it("hands every call its reply however the replies are cut into reads (a 200 KB reply amid short ones)", function()
    local c = conf()
    local BIG = script("big", "return string.rep(ARGV[1], tonumber(ARGV[2]))")
    local done = occupy(c)
    local threads = {}
    for i, n in ipairs({ 1, 200000, 3, 70000, 1 }) do threads[i] = ngx.thread.spawn(pipeline.call, c, BIG, "p:big" .. i, "x", n) end
    for i, n in ipairs({ 1, 200000, 3, 70000, 1 }) do
      local _, r, e = ngx.thread.wait(threads[i])
      assert.equal(n, #tostring(r), tostring(e))
    end
    done()
    local calls = pipeline.stats(c)
    assert.is_true(calls >= 5, calls .. " calls batched")
  end)

  it("sends every call on its own with auto_pipeline = false", function()
    local locks = h.locks({ redis = h.redis_opts({ auto_pipeline = false }) })
    local calls = pipeline.stats(locks._store.redis)
    h.parallel(20, function(i) local l = assert(locks:acquire("k" .. i)) return l:release() end)
    assert.equal(calls, (pipeline.stats(locks._store.redis)))
  end)

  it("gives every call of a batch its own answer: an error reply fails that call only", function()
    local locks = h.locks()
    h.cmd(nil, "hset", locks.prefix .. "taken", "f", "v")   -- someone else's data on one key
    local done = occupy(locks._store.redis)
    local threads = {}
    for i, key in ipairs({ "a", "taken", "b" }) do
      threads[i] = ngx.thread.spawn(function()
        local l, err = locks:acquire(key)
        if not l then return err end
        assert(l:release())
        return "ok"
      end)
    end
    local got = {}
    for i = 1, 3 do
      local ok, r = ngx.thread.wait(threads[i])
      assert(ok, r)
      got[i] = r
    end
    done()
    assert.equal("ok", got[1])
    assert.matches("WRONGTYPE lock key " .. locks.prefix .. "taken holds a hash", got[2], 1, true)
    assert.equal("ok", got[3])
  end)

  it("reports the calls of a batch whose replies never came as of unknown outcome, and no others", function()
    local c = conf({ read_timeout = 150 })
    assert.equal(SLOW.sha, h.cmd(nil, "script", "load", SLOW.src))
    local done = occupy(c)
    -- One batch: Redis sends a batch's replies when it is done with all of it,
    -- so the slow script keeps every reply of the batch past the read timeout.
    local batch = {}
    for i, ms in ipairs({ 0, 400, 0 }) do batch[i] = ngx.thread.spawn(pipeline.call, c, SLOW, "p:" .. i, ms, "r" .. i) end
    for i = 1, 3 do
      local _, r, e, f = ngx.thread.wait(batch[i])
      assert.is_nil(r)
      assert.equal("lost", f)
      assert.matches("timeout during slow", e, 1, true)
    end
    done()
    ngx.sleep(0.4)   -- the slow script ends
    -- The worker's next call finds the lane idle and goes out on a sound connection.
    local r, e, f = pipeline.call(c, SLOW, "p:z", 0, "after")
    assert.equal("after", r, tostring(e) .. " " .. tostring(f))
  end)

  it("does not keep batching after requests were killed in the middle of their calls (a client abort)", function()
    local c = conf({ connect_timeout = 100, read_timeout = 300 })
    assert.equal(SLOW.sha, h.cmd(nil, "script", "load", SLOW.src))
    -- As many calls as go out on their own, each killed while it waits for Redis: no code after the call runs.
    for i = 1, pipeline.DIRECT do
      local t = ngx.thread.spawn(pipeline.call, c, SLOW, "p:k" .. i, 50, "killed")
      assert(ngx.thread.kill(t))
    end
    ngx.sleep(0.1)
    -- Until their time is up (connect + two round trips + WAIT + 1 s) the worker counts them: the next call rides a batch.
    local calls = pipeline.stats(c)
    assert.equal("soon", (pipeline.call(c, SLOW, "p:s", 0, "soon")))
    assert.equal(calls + 1, (pipeline.stats(c)))
    -- Then it goes out on its own again.
    ngx.sleep(1.8)
    calls = pipeline.stats(c)
    assert.equal("later", (pipeline.call(c, SLOW, "p:l", 0, "later")))
    assert.equal(calls, (pipeline.stats(c)))
  end)

  it("takes back the acquires of a request that ended while they were on their way (a client abort)", function()
    local peer = h.start_nginx("spec-peer.conf", { WORKERS = 1 })
    assert.equal(SLOW.sha, h.cmd(nil, "script", "load", SLOW.src))
    local key = h.unique("abandon")
    -- Connections in the worker's pool, as on a server that has been up a while
    -- (a new one would wait for Redis before it sent anything).
    assert.equal(200, h.http(peer.port, "/abandon?key=" .. key .. "warm&n=8").status)
    local function held()
      local out = {}
      for i = 1, 8 do out[i] = h.cmd(nil, "exists", "crash:" .. key .. i) end
      return out
    end
    -- Redis busy for 700 ms: the request's 8 acquires wait for it, the first
    -- DIRECT on connections of their own, the others in one batch. The
    -- client leaves after 250 ms, and its request ends there.
    local busy = ngx.thread.spawn(h.cmd, nil, "evalsha", SLOW.sha, 1, "p:busy", 700, "busy")
    ngx.sleep(0.05)
    assert.is_true(h.http(peer.port, "/abandon?key=" .. key .. "&n=8", { abort_after = 250 }).aborted)
    assert(ngx.thread.wait(busy))
    -- The batch's replies were read by its sender: its acquires are taken back at once.
    ngx.sleep(0.3)
    local direct = pipeline.DIRECT
    local want = {}
    for i = 1, 8 do want[i] = i <= direct and 1 or 0 end
    assert.same(want, held())
    -- The ones sent at once were taken (Redis ran them after the client left) and
    -- are taken back once their calls' time is up, not after their 30 s ttl.
    assert.is_true(h.cmd(nil, "pttl", "crash:" .. key .. 1) > 25000)
    local t0 = h.now()
    h.eventually(8, function() return table.concat(held()) == "00000000" end)
    assert.same({ 0, 0, 0, 0, 0, 0, 0, 0 }, held())
    assert.is_true(h.now() - t0 < 6, (h.now() - t0) .. " s")
    -- Said in a line per pass, not one per key: the batch's at once, then those sent at once.
    local notices = h.read_file(peer.prefix .. "/logs/notice.log") or ""
    local taken, lines = 0, 0
    for n, names in notices:gmatch("dlock: took back (%d+) key%(s%) whose requests ended before the acquire's reply " ..
        "came %(([^)]*)%)") do
      taken, lines = taken + tonumber(n), lines + 1
      assert.matches("crash:" .. key:gsub("%p", "%%%0"), names)
    end
    assert.equal(8, taken)
    assert.is_true(lines >= 2 and lines <= 1 + direct, lines .. " lines")
    peer.stop()
  end)

  it("takes back the acquires of a request that ended while they were on their way, in a worker a reload retired meanwhile",
    function()
    local peer = h.start_nginx("spec-peer.conf", { WORKERS = 1 })
    assert.equal(SLOW.sha, h.cmd(nil, "script", "load", SLOW.src))
    local key = h.unique("retired")
    assert.equal(200, h.http(peer.port, "/abandon?key=" .. key .. "warm&n=8").status)
    local old = peer.workers()
    local busy = ngx.thread.spawn(h.cmd, nil, "evalsha", SLOW.sha, 1, "p:busy", 700, "busy")
    ngx.sleep(0.05)
    assert.is_true(h.http(peer.port, "/abandon?key=" .. key .. "&n=8", { abort_after = 250 }).aborted)
    -- The worker that sent them is retired while the ones sent at once still wait for Redis.
    assert(peer.reload())
    assert(ngx.thread.wait(busy))
    local function held()
      local n = 0
      for i = 1, 8 do n = n + h.cmd(nil, "exists", "crash:" .. key .. i) end
      return n
    end
    local t0 = h.now()
    h.eventually(10, function() return held() == 0 end)
    assert.equal(0, held())
    assert.is_true(h.now() - t0 < 8, (h.now() - t0) .. " s (ttl 30 s)")
    assert.is_true(peer.exited(old, 5), "the retired worker still runs")
    peer.stop()
  end)

  it("answers a call that met NOSCRIPT as failed (it never ran) when a later call of its batch times out " ..
     "before the script could follow, at once", function()
    local c = conf({ read_timeout = 300 })
    assert.equal(SLOW.sha, h.cmd(nil, "script", "load", SLOW.src))
    -- A script Redis has never seen: its EVALSHA meets NOSCRIPT.
    local other = script("other", "return ARGV[1] -- " .. h.unique("other"))
    local done = occupy(c)
    local t0 = h.now()
    local first = ngx.thread.spawn(function()
      local r, e, f = pipeline.call(c, other, "p:ns1", "r1")
      return { r = r, e = e, f = f, took = h.now() - t0 }
    end)
    -- Long enough for Redis to read it in pieces: it answers the first call before this one is whole.
    local second = ngx.thread.spawn(pipeline.call, c, SLOW, "p:ns2", 800, "r2", string.rep("x", 64 * 1024))
    local _, got = ngx.thread.wait(first)
    local _, _, e2, f2 = ngx.thread.wait(second)
    done()
    ngx.sleep(0.8)   -- the slow script ends
    assert.equal("lost", f2, tostring(e2))
    assert.is_nil(got.r)
    assert.equal("failed", got.f, tostring(got.e))
    assert.matches("timeout before the script could follow NOSCRIPT, during other", got.e, 1, true)
    -- Its outcome known when its batch ended (the read timeout), not after the pipeline's patience.
    assert.is_true(got.took < 1.5, string.format("took %.2f s", got.took))
  end)

  it("answers NOSCRIPT inside a batch by sending the script's body for the calls that met it", function()
    local locks = h.locks()
    assert.equal("OK", h.cmd(nil, "script", "flush"))
    local got = h.parallel(10, function(i)
      local l, err = locks:acquire("n" .. i)
      if not l then return err end
      return l:release()
    end)
    for i = 1, 10 do assert.is_true(got[i], tostring(got[i])) end
  end)
end)

h.check_error_logs({
  { "lua tcp socket read timed out", max = 7 },  -- batches whose replies a slow script holds past the read timeout
})
