-- What callers see when Redis misbehaves: flushed scripts, a stopped or paused
-- server, wrong credentials, someone else's data on the key, other databases.
local h = require "helpers"
local dlock = require "resty.dlock"
local batch = require "resty.dlock.core.batch"

local elapsed = h.elapsed

--- True once key is gone from the Redis on port, polling for up to `seconds`.
local function gone_within(seconds, port, key)
  for _ = 1, seconds * 10 do
    ngx.sleep(0.1)
    if h.cmd(port, "exists", key) == 0 then return true end
  end
  return false
end

--- True once lease._released, polling for up to `seconds`.
local function over_within(seconds, lease)
  for _ = 1, seconds * 100 do
    if lease._released then return true end
    ngx.sleep(0.01)
  end
  return false
end

--- Whether this nginx's held() lists the lease.
local function listed(locks, lease)
  for _, l in ipairs(locks:held()) do
    if l.token == lease.token then return true end
  end
  return false
end

--- Pause r and fill its accept queue (start it with --tcp-backlog 1): new
--- connections time out, so no request reaches it. (A request sent to a paused
--- Redis still runs when it resumes: that would delete the key on its own.)
--- Returns resume().
local function cut_off(r)
  r.signal("STOP")
  local fillers = {}
  for _ = 1, 8 do
    local s = ngx.socket.tcp()
    s:settimeout(100)
    if s:connect("127.0.0.1", r.port) then fillers[#fillers + 1] = s end
  end
  return function()
    for _, s in ipairs(fillers) do s:close() end
    r.signal("CONT")
  end
end

--- Locks on r that keep no idle connection (keepalive 1 ms): after a short
--- pause every call connects afresh, so cut_off(r) reaches all of them.
local function unpooled_locks(r)
  return assert(dlock.new({ dict = "dlock", prefix = h.unique("cut"),
    redis = { port = r.port, read_timeout = 200, connect_timeout = 100, keepalive_timeout = 1 } }))
end

describe("redis faults", function()
  it("recovers from SCRIPT FLUSH (NOSCRIPT) with one EVAL per script, then EVALSHA again", function()
    local locks = h.locks()
    local function evals()
      return tonumber(h.cmd(nil, "info", "commandstats"):match("cmdstat_eval:calls=(%d+)") or "0")
    end
    assert(locks:acquire("warm")):release()
    assert.equal("OK", h.cmd(nil, "script", "flush"))
    local e0 = evals()
    local lease, err = locks:acquire("a")
    assert.is_nil(err)
    assert.is_true(lease:extend(5000))
    assert.is_true(lease:release())
    assert.equal(e0 + 3, evals())
    -- The fallback cached them again: the next cycle runs on EVALSHA alone.
    lease = assert(locks:acquire("b"))
    assert.is_true(lease:extend(5000))
    assert.is_true(lease:release())
    assert.equal(e0 + 3, evals())
  end)

  it("reports a stopped Redis as a clear error within the connect timeout", function()
    local r = h.start_redis()
    r.stop()
    local locks = assert(dlock.new({ dict = "dlock", redis = { port = r.port, connect_timeout = 300 } }))
    local t, lease, err = elapsed(function() return locks:acquire("a") end)
    assert.is_nil(lease)
    assert.equal("dlock: redis 127.0.0.1:" .. r.port .. ": connection refused", err)
    assert.is_true(t < 0.35, "took " .. t)
  end)

  it("while it is paused, logs the renewals it could not make once per worker and interval, not once per lease and sweep",
     function()
    local r = h.start_redis()
    local locks = assert(dlock.new({ dict = "dlock", prefix = h.unique("renewing"),
      redis = { port = r.port, read_timeout = 200 } }))
    local leases = {}
    -- ttl 3000: renewed 1 s after the last renewal, swept every 0.5 s.
    for i = 1, 10 do leases[i] = assert(locks:acquire("k" .. i, { ttl = 3000, renew = true })) end
    r.signal("STOP")
    finally(function()
      r.signal("CONT")
      for _, l in ipairs(leases) do l:release() end
      r.stop()
    end)
    local pattern = "%[warn%] " .. ngx.worker.pid() .. "#[^\n]*dlock: renewing the lease on k%d+: redis 127%.0%.0%.1:" ..
      r.port .. ": [^\n]-%(trying again%)([^\n]*)"
    local function lines()
      local out = {}
      for more in (h.read_file(h.prefix .. "/logs/error.log") or ""):gmatch(pattern) do out[#out + 1] = more end
      return out
    end
    -- Two sweeps' failures (at 1.2 s and 1.7 s, each after the 200 ms read timeout): 20 in all.
    ngx.sleep(2.1)
    local seen = lines()
    assert.equal(1, #seen, #seen .. " lines for 10 leases' renewals")
    assert.matches("^, context: ngx%.timer", seen[1])   -- the first one, alone: no count
    for _, l in ipairs(leases) do assert.is_true(l:valid()) end
    r.signal("CONT")
    ngx.sleep(0.6)   -- a sweep renews them all again
    for _, l in ipairs(leases) do assert.is_true(l:release()) end
    assert.equal(1, #lines())
  end)

  describe("at its maxclients (it accepts a connection, answers its first command with an error and closes it)", function()
    local r, taken
    before_each(function()
      r = h.start_redis(nil, "--maxclients 4 --requirepass full-pw")
      taken = {}
    end)
    after_each(function()
      for _, s in ipairs(taken) do s:close() end
      r.stop()
    end)
    --- Take every connection the server has left.
    local function fill()
      while true do
        local s = ngx.socket.tcp()
        assert(s:connect("127.0.0.1", r.port))
        assert(s:send("*2\r\n$4\r\nAUTH\r\n$7\r\nfull-pw\r\n"))
        local reply = s:receive("*l")
        if reply ~= "+OK" then
          assert.equal("-ERR max number of clients reached", reply)
          s:close()
          return
        end
        taken[#taken + 1] = s
      end
    end
    local function free()
      for _, s in ipairs(taken) do s:close() end
      taken = {}
    end
    local FULL = ": ERR max number of clients reached %(the server is at its maxclients and takes no more connections: " ..
      "each nginx worker keeps up to redis%.pool_size to it%)$"

    it("says so at the first command of a fresh connection, AUTH or the eviction check, not as a failed one; then works once it has room", function()
      for _, creds in ipairs({ { password = "full-pw" }, { username = "default", password = "full-pw" } }) do
        local locks = assert(dlock.new({ dict = "dlock", prefix = h.unique("full"), redis = { port = r.port, username = creds.username,
          password = creds.password } }))
        fill()
        local lease, err = locks:acquire("a")
        assert.is_nil(lease)
        assert.matches("^dlock: redis 127%.0%.0%.1:" .. r.port .. FULL, err)
        free()
        assert.is_true(h.eventually(2, function() return h.cmd(r.port, "ping") == "PONG" end))
        assert.is_true(assert(locks:acquire("a")):release())
      end
    end)

    it("says so at a script call, the pool's eviction check done, and takes the locks again once it has room", function()
      local locks = assert(dlock.new({ dict = "dlock", prefix = h.unique("full"), redis = { port = r.port, password = "full-pw" } }))
      assert.is_true(assert(locks:acquire("a")):release())
      -- Its pooled connection gone, the next call needs a fresh one.
      h.cmd(r.port, "client", "kill", "user", "default", "skipme", "yes")
      fill()
      local lease, err = locks:acquire("b")
      assert.is_nil(lease)
      assert.matches("^dlock: redis 127%.0%.0%.1:" .. r.port .. FULL, err)
      free()
      -- Once the server has room (it sees the closes a moment later), the next call works: nothing dead was pooled.
      assert.is_true(h.eventually(2, function() return h.cmd(r.port, "ping") == "PONG" end))
      assert.is_true(assert(locks:acquire("b")):release())
    end)
  end)

  it("says that a redis-server or sentinel in protected mode takes connections from its loopback interface only, with or without a password sent", function()
    -- An address of this machine's other than loopback, which protected mode turns away.
    local p = io.popen("hostname -I 2>/dev/null")
    local addr = (p:read("*a") or ""):match("(%d+%.%d+%.%d+%.%d+)")
    p:close()
    if not addr or addr:match("^127%.") then return pending("this machine has no IPv4 address but loopback") end
    local r = h.start_redis(nil, "--bind 127.0.0.1 " .. addr .. " --protected-mode yes")
    -- A sentinel too, watching a master that lets it in.
    local m = h.start_redis(nil, "--bind 127.0.0.1 " .. addr .. " --protected-mode no")
    local s = h.start_sentinel("guarded", m.port, { conf = "bind 127.0.0.1 " .. addr .. "\nprotected-mode yes" })
    local function denied(option)
      return "DENIED: the server is in protected mode (no password for its default user) and takes connections from its " ..
        "loopback interface only: give it requirepass (and " .. option .. " here), or set protected-mode no where the " ..
        "network is private"
    end
    for _, password in ipairs({ false, "sent-anyway" }) do
      local locks = assert(dlock.new({ dict = "dlock", prefix = h.unique("prot"),
        redis = { host = addr, port = r.port, password = password or nil } }))
      local lease, err = locks:acquire("a")
      assert.is_nil(lease)
      assert.equal("dlock: redis " .. addr .. ":" .. r.port .. ": " .. denied("redis.password"), err)
      local watched = assert(dlock.new({ dict = "dlock", prefix = h.unique("prot"),
        redis = { sentinel = { master = "guarded", nodes = { addr .. ":" .. s.port }, password = password or nil } } }))
      lease, err = watched:acquire("a")
      assert.is_nil(lease)
      assert.equal("dlock: redis sentinel guarded: no sentinel named the master (" .. addr .. ":" .. s.port .. " " ..
        denied("redis.sentinel.password") .. ")", err)
    end
    s.stop()
    m.stop()
    r.stop()
  end)

  it("says that every call is a script when the server has EVAL and EVALSHA renamed away, without the arguments Redis echoes (a token)", function()
    local conf = h.env.prefix .. "/" .. h.unique("renamed") .. ".conf"
    local f = assert(io.open(conf, "w"))
    f:write('rename-command EVALSHA ""\nrename-command EVAL ""\n')
    f:close()
    local r = h.start_redis(nil, "--include " .. conf)
    local locks = assert(dlock.new({ dict = "dlock", prefix = h.unique("renamed"), redis = { port = r.port } }))
    local lease, err = locks:acquire("a")
    assert.is_nil(lease)
    assert.equal("dlock: redis 127.0.0.1:" .. r.port .. ": ERR unknown command 'EVALSHA' (every call of the locks " ..
      "is a Lua script: this server has EVAL and EVALSHA renamed away, rename-command, or runs no scripts)", err)
    r.stop()
  end)

  it("reports an unreachable (or not-Redis) host as a clear error within the timeouts", function()
    -- 10.255.255.1 is unroutable here: the SYN goes nowhere.
    local locks = assert(dlock.new({ dict = "dlock", redis = { host = "10.255.255.1", connect_timeout = 200 } }))
    local t, lease, err = elapsed(function() return locks:acquire("a") end)
    assert.is_nil(lease)
    assert.matches("^dlock: redis 10.255.255.1:6379: ", err)
    assert.is_true(t < 0.5, "took " .. t)
  end)

  it("says that nginx resolves a host name only with its resolver directive (never /etc/hosts), for servers and sentinels", function()
    -- spec.conf, like nginx's defaults, has no resolver: "localhost" fails as any name would.
    local locks = assert(dlock.new({ dict = "dlock", redis = { host = "localhost", port = h.redis_port } }))
    local lease, err = locks:acquire("a")
    assert.is_nil(lease)
    assert.equal("dlock: redis localhost:" .. h.redis_port .. ": no resolver defined to resolve \"localhost\" (nginx " ..
      "resolves host names only through its resolver directive, never /etc/hosts: add one, or give an IP address)", err)
    local behind = assert(dlock.new({ dict = "dlock", redis = { sentinel = { master = "m", nodes = { "localhost:26379" } } } }))
    local _, serr = behind:acquire("a", { wait = 0 })
    assert.matches("no sentinel named the master %(localhost:26379 no resolver defined to resolve \"localhost\" %(nginx resolves host names only " ..
      "through its resolver directive", serr)
  end)

  it("reports a paused Redis as an unknown outcome and removes the lock once it resumes", function()
    local r = h.start_redis()
    local locks = assert(dlock.new({ dict = "dlock", prefix = h.unique("paused"),
      redis = { port = r.port, read_timeout = 200 } }))
    -- A pooled connection (its first use also ran the eviction check): the acquire's script is what goes unanswered.
    assert(locks:acquire("warm")):release()
    r.signal("STOP")
    local t, lease, err = elapsed(function() return locks:acquire("a", { ttl = 2000 }) end)
    assert.is_nil(lease)
    assert.matches("timeout during acquire; acquire outcome unknown, owner%-checked cleanup scheduled$", err)
    assert.is_true(t < 0.5, "took " .. t)
    -- Paused for longer than the lease: the queued SET only runs (and its 2 s ttl
    -- only starts) when Redis resumes; the cleanup must still be trying by then.
    ngx.sleep(2.5)
    r.signal("CONT")
    assert.is_true(gone_within(1, r.port, locks.prefix .. "a"))
    assert(locks:acquire("a")):release()
    r.stop()
  end)

  it("keeps cleaning up a lost acquire until Redis answers, even when it stays unreachable past the ttl", function()
    -- A full accept queue: while Redis is stopped, new connections time out, so
    -- no cleanup attempt reaches it; only the pooled connection of the acquire does.
    local r = h.start_redis(nil, "--tcp-backlog", "1")
    local locks = assert(dlock.new({ dict = "dlock", prefix = h.unique("unreach"),
      redis = { port = r.port, read_timeout = 200, connect_timeout = 100 } }))
    assert(locks:acquire("warm")):release()   -- leaves one pooled connection
    local resume = cut_off(r)
    local lease, err = locks:acquire("a", { ttl = 2000 })
    assert.is_nil(lease)
    assert.matches("outcome unknown", err)
    ngx.sleep(2.5)
    resume()
    assert.is_true(gone_within(1, r.port, locks.prefix .. "a"))
    -- The sweep that removed it says so, at notice.
    local notices = h.read_file(h.prefix .. "/logs/notice.log")
    assert.is_truthy(notices:find("dlock: removed 1 key(s) acquired by requests whose replies were lost (" ..
      locks.prefix .. "a)", 1, true))
    r.stop()
  end)

  it("retries a master whose min-replicas-to-write is not met (NOREPLICAS) while waiting, until a replica is back", function()
    local r = h.start_redis(nil, "--min-replicas-to-write 1 --min-replicas-max-lag 10")
    local locks = assert(dlock.new({ dict = "dlock", prefix = h.unique("norep"), redis = { port = r.port } }))
    local none, err = locks:acquire("a", { wait = 0 })
    assert.is_nil(none)
    assert.equal("dlock: redis 127.0.0.1:" .. r.port .. ": NOREPLICAS Not enough good replicas to write.", err)
    local waiter = ngx.thread.spawn(function() return locks:acquire("a", { wait = 8000 }) end)
    ngx.sleep(0.3)
    local replica = h.start_redis(nil, "--replicaof 127.0.0.1 " .. r.port)
    local _, lease, werr = ngx.thread.wait(waiter)
    assert.is_nil(werr)
    assert.equal(lease.token, h.cmd(r.port, "get", locks.prefix .. "a"))
    assert.is_true(lease:release())
    replica.stop()
    r.stop()
  end)

  it("retries a Redis that answers BUSY (a long script) while waiting, and reports it when not waiting", function()
    local r = h.start_redis(nil, "--busy-reply-threshold", "50")
    local locks = assert(dlock.new({ dict = "dlock", prefix = h.unique("busy"), redis = { port = r.port, read_timeout = 2000 } }))
    local SPIN = "local s = redis.call('TIME') while true do local n = redis.call('TIME') " ..
                 "if (n[1] - s[1]) * 1000000 + (n[2] - s[2]) > 400000 then return 1 end end"
    local spinner = ngx.thread.spawn(h.cmd, r.port, "eval", SPIN, 0)
    ngx.sleep(0.1)
    local none, err = locks:acquire("a", { wait = 0 })
    assert.is_nil(none)
    assert.matches("^dlock: redis 127.0.0.1:%d+: BUSY", err)
    local lease, werr = locks:acquire("a", { wait = 2000 })
    assert.is_nil(werr)
    assert.is_true(lease:release())
    ngx.thread.wait(spinner)
    r.stop()
  end)

  describe("with a password", function()
    local r
    setup(function() r = h.start_redis(nil, "--requirepass", "s3cret") end)
    teardown(function() r.stop() end)

    it("fails clearly on a wrong password", function()
      local locks = assert(dlock.new({ dict = "dlock", redis = { port = r.port, password = "wrong" } }))
      local lease, err = locks:acquire("a")
      assert.is_nil(lease)
      assert.matches("^dlock: redis 127.0.0.1:" .. r.port .. ": authentication failed for user default: WRONGPASS", err)
      assert.is_nil(err:find("wrong", 1, true))
    end)

    it("fails clearly without a password", function()
      local locks = assert(dlock.new({ dict = "dlock", redis = { port = r.port } }))
      local lease, err = locks:acquire("a")
      assert.is_nil(lease)
      assert.matches("NOAUTH", err)
    end)

    it("works with the right password, also as ACL user default", function()
      local a = assert(dlock.new({ dict = "dlock", redis = { port = r.port, password = "s3cret" } }))
      assert(a:acquire("a")):release()
      local b = assert(dlock.new({ dict = "dlock", redis = { port = r.port, username = "default", password = "s3cret" } }))
      assert(b:acquire("a")):release()
    end)

    it("keeps pools apart: a wrong password never borrows an authenticated connection", function()
      local good = assert(dlock.new({ dict = "dlock", redis = { port = r.port, password = "s3cret" } }))
      assert(good:acquire("x")):release()
      local bad = assert(dlock.new({ dict = "dlock", redis = { port = r.port, password = "nope" } }))
      local lease, err = bad:acquire("x")
      assert.is_nil(lease)
      assert.matches("authentication failed", err)
    end)
  end)

  describe("with an ACL user limited to a key pattern", function()
    local r
    setup(function()
      r = h.start_redis()
      assert.equal("OK", h.cmd(r.port, "acl", "setuser", "locker", "on", ">pw", "~locks:*", "+@all"))
    end)
    teardown(function() r.stop() end)

    it("takes locks under the keys it may use, as that user", function()
      local locks = assert(dlock.new({ dict = "dlock", prefix = "locks:", redis = { port = r.port, username = "locker", password = "pw" } }))
      local lease = assert(locks:acquire(h.unique("acl")))
      assert.is_true(lease:release())
    end)

    it("waits for a key held elsewhere by polling when the user may not subscribe to release channels", function()
      local opts = { port = r.port, username = "locker", password = "pw" }
      local key = h.unique("aclwait")
      local holder = assert(dlock.new({ dict = "dlock_other", prefix = "locks:", redis = opts }))
      local waiter = assert(dlock.new({ dict = "dlock", prefix = "locks:", redis = opts }))
      local lease = assert(holder:acquire(key, { ttl = 10000 }))
      local got
      local th = ngx.thread.spawn(function() got = waiter:acquire(key, { wait = 3000 }) end)
      ngx.sleep(0.3)
      -- The release script's PUBLISH is refused to this user: the release works all the same.
      assert.is_true(lease:release())
      assert(ngx.thread.wait(th))
      assert.is_truthy(got, "the waiter did not get the key by polling")
      assert.is_true(got:release())
    end)

    it("names the endpoint and the user, never the password, when the credentials are wrong", function()
      local locks = assert(dlock.new({ dict = "dlock", prefix = "locks:", redis = { port = r.port, username = "locker", password = "not-it" } }))
      local lease, err = locks:acquire("a")
      assert.is_nil(lease)
      assert.matches("^dlock: redis 127.0.0.1:" .. r.port .. ": authentication failed for user locker: WRONGPASS", err)
      assert.is_nil(err:find("not-it", 1, true))
    end)

    it("reports a key outside the user's pattern as Redis's refusal, never as busy", function()
      local locks = assert(dlock.new({ dict = "dlock", prefix = "elsewhere:", redis = { port = r.port, username = "locker", password = "pw" } }))
      local lease, err = locks:acquire("a")
      assert.is_nil(lease)
      assert.matches("^dlock: redis 127.0.0.1:" .. r.port .. ": NOPERM", err)
    end)
  end)

  it("reports someone else's non-string data on the key as an error, never as busy", function()
    local locks = h.locks()
    h.cmd(nil, "rpush", locks.prefix .. "list", "x")
    local lease, err = locks:acquire("list", { wait = 200 })
    assert.is_nil(lease)
    assert.matches("^dlock: redis .*WRONGTYPE lock key .*list holds a list, not a lock", err)
  end)

  it("selects the configured database on fresh connections only, and keeps db pools apart", function()
    local p = h.unique("db")
    local one = assert(dlock.new({ dict = "dlock", prefix = p, redis = h.redis_opts({ db = 1 }) }))
    local zero = assert(dlock.new({ dict = "dlock", prefix = p, redis = h.redis_opts() }))
    local l1 = assert(one:acquire("a"))
    local l0 = assert(zero:acquire("a"))   -- same key, other database: not busy
    local red = h.redis:new()
    assert(red:connect("127.0.0.1", h.redis_port))
    red:select(1)
    assert.equal(l1.token, red:get(p .. "a"))
    red:select(0)
    assert.equal(l0.token, red:get(p .. "a"))
    red:close()
    l1:release(); l0:release()
  end)
  -- TLS (refused with a client that would talk plaintext, used with one that can): spec/tls_spec.lua.

  describe("a release Redis did not confirm", function()
    local r
    before_each(function() r = h.start_redis(nil, "--tcp-backlog", "1") end)
    after_each(function() r.stop() end)

    it("leaves the lease ours, so that release() can be called again once Redis answers", function()
      local locks = assert(dlock.new({ dict = "dlock", prefix = h.unique("retry"), redis = { port = r.port, read_timeout = 200 } }))
      assert.is_true(assert(locks:acquire("warm")):release())   -- Redis has the release script
      local lease = assert(locks:acquire("a", { ttl = 10000 }))
      r.signal("STOP")
      local ok, err = lease:release()
      assert.is_nil(ok)
      assert.matches("^dlock: redis 127.0.0.1:%d+: timeout during release$", err)
      assert.is_falsy(lease._released)
      assert.is_true(listed(locks, lease))
      r.signal("CONT")
      ngx.sleep(0.05)
      -- The release sent in time ran when Redis resumed: the key is gone, and released it is.
      assert.equal(0, h.cmd(r.port, "exists", locks.prefix .. "a"))
      assert.same({ true }, { lease:release() })
      assert.equal(0, h.cmd(r.port, "exists", locks.prefix .. "a"))
      assert.is_false(listed(locks, lease))
      assert.same({ nil, "not_owner" }, { lease:release() })
    end)

    it("answers not_owner on the retry when the lease ran out before the failed release was sent", function()
      local locks = assert(dlock.new({ dict = "dlock", prefix = h.unique("late"), redis = { port = r.port, read_timeout = 200 } }))
      assert.is_true(assert(locks:acquire("warm")):release())
      local lease = assert(locks:acquire("a", { ttl = 300 }))
      r.signal("STOP")
      ngx.sleep(0.35)
      local ok, err = lease:release()
      assert.is_nil(ok)
      assert.matches("timeout during release$", err)
      r.signal("CONT")
      assert.same({ nil, "not_owner" }, { lease:release() })
    end)

    it("by releaseAll is retried in the background: the key is gone soon after Redis is back, long before its ttl", function()
      local locks = unpooled_locks(r)
      local list = { assert(locks:acquire("a", { ttl = 10000 })), assert(locks:acquire("b", { ttl = 10000 })) }
      ngx.sleep(0.01)
      local resume = cut_off(r)
      local failed, err = batch.releaseAll(list)
      assert.equal(2, failed)
      assert.matches("^dlock: redis 127.0.0.1:%d+: timeout$", err)   -- could not even connect: nothing reached Redis
      assert.is_falsy(list[1]._released)
      assert.is_true(listed(locks, list[1]))
      ngx.sleep(1)
      resume()
      ngx.update_time()
      local t0 = ngx.now()
      assert.is_true(over_within(1.5, list[1]) and over_within(0.1, list[2]), "still held after Redis came back")
      ngx.update_time()
      assert.is_true(ngx.now() - t0 < 1.5)
      assert.equal(0, h.cmd(r.port, "exists", locks.prefix .. "a"))
      assert.equal(0, h.cmd(r.port, "exists", locks.prefix .. "b"))
      assert.is_false(listed(locks, list[1]))
      assert.is_false(listed(locks, list[2]))
      -- One notice for the sweep that released both, naming them.
      local notices = h.read_file(h.prefix .. "/logs/notice.log")
      assert.is_truthy(notices:find("dlock: released 2 key(s) once Redis answered again (" .. locks.prefix .. "a, " ..
        locks.prefix .. "b)", 1, true))
    end)

    it("by with() is its result when fn succeeded, and is retried in the background", function()
      local locks = unpooled_locks(r)
      local resume
      local res, err = locks:with("a", { ttl = 10000 }, function()
        ngx.sleep(0.01)
        resume = cut_off(r)
        return "done"
      end)
      assert.is_nil(res)
      assert.matches("^dlock: could not release a after the callback %(retried until it expires%): " ..
        "redis 127.0.0.1:%d+: timeout$", err)
      resume()
      assert.is_true(gone_within(1.5, r.port, locks.prefix .. "a"))
    end)

    it("by with() leaves fn's error as the result when fn raised, and is retried in the background", function()
      local locks = unpooled_locks(r)
      local resume
      local res, err = locks:with("a", { ttl = 10000 }, function()
        ngx.sleep(0.01)
        resume = cut_off(r)
        error("boom")
      end)
      assert.is_nil(res)
      assert.matches("^dlock: callback failed while holding a: .*boom$", err)
      resume()
      assert.is_true(gone_within(1.5, r.port, locks.prefix .. "a"))
    end)
  end)
end)

h.check_error_logs({
  -- Redis stopped, paused and cut off on purpose:
  "connect%(%) failed %(111: Connection refused%), context: ngx%.timer",
  "lua tcp socket read timed out,[^\n]* context: ngx%.timer",
  "lua tcp socket connect timed out,[^\n]* context: ngx%.timer",
})
