-- Waiting in line across the fleet: a lock's waiters take tickets in a queue
-- next to the key in Redis, and a release hands the key to the first live
-- ticket's waiter by name, wherever it waits (this worker, another worker,
-- another nginx). Waiters that give up, are killed or lose their worker
-- leave nothing that holds up the others.
local h = require "helpers"
local dlock = require "resty.dlock"

local now = h.now

--- Locks of the prefix the peer nginx uses ("crash:"), in this worker.
local function here()
  return assert(dlock.new({ dict = "dlock", prefix = "crash:", redis = h.redis_opts() }))
end

--- A fresh key held here: the locks, the key, the holder's lease.
local function held()
  local locks = here()
  local key = h.unique("fair")
  return locks, key, assert(locks:acquire(key, { ttl = 10000 }))
end

--- Release the holder: seconds until the waiter in `thread` had the key (at_of reads that time from its result).
local function handoff(holder, thread, at_of)
  local released = now()
  assert(holder:release())
  local ok, r = ngx.thread.wait(thread)
  assert(ok, r)
  return at_of(r) - released
end

local function evalshas()
  return tonumber(h.cmd(nil, "info", "commandstats"):match("cmdstat_evalsha:calls=(%d+)")) or 0
end

describe("waiting in line", function()
  local peer
  setup(function() peer = h.start_nginx("spec-peer.conf", { WORKERS = 2 }) end)
  teardown(function() if peer then peer.stop() end end)

  --- One waiter of the peer nginx: { at = when it acquired, pid = its worker } (in a light thread).
  local function remote(key, hold, wait)
    local res = assert(h.http(peer.port, "/wait-turn?key=" .. key .. "&hold=" .. (hold or 0) .. "&wait=" .. (wait or 5000)))
    local pid, at = res.body:match("^(%d+) (%S+) ")
    assert(pid, "peer answered " .. res.body)
    return { at = tonumber(at), pid = tonumber(pid) }
  end

  it("serves waiters in the order they came, across this worker and the workers of another nginx", function()
    local locks, key, holder = held()
    local threads = {}
    for i = 1, 10 do
      if i % 3 == 0 then
        threads[i] = ngx.thread.spawn(function()
          local l = assert(locks:acquire(key, { ttl = 5000, wait = 5000 }))
          local t = now()
          ngx.sleep(0.01)
          assert(l:release())
          return { at = t, pid = ngx.worker.pid() }
        end)
      else
        threads[i] = ngx.thread.spawn(remote, key, 10)
      end
      -- Each waiter's ticket is in the queue before the next one comes (a
      -- fixed pause was too short for a peer's request on a loaded machine).
      local deadline = now() + 2
      while h.cmd(nil, "zcard", "crash:" .. key .. ":queue") < i and now() < deadline do ngx.sleep(0.005) end
    end
    assert(holder:release())
    local got, pids = {}, {}
    for i = 1, 10 do
      local ok, r = ngx.thread.wait(threads[i])
      assert(ok, r)
      got[i] = r
      pids[r.pid] = true
    end
    local order = {}
    for i = 1, 10 do order[i] = i end
    table.sort(order, function(a, b) return got[a].at < got[b].at end)
    assert.same({ 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 }, order)
    -- Which of the peer's workers took each of its requests is the kernel's pick.
    local others = 0
    for pid in pairs(pids) do if pid ~= ngx.worker.pid() then others = others + 1 end end
    assert.is_true(pids[ngx.worker.pid()], "no waiter ran in this worker")
    assert.is_true(others >= 1, "no waiter ran in the other nginx")
    -- Nothing is left in line.
    assert.equal(0, h.cmd(nil, "exists", "crash:" .. key .. ":queue"))
  end)

  it("sends Redis one ticket, one claim and one release per waiter: the key goes to one waiter only", function()
    local _, key, holder = held()
    local threads = {}
    for i = 1, 8 do
      threads[i] = ngx.thread.spawn(remote, key, 10)
      ngx.sleep(0.01)
    end
    ngx.sleep(0.1)   -- every waiter in line, their wake-up subscriptions up
    local before = evalshas()
    assert(holder:release())
    for i = 1, 8 do assert(ngx.thread.wait(threads[i])) end
    -- Per waiter after the holder's release: its claim and its release (its ticket was taken before).
    -- A worker whose waiters asked Redis on every release would send several attempts per hand-off.
    local sent = evalshas() - before
    assert.is_true(sent <= 1 + 8 * 2 + 2, sent .. " scripts for 8 hand-offs")
  end)

  it("skips a waiter killed while it waits (its client went away): the next one gets the key at once", function()
    local locks, key, holder = held()
    -- First in line: a peer request whose client gives up after 200 ms (its abort handler ends it where it waits).
    local quitter = ngx.thread.spawn(h.http, peer.port, "/wait-turn?key=" .. key, { abort_after = 200 })
    ngx.sleep(0.05)
    local second = ngx.thread.spawn(function()
      local l = assert(locks:acquire(key, { ttl = 5000, wait = 5000 }))
      local t = now()
      assert(l:release())
      return t
    end)
    assert(ngx.thread.wait(quitter))
    ngx.sleep(0.2)   -- the peer notices its killed waiter and drops the ticket
    local took = handoff(holder, second, function(at) return at end)
    -- Not a hand-off to the dead waiter first (it would hold the key for the grant's 100 ms).
    assert.is_true(took < 0.05, string.format("the key came %.3f s after the release", took))
    assert.equal(0, h.cmd(nil, "exists", "crash:" .. key .. ":queue"))
  end)

  it("skips a waiter whose wait ran out, without a word from it", function()
    local locks, key, holder = held()
    local early = ngx.thread.spawn(function() return select(2, locks:acquire(key, { wait = 100 })) end)
    ngx.sleep(0.02)
    local later = ngx.thread.spawn(remote, key, 0)
    local _, err = ngx.thread.wait(early)
    assert.equal("timeout", err)
    ngx.sleep(0.05)
    local took = handoff(holder, later, function(r) return r.at end)
    assert.is_true(took < 0.05, string.format("the key came %.3f s after the release", took))
  end)

  it("drops the tickets of a SIGKILLed worker's waiters when nginx replaces it", function()
    local _, key, holder = held()
    -- A peer waiter; which worker took it shows in the ledger-free way: the queue's only ticket.
    local doomed = ngx.thread.spawn(h.http, peer.port, "/wait-turn?key=" .. key, { timeout = 3000 })
    assert.is_true(h.eventually(1, function() return h.cmd(nil, "zcard", "crash:" .. key .. ":queue") == 1 end))
    -- Kill both peer workers (one of them waits): their replacements drop what the dead left in line.
    for _, pid in ipairs(peer.workers()) do h.stop_pid(pid, "KILL") end
    ngx.thread.wait(doomed)
    assert.is_true(h.eventually(1.5, function() return h.cmd(nil, "exists", "crash:" .. key .. ":queue") == 0 end),
      "the dead waiter's ticket is still in line")
    assert(holder:release())
    assert.equal(ngx.null, h.cmd(nil, "get", "crash:" .. key), "the key was handed to the dead waiter")
  end)
end)

h.check_error_logs({
  "worker process %d+ exited on signal 9",  -- the SIGKILLed peer workers
})
