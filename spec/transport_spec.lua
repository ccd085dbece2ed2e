-- One transport under every topology: each server a backend talks to (the
-- standalone Redis, every Cluster master, every Redlock master) has its own
-- auto-pipeline, so concurrent calls of a worker share round trips there too;
-- NOSCRIPT is recovered the same way everywhere; a connection that breaks in
-- the middle of a pipeline leaves only the calls whose replies never came
-- "outcome unknown"; a server that refuses connections is dialed once per
-- 100 ms, not once per call.
local h = require "helpers"
local dlock = require "resty.dlock"
local backend = require "resty.dlock.redis.backend"
local pipeline = require "resty.dlock.redis.pipeline"
local scripts = require "resty.dlock.redis.scripts"

local SLOW = h.SLOW

--- Calls sent in batches and batches sent, summed over the servers the factory's backend talks to.
local function stats(conf)
  local calls, batches = 0, 0
  for _, server in ipairs(conf.backend.servers(conf)) do
    local c, b = pipeline.stats(server)
    calls, batches = calls + c, batches + b
  end
  return calls, batches
end

--- EVALSHA and EVAL commands a server has run (INFO commandstats).
local function evals(port)
  local n = 0
  for name, calls in (h.cmd(port, "info", "commandstats") or ""):gmatch("cmdstat_(%w+):calls=(%d+)") do
    if name == "evalsha" or name == "eval" then n = n + tonumber(calls) end
  end
  return n
end

local function sum(ports, fn)
  local out = {}
  for i, p in ipairs(ports) do out[i] = fn(p) end
  return out
end

--- 40 requests at once, each an acquire and a release of a key of its own.
local function load(locks, tag)
  local got = h.parallel(40, function(i)
    local l, err = locks:acquire(tag .. i, { ttl = 5000 })
    if not l then return err end
    local ok, rerr = l:release()
    return ok or rerr
  end)
  for i = 1, 40 do assert.is_true(got[i], tostring(got[i])) end
end

describe("one transport", function()
  local cluster, redlock

  setup(function()
    cluster = h.start_cluster()
    redlock = h.start_redlock(3)
  end)

  teardown(function()
    if cluster then cluster.stop() end
    if redlock then redlock.stop() end
  end)

  local topologies = {
    standalone = function() return h.redis_opts() end,
    cluster = function() return cluster.redis() end,
    redlock = function() return { redlock = redlock.addrs, connect_timeout = 300, read_timeout = 1000 } end,
  }
  local function ports(name)
    if name == "cluster" then return cluster.masters() end
    if name == "redlock" then return redlock.ports end
    return { h.redis_opts().port }
  end
  local function locks(name, extra)
    local o = { dict = "dlock", prefix = h.unique("tr"), redis = topologies[name]() }
    for k, v in pairs(extra or {}) do o.redis[k] = v end
    return assert(dlock.new(o))
  end

  for _, name in ipairs({ "cluster", "redlock" }) do
    it("shares round trips among the concurrent calls of a worker to each " .. name .. " master", function()
      local l = locks(name)
      -- The backend learns its masters (Cluster: the slot map) on its first call.
      assert(assert(l:acquire("warm")):release())
      -- Every master knows the scripts already: no NOSCRIPT, no EVAL, in the count.
      for _, p in ipairs(ports(name)) do
        for _, s in ipairs({ scripts.ACQUIRE, scripts.RELEASE, scripts.ACQUIRE_QUEUED, scripts.RELEASE_QUEUED }) do
          h.cmd(p, "script", "load", s.src)
        end
      end
      local before = sum(ports(name), evals)
      local calls, batches = stats(l._store.redis)
      load(l, "k")
      local calls2, batches2 = stats(l._store.redis)
      local after = sum(ports(name), evals)
      -- 80 calls (40 acquires, 40 releases): every master ran its share, each call once ...
      local ran = 0
      for i = 1, #before do
        assert.is_true(after[i] > before[i], "master " .. i .. " ran no call")
        ran = ran + after[i] - before[i]
      end
      if name == "redlock" then assert.equal(3 * 80, ran) else assert.equal(80, ran) end
      -- ... and most of them rode batches: a few round trips carried many calls.
      local per = name == "redlock" and 3 or 1
      assert.is_true(calls2 - calls >= per * 80 / 2, (calls2 - calls) .. " calls batched")
      assert.is_true(batches2 - batches <= (calls2 - calls) / 3, (batches2 - batches) .. " batches for " .. (calls2 - calls) .. " calls")
    end)
  end

  for _, name in ipairs({ "standalone", "sentinel", "cluster", "redlock" }) do
    it("recovers from NOSCRIPT after SCRIPT FLUSH under " .. name .. ": calls on their own, in batches and in a batch of releases", function()
      local l, sentinel
      if name == "sentinel" then
        sentinel = h.start_sentinel("transport", h.redis_opts().port)
        finally(function() sentinel.stop() end)
        local o = { dict = "dlock", prefix = h.unique("tr"),
          redis = { sentinel = { master = "transport", nodes = { "127.0.0.1:" .. sentinel.port } }, connect_timeout = 300 } }
        l = assert(dlock.new(o))
      else
        l = locks(name)
      end
      local servers = ports(name == "sentinel" and "standalone" or name)
      assert(assert(l:acquire("warm")):release())
      for _, p in ipairs(servers) do assert.equal("OK", h.cmd(p, "script", "flush")) end
      -- One call at a time: each goes out on its own.
      local lease = assert(l:acquire("one"))
      assert.is_true(lease:release())
      -- Concurrent calls: batches.
      for _, p in ipairs(servers) do assert.equal("OK", h.cmd(p, "script", "flush")) end
      load(l, "n")
      -- A batch of releases (one pipeline per server).
      local targets = {}
      for i = 1, 5 do
        local li = assert(l:acquire("b" .. i, { ttl = 5000 }))
        targets[i] = { rkey = l.prefix .. "b" .. i, token = li.token }
      end
      for _, p in ipairs(servers) do assert.equal("OK", h.cmd(p, "script", "flush")) end
      local release = name == "redlock" and scripts.RELEASE or scripts.RELEASE_QUEUED
      local out = backend.batch(l._store.redis, release, targets)
      for i = 1, 5 do assert.equal(1, out.replies[i], tostring(out.errors[i])) end
    end)
  end

  for _, name in ipairs({ "standalone", "cluster" }) do
    it("leaves only the calls whose replies never came \"outcome unknown\" when a " .. name .. " connection breaks mid-pipeline", function()
      local l = locks(name, { read_timeout = 300 })
      local conf = l._store.redis
      -- Every key in one slot: one master, one pipeline.
      local key = function(i) return l.prefix .. "{mid}" .. i end
      assert(backend.call(conf, SLOW, key(0), 0, "warm"))
      for _, p in ipairs(ports(name)) do h.cmd(p, "script", "load", SLOW.src) end
      -- As many calls on their way as go out on their own: the next ones form a batch.
      local busy = {}
      for i = 1, pipeline.DIRECT do busy[i] = ngx.thread.spawn(backend.call, conf, SLOW, key("o" .. i), 10, "busy") end
      -- The first call's reply is written before Redis has read all of the
      -- second (its padding is larger than Redis reads at once), whose 800 ms
      -- outlast the read timeout: it and the one after it never answer.
      local pad = string.rep("x", 64 * 1024)
      local batch = {}
      for i, c in ipairs({ { 0, "" }, { 800, pad }, { 0, "" } }) do
        batch[i] = ngx.thread.spawn(backend.call, conf, SLOW, key(i), c[1], "r" .. i, c[2])
      end
      local got = {}
      for i = 1, 3 do got[i] = { select(2, ngx.thread.wait(batch[i])) } end
      for i = 1, #busy do ngx.thread.wait(busy[i]) end
      assert.same({ "r1" }, got[1])
      for i = 2, 3 do
        assert.is_nil(got[i][1])
        assert.equal("lost", got[i][3])
        assert.matches("timeout during slow", got[i][2], 1, true)
      end
      ngx.sleep(0.8)   -- the slow script ends
      assert.equal("after", (backend.call(conf, SLOW, key("z"), 0, "after")))
    end)
  end
end)

