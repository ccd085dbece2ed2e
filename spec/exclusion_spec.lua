-- Mutual exclusion under contention: light threads of this worker and the
-- workers of a second nginx (4 workers) hammer a few keys at once. A Redis
-- witness counts holders inside each critical section; more than one is an overlap.
local h = require "helpers"

describe("mutual exclusion", function()
  local peer

  setup(function()
    peer = h.start_nginx("spec-peer.conf", { WORKERS = 4 })
  end)

  teardown(function()
    if peer then peer.stop() end
  end)

  it("holds across 40 light threads and 4 workers of another nginx on 3 keys: zero overlaps", function()
    local locks = h.locks()
    local prefix = locks.prefix
    local redis = h.redis
    local keys, rounds = 3, 25

    local function local_client()
      local w = redis:new()
      w:set_timeout(2000)
      assert(w:connect("127.0.0.1", h.redis_port))
      local got = 0
      for _ = 1, rounds do
        local key = "k" .. math.random(keys)
        local lease = locks:acquire(key, { ttl = 5000, wait = 5000 })
        if lease then
          got = got + 1
          if w:incr(prefix .. "inside:" .. key) > 1 then w:incr(prefix .. "overlaps") end
          ngx.sleep(0.001)
          w:decr(prefix .. "inside:" .. key)
          assert(lease:release())
        end
      end
      w:set_keepalive()
      return got
    end

    local function remote_client()
      local res = assert(h.http(peer.port, "/hammer?prefix=" .. ngx.escape_uri(prefix) .. "&keys=" .. keys .. "&rounds=" .. rounds,
        { timeout = 60000 }))
      assert.equal(200, res.status)
      local got, errs = res.body:match("^(%d+) (%d+)")
      assert.equal("0", errs)
      return tonumber(got)
    end

    local threads = {}
    for i = 1, 40 do threads[#threads + 1] = ngx.thread.spawn(local_client) end
    for i = 1, 16 do threads[#threads + 1] = ngx.thread.spawn(remote_client) end
    local total = 0
    for _, t in ipairs(threads) do
      local ok, got = ngx.thread.wait(t)
      assert(ok, got)
      total = total + got
    end

    assert.equal(4, #peer.workers())
    assert.equal(56 * rounds, total)
    assert.equal(ngx.null, h.cmd(nil, "get", prefix .. "overlaps"))
    -- The witness itself works: it sees two holders when there are two.
    h.cmd(nil, "incr", prefix .. "inside:probe")
    assert.equal(2, h.cmd(nil, "incr", prefix .. "inside:probe"))
  end)

  it("answers an error, not a crash, when a lock or a rate limiter is used in a phase without cosockets (log_by_lua)", function()
    assert.equal(200, h.http(peer.port, "/wrong-phase").status)
    ngx.sleep(0.05)
    local res = h.http(peer.port, "/wrong-phase-result")
    assert.equal("true nil dlock: acquire needs cosockets, which nginx does not allow in the log phase " ..
      "(use it in access/content, or from ngx.timer.at)\n" ..
      "true nil dlock: incoming needs cosockets, which nginx does not allow in the log phase " ..
      "(use it in access/content, or from ngx.timer.at)\n", res.body)
  end)
end)

h.check_error_logs()
