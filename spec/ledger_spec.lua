-- What an nginx keeps of the leases it holds, in its shared dict (the
-- ledger): held() lists them and forgets released ones; a dict too full for
-- a record changes nothing of what Redis decides; many leases at once are
-- extended and released in one round trip. The core lock itself is
-- dlock_spec.lua.
local h = require "helpers"
local dlock = require "resty.dlock"
local batch = require "resty.dlock.core.batch"
local ledger = require "resty.dlock.core.ledger"

--- held() as a table by token: leases of other specs may share a key name.
local function held_by_token(locks)
  local out = {}
  for _, l in ipairs(locks:held()) do out[l.token] = l end
  return out
end

describe("the ledger of a factory's leases", function()
  describe("held", function()
    it("lists the leases this nginx holds and forgets released ones", function()
      local locks = h.locks()
      local a = assert(locks:acquire("a", { ttl = 5000 }))
      local b = assert(locks:acquire("b", { ttl = 7000 }))
      local mine = held_by_token(locks)
      assert.is_table(mine[a.token], "a is not listed")
      assert.is_table(mine[b.token], "b is not listed")
      assert.equal("a", mine[a.token].key)
      assert.equal("b", mine[b.token].key)
      assert.equal(ngx.worker.pid(), mine[a.token].pid)
      assert.is_true(mine[b.token].ttl > 6000 and mine[b.token].ttl <= 7000)
      assert.is_true(mine[a.token].expires_at > ngx.now() and mine[a.token].expires_at <= ngx.now() + 5)
      assert.is_true(a:release())
      mine = held_by_token(locks)
      assert.is_nil(mine[a.token])
      assert.equal("b", mine[b.token].key)
      assert.is_true(b:release())
      assert.is_nil(held_by_token(locks)[b.token])
    end)

    it("forgets a lease once it expires on its own", function()
      local locks = h.locks()
      local lease = assert(locks:acquire("gone", { ttl = 1000 }))
      local listed = held_by_token(locks)[lease.token]
      assert.is_table(listed, "not listed while held")
      assert.equal("gone", listed.key)
      ngx.sleep(1.1)
      assert.is_nil(held_by_token(locks)[lease.token])
    end)

    it("follows each extend, one after another, and forgets the lease at its release", function()
      local locks = h.locks()
      local lease = assert(locks:acquire("a", { ttl = 1000 }))
      assert.is_true(lease:extend(9000))
      local found = held_by_token(locks)[lease.token]
      assert.is_table(found, "not listed")
      assert.is_true(found.ttl > 8000 and found.ttl <= 9000)
      assert.is_true(lease:extend(20000))
      found = held_by_token(locks)[lease.token]
      assert.is_table(found, "not listed")
      assert.is_true(found.ttl > 19000 and found.ttl <= 20000, tostring(found.ttl))
      assert.is_true(lease:release())
      assert.is_nil(held_by_token(locks)[lease.token])
    end)

    it("keeps the record of a key's next holder when an expired lease of it is released late", function()
      local locks = h.locks()
      local old = assert(locks:acquire("late", { ttl = 100 }))
      ngx.sleep(0.15)
      local new = assert(locks:acquire("late", { ttl = 5000 }))
      assert.same({ nil, "not_owner" }, { old:release() })
      local found = held_by_token(locks)[new.token]
      assert.is_table(found, "the next holder's record is gone")
      assert.equal("late", found.key)
      assert.is_nil(held_by_token(locks)[old.token])
      assert.is_true(new:release())
      assert.is_nil(held_by_token(locks)[new.token])
    end)
  end)

  describe("with a full shared dict", function()
    -- dlock_tiny (12k in nginx/spec.conf) filled up with other data: records
    -- cannot be stored, as in a busy nginx whose dict is shared with a cache.
    local dict = ngx.shared.dlock_tiny
    local fillers = 0

    local function fill()
      for _, size in ipairs({ 2000, 1000, 400, 150, 60, 20, 1 }) do
        local v = string.rep("x", size)
        while dict:safe_set("filler:" .. (fillers + 1), v) do fillers = fillers + 1 end
      end
      assert.is_falsy(dict:safe_set("probe", "x"))
    end

    local function empty()
      for i = 1, fillers do dict:delete("filler:" .. i) end
      fillers = 0
    end

    --- This worker's "dict full" warnings in the error log: { count, epoch seconds } each.
    local function warnings()
      local out = {}
      local log = h.read_file(h.prefix .. "/logs/error.log") or ""
      local line = "(%d+)/(%d+)/(%d+) (%d+):(%d+):(%d+) %[warn%] " .. ngx.worker.pid() ..
        "#[^\n]-dlock: shared dict full: (%d+) lease%(s%) not recorded since the last warning"
      for y, mo, d, hh, mi, ss, n in log:gmatch(line) do
        local t = os.time({ year = y, month = mo, day = d, hour = hh, min = mi, sec = ss })
        out[#out + 1] = { tonumber(n), t }
      end
      return out
    end

    it("keeps leases exclusive, counts every lease it could not record and warns once, not per acquire", function()
      local locks = h.locks({ dict = "dlock_tiny" })   -- made while there was room: the counter exists
      fill()
      finally(empty)
      local before, logged = ledger.unrecorded(dict), #warnings()
      local leases = {}
      for i = 1, 50 do
        leases[i] = assert(locks:acquire("k" .. i, { ttl = 5000 }))
        local none, err = locks:acquire("k" .. i)
        assert.is_nil(none)
        assert.equal("busy", err)
      end
      assert.equal(before + 50, ledger.unrecorded(dict))
      -- Counting took no room: nothing the dict held was evicted for it.
      for i = 1, fillers do assert.is_string(dict:get("filler:" .. i), "filler " .. i .. " evicted") end
      -- At most one line for 50 failures: one per worker and 10 s, whether that
      -- line is this spec's first failure or came from an earlier one.
      local all = warnings()
      local lines = { select(logged + 1, unpack(all)) }
      assert.is_true(#lines <= 1, #lines .. " warnings for 50 acquires")
      local last = all[#all]
      assert.is_table(last, "no warning at all")
      assert.is_true(last[2] >= ngx.time() - 11, "no warning in the last 10 s")
      if #lines == 1 then assert.equal(1, lines[1][1]) end
      local mine = held_by_token(locks)
      for i, l in ipairs(leases) do
        assert.is_nil(mine[l.token])
        assert.is_true(l:release())
        assert.equal(ngx.null, h.cmd(nil, "get", locks.prefix .. "k" .. i))
      end
    end)

    it("keeps a stale worker-token lease from releasing or extending its successor, which is not recorded", function()
      local locks = h.locks({ owner = "worker", dict = "dlock_tiny" })
      fill()
      finally(empty)
      local old = assert(locks:acquire("a", { ttl = 100 }))
      ngx.sleep(0.15)
      local new = assert(locks:acquire("a", { ttl = 5000 }))
      assert.same({}, locks:held())   -- neither lease is in the dict: only Redis can tell them apart
      assert.same({ nil, "not_owner" }, { old:release() })
      assert.same({ nil, "not_owner" }, { old:extend(60000) })
      assert.equal(new.token, h.cmd(nil, "get", locks.prefix .. "a"))
      assert.is_true(h.cmd(nil, "pttl", locks.prefix .. "a") <= 5000)
      assert.is_true(new:extend(6000))
      assert.is_true(new:release())
      assert.equal(ngx.null, h.cmd(nil, "get", locks.prefix .. "a"))
    end)
  end)

  describe("many leases at once", function()
    local r, locks, info

    setup(function()
      -- A Redis of our own: its counters see nothing but this describe.
      r = h.start_redis()
      info = h.redis:new()
      info:set_timeout(2000)
      assert(info:connect("127.0.0.1", r.port))
    end)

    teardown(function()
      info:close()
      r.stop()
    end)

    before_each(function()
      locks = assert(dlock.new({ dict = "dlock", prefix = h.unique("many"), redis = { port = r.port } }))
    end)

    --- Socket reads Redis made so far (a pipelined batch arrives in one; this
    --- INFO is one more), and EVALSHA and EVAL calls.
    local function counters()
      local text = assert(info:info("stats", "commandstats"))
      return tonumber(text:match("total_reads_processed:(%d+)")),
        tonumber(text:match("cmdstat_evalsha:calls=(%d+)") or "0"),
        tonumber(text:match("cmdstat_eval:calls=(%d+)") or "0")
    end

    local function pttl(key)
      return assert(info:pttl(locks.prefix .. key))
    end

    it("extendAll extends every lease to its ttl in one round trip and says not_owner for one whose key is gone", function()
      local list = {}
      for i = 1, 20 do list[i] = assert(locks:acquire("k" .. i, { ttl = i == 5 and 3000 or 2000 })) end
      assert.equal(1, info:del(locks.prefix .. "k7"))
      assert.is_true(list[1]:extend())   -- the script is cached in Redis from now on
      ngx.sleep(0.5)
      local reads, evalshas = counters()
      local res = batch.extendAll(list)
      local reads2, evalshas2 = counters()
      -- One read for the pipeline, one for the INFO that counts it; one by one would be 21.
      assert.is_true(reads2 - reads <= 2, (reads2 - reads) .. " reads for 20 extends")
      assert.equal(evalshas + 20, evalshas2)
      assert.equal(20, #res)
      for i = 1, 20 do
        if i == 7 then
          assert.equal("not_owner", res[i])
        else
          assert.is_true(res[i], "lease " .. i .. ": " .. tostring(res[i]))
        end
      end
      assert.is_true(pttl("k5") > 2900)   -- each to its own ttl
      for i = 1, 20 do
        if i ~= 5 and i ~= 7 then assert.is_true(pttl("k" .. i) > 1900, "k" .. i .. " not extended") end
      end
      -- The lost lease is over, as after extend(): forgotten, and not_owner from now on.
      assert.is_nil(held_by_token(locks)[list[7].token])
      assert.same({ nil, "not_owner" }, { list[7]:release() })
      assert.same({ "not_owner" }, batch.extendAll({ list[7] }))
      for i = 1, 20 do
        if i ~= 7 then assert.is_true(list[i]:release()) end
      end
    end)

    it("extendAll and releaseAll recover from SCRIPT FLUSH with EVAL for the replies that say NOSCRIPT", function()
      local list = {}
      for i = 1, 5 do list[i] = assert(locks:acquire("k" .. i, { ttl = 1000 })) end
      assert.equal("OK", info:script("flush"))
      local _, _, evals = counters()
      local res = batch.extendAll(list)
      assert.same({ true, true, true, true, true }, res)
      for i = 1, 5 do assert.is_true(pttl("k" .. i) > 900) end
      local _, _, evals2 = counters()
      assert.equal(evals + 5, evals2)
      assert.equal("OK", info:script("flush"))
      assert.same({ 0, nil }, { batch.releaseAll(list) })
      for i = 1, 5 do
        assert.equal(0, info:exists(locks.prefix .. "k" .. i))
        assert.is_true(list[i]._released)
      end
    end)

    it("releaseAll releases many leases in one round trip; one whose key is gone is over too", function()
      local list = {}
      for i = 1, 20 do list[i] = assert(locks:acquire("k" .. i, { ttl = 5000 })) end
      assert.equal(1, info:del(locks.prefix .. "k3"))
      assert.is_true(assert(locks:acquire("warm")):release())   -- the script is cached in Redis
      local reads = counters()
      assert.same({ 0, nil }, { batch.releaseAll(list) })
      local reads2 = counters()
      assert.is_true(reads2 - reads <= 2, (reads2 - reads) .. " reads for 20 releases")
      local mine = held_by_token(locks)
      for i = 1, 20 do
        assert.equal(0, info:exists(locks.prefix .. "k" .. i))
        assert.is_nil(mine[list[i].token])
        assert.same({ nil, "not_owner" }, { list[i]:release() })
      end
    end)
  end)
end)

h.check_error_logs()