describe("a server that refuses connections", function()
  --- "connect() failed (111: Connection refused)" lines of the runner's error log since mark: one per dial nginx made.
  local function refused_dials(mark)
    local log = (h.read_file(h.prefix .. "/logs/error.log") or ""):sub(mark.runner + 1)
    local n = 0
    for _ in log:gmatch("connect%(%) failed %(111: Connection refused%)") do n = n + 1 end
    return n
  end

  it("is dialed once per 100 ms, not once per call: the calls in between get its refusal without a dial", function()
    local r = h.start_redis()
    local port = r.port
    r.stop()
    local function locks(extra)
      local redis = { port = port, connect_timeout = 300 }
      for k, v in pairs(extra or {}) do redis[k] = v end
      return assert(dlock.new({ dict = "dlock", prefix = h.unique("refused"), redis = redis }))
    end
    local plain, piped = locks({ auto_pipeline = false }), locks()
    local want = "dlock: redis 127.0.0.1:" .. port .. ": connection refused"
    local mark = h.error_log_mark()
    -- 20 calls of each factory one after another, then 40 at once.
    for i = 1, 20 do
      for _, l in ipairs({ plain, piped }) do
        local lease, err = l:acquire("k" .. i)
        assert.is_nil(lease)
        assert.equal(want, err)
      end
    end
    local got = h.parallel(40, function(i)
      local lease, err = (i % 2 == 0 and plain or piped):acquire("p" .. i)
      return lease == nil and err
    end)
    for i = 1, 40 do assert.equal(want, got[i]) end
    local dials = refused_dials(mark)
    assert.is_true(dials >= 1 and dials <= 2, dials .. " refused connects logged for 80 calls")
    -- 100 ms on, it is dialed again: a server started there meanwhile takes the next calls.
    r = h.start_redis(port)
    ngx.sleep(0.1)
    for _, l in ipairs({ plain, piped }) do
      local lease = assert(l:acquire("after"))
      assert.is_true(lease:release())
    end
    r.stop()
  end)
end)

h.check_error_logs({
  -- The refusals of a server stopped on purpose, one per 100 ms.
  { "connect%(%) failed %(111: Connection refused%)", max = 2 },
  -- The pipelines broken on purpose (and a call kept busy behind their slow script).
  { "lua tcp socket read timed out", max = 10 },
})
