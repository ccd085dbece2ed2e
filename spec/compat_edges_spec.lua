-- resty.dlock.compat where code written for lua-resty-lock meets its edges:
-- configure() without options, keys of any length lua-resty-lock takes, a
-- Redis that answers "not now", the same key named in two dicts, and an
-- unlock where the request ends (log phase), seen from a second nginx
-- (nginx/spec-compat-edges.conf).
local h = require "helpers"
local resty_lock = require "resty.dlock.compat"

local PREFIX = "dlock:compat:"

local function sha1_hex(s)
  return (ngx.sha1_bin(s):gsub(".", function(c) return string.format("%02x", c:byte()) end))
end

describe("resty.dlock.compat at lua-resty-lock's edges", function()
  before_each(function()
    assert(resty_lock.configure({ redis = { port = h.redis_port } }))
  end)

  it("configure() and configure(nil) take every default and answer true", function()
    assert.same({ true }, { resty_lock.configure() })
    assert.same({ true }, { resty_lock.configure(nil) })
  end)

  it("the lock is the key in Redis, whatever dict the object names (README: Differences)", function()
    -- lua-resty-lock's lock is the pair (dict, key); here the Redis key layout
    -- leaves the dict out, and a fleet in a rolling upgrade must keep one layout.
    local key = h.unique("twodicts")
    local a = assert(resty_lock:new("dlock", { timeout = 0 }))
    local b = assert(resty_lock:new("dlock_other", { timeout = 0 }))
    assert.same({ 0 }, { a:lock(key) })
    assert.same({ nil, "timeout" }, { b:lock(key) })
    assert.equal(1, a:unlock())
    assert.same({ 0 }, { b:lock(key) })
    assert.equal(1, b:unlock())
  end)

  it("lock takes a key longer than 512 bytes, as lua-resty-lock does, held under its SHA-1", function()
    -- A cache lock's key is often the request URI or a cache key built from it.
    local key = h.unique("long") .. string.rep("/segment", 200)   -- about 1.6 KB
    local lock = assert(resty_lock:new("dlock", { timeout = 0 }))
    local other = assert(resty_lock:new("dlock", { timeout = 0 }))
    assert.same({ 0 }, { lock:lock(key) })
    assert.is_string(h.cmd(nil, "get", PREFIX .. "sha1:" .. sha1_hex(key)))
    assert.same({ nil, "timeout" }, { other:lock(key) })
    assert.equal(1, lock:unlock())
    assert.equal(ngx.null, h.cmd(nil, "get", PREFIX .. "sha1:" .. sha1_hex(key)))
    assert.same({ 0 }, { other:lock(key) })
    assert.equal(1, other:unlock())
  end)

  it("a key of up to 512 bytes keeps its Redis key; 513 bytes and up are digested", function()
    local base = h.unique("edge")
    local at = base .. string.rep("x", 512 - #base)
    local over = at .. "x"
    local lock = assert(resty_lock:new("dlock", { timeout = 0 }))
    assert.same({ 0 }, { lock:lock(at) })
    assert.is_string(h.cmd(nil, "get", PREFIX .. at))
    assert.equal(1, lock:unlock())
    assert.same({ 0 }, { lock:lock(over) })
    assert.is_string(h.cmd(nil, "get", PREFIX .. "sha1:" .. sha1_hex(over)))
    assert.equal(1, lock:unlock())
  end)

  it("lock refuses a key over 65535 bytes (lua-resty-lock's shared dict limit), naming its length", function()
    local base = h.unique("max")
    local max = base .. string.rep("k", 65535 - #base)
    local lock = assert(resty_lock:new("dlock", { timeout = 0 }))
    assert.same({ 0 }, { lock:lock(max) })
    assert.equal(1, lock:unlock())
    assert.same({ nil, "dlock: key must be at most 65535 bytes, got 65536 bytes" }, { lock:lock(max .. "k") })
    assert.same({ nil, "unlocked" }, { lock:unlock() })
  end)

  it("lock waits out a Redis that answers BUSY within its timeout, as a waiting acquire does", function()
    -- README, What it does: Redis answers that mean "not now" (LOADING, BUSY,
    -- TRYAGAIN, MASTERDOWN, ...) are retried within the wait; lock() with a
    -- timeout waits, where its first try, without waiting, heard BUSY.
    local r = h.start_redis(nil, "--busy-reply-threshold", "50")
    assert(resty_lock.configure({ redis = { port = r.port, read_timeout = 2000 } }))
    local lock = assert(resty_lock:new("dlock", { timeout = 2 }))
    local SPIN = "local s = redis.call('TIME') while true do local n = redis.call('TIME') " ..
                 "if (n[1] - s[1]) * 1000000 + (n[2] - s[2]) > 400000 then return 1 end end"
    local spinner = ngx.thread.spawn(h.cmd, r.port, "eval", SPIN, 0)
    ngx.sleep(0.1)
    local elapsed, err = lock:lock(h.unique("busy"))
    ngx.thread.wait(spinner)
    local unlocked = elapsed and lock:unlock()
    r.stop()
    assert.is_nil(err)
    -- Waited: measured, and more than 0 (0 says nobody held the key).
    assert.is_true(elapsed > 0)
    assert.equal(1, unlocked)
  end)

  it("lock does not wait out a hard Redis error (a password refused): it answers at once", function()
    local r = h.start_redis(nil, "--requirepass", "edge-secret")
    assert(resty_lock.configure({ redis = { port = r.port, password = "wrong" } }))
    local lock = assert(resty_lock:new("dlock", { timeout = 2 }))
    ngx.update_time()
    local t0 = ngx.now()
    local elapsed, err = lock:lock(h.unique("auth"))
    ngx.update_time()
    local took = ngx.now() - t0
    r.stop()
    assert.is_nil(elapsed)
    assert.matches("^dlock: redis ", err)
    assert.is_true(took < 0.5, "took " .. took .. " s")
  end)

  describe("unlocked where the request ends, seen from a second nginx", function()
    -- A lock taken in access_by_lua and released in log_by_lua, where every
    -- request ends (also after an error page or a client abort), or in the
    -- header filter: lua-resty-lock's unlock is a shared-dict delete and works there.
    local piped, timed, peer
    setup(function()
      piped = h.start_nginx("spec-compat-edges.conf", { AUTO_PIPELINE = "true" })
      timed = h.start_nginx("spec-compat-edges.conf", { AUTO_PIPELINE = "false" })
      peer = h.start_nginx("spec-compat-edges.conf", { AUTO_PIPELINE = "true" })
    end)
    teardown(function()
      if piped then piped.stop() end
      if timed then timed.stop() end
      if peer then peer.stop() end
    end)

    local function get(n, path)
      local res, err = h.http(n.port, path)
      assert(res, err)
      return res.body
    end

    -- Locked in access, unlocked in `phase` (its location): unlock answers 1 there, and the peer can take the key at once.
    local function released(n, location, tag)
      local key = h.unique(tag)
      assert.equal("locked\n", get(n, location .. "?key=" .. key))
      local freed = h.eventually(2, function()
        ngx.sleep(0.05)
        return get(peer, "/try?key=" .. key) == "0 1\n"
      end)
      local said = get(n, "/result?k=" .. tag .. ":" .. key)
      assert.is_true(freed, "the key is still held; unlock said: " .. said)
      assert.equal("true 1 nil\n", said)
    end

    it("unlock in the log phase answers 1 and releases the key (its release rides the next pipeline)", function()
      released(piped, "/log-unlock", "log")
    end)

    it("unlock in the log phase answers 1 and releases the key (from a timer, without auto-pipelining)", function()
      released(timed, "/log-unlock", "log")
    end)

    it("unlock in the header filter answers 1 and releases the key", function()
      released(piped, "/filter-unlock", "filter")
      released(timed, "/filter-unlock", "filter")
    end)
  end)

  h.check_error_logs({})
end)

describe("resty.dlock.compat metering", function()
  it("meters a lock() that waited and got the key as one acquire, not a busy refusal too", function()
    local status = require "resty.dlock.status"
    assert(resty_lock.configure({ redis = { port = h.redis_port }, name = "compatmeter", prefix = "compatmeter:" }))
    finally(function() assert(resty_lock.configure({ redis = { port = h.redis_port } })) end)
    local function reading(what)
      ngx.sleep(0.4)   -- past the worker's meter flush (0.25 s)
      local f = assert(status.report({ limit = 0 })).factories.compatmeter
      return f and f[what] or 0
    end
    local busy0, acquired0 = reading("busy"), reading("acquired")
    local key = h.unique("k")
    -- Someone else holds the key for 200 ms; lock() waits (timeout 2 s) and gets it.
    h.cmd(nil, "set", "compatmeter:" .. key, "other", "px", 200)
    local lock = assert(resty_lock:new("dlock", { timeout = 2 }))
    local elapsed, err = lock:lock(key)
    assert.is_nil(err)
    assert.is_true(elapsed > 0)
    assert.equal(1, lock:unlock())
    assert.equal(1, reading("acquired") - acquired0)
    -- The try before the wait found the key held: no refusal came of it.
    assert.equal(0, reading("busy") - busy0)
  end)
end)
