-- Guards behind an operator's public frontend: TLS and HTTP/2 towards the
-- clients, so that many requests of one client arrive as streams multiplexed
-- on one connection (nginx/spec-h2.conf), and a Redis reached over TLS as a
-- lock user with only what the locks need. Each request on a stream is a
-- request of its own to every guard: a concurrency guard lets one stream of a
-- key into the backend and refuses the others, a rate guard admits its burst
-- of them, dedup refuses duplicates in flight and idempotency runs a payment
-- once and replays it to the others; a client that drops the connection with
-- streams in flight leaves each key taken while the application behind may
-- still work on it, until the lease runs out. The clients are curl (HTTP/2 over
-- TLS, verified against the specs' CA), one connection per call.
local h = require "helpers"

local USER = { name = "frontend", password = "acl-secret-h2" }

describe("guards behind a TLS + HTTP/2 frontend, on a TLS Redis with a least-privilege user", function()
  local r, n, backend

  setup(function()
    r = h.start_redis(nil, "--user " .. USER.name .. " on '>" .. USER.password .. "' " .. h.least_privilege_rules(),
      unpack(h.tls_args()))
    backend = h.free_port()
    n = h.start_nginx("spec-h2.conf", { BACKEND_PORT = backend, TLS_DIR = h.env.prefix .. "/tls",
      REDIS_TLS_PORT = r.tls_port, ACL_USER = USER.name, ACL_PASSWORD = USER.password })
  end)
  teardown(function()
    if n then n.stop() end
    if r then r.stop() end
  end)

  local FIELDS = { "status", "version", "connects", "replayed", "retry_after", "policy", "ratelimit" }
  local WRITE_OUT = "%{http_code}|%{http_version}|%{num_connects}|%header{idempotent-replayed}|%header{retry-after}|" ..
    "%header{ratelimit-policy}|%header{ratelimit}\\n"

  --- The paths as parallel streams of one HTTP/2 connection (curl --parallel waits
  --- for the first connection's protocol and multiplexes the rest on it); one table
  --- of FIELDS per response, in no particular order. `extra`: more curl arguments.
  local function streams(paths, extra)
    local urls = {}
    for i, p in ipairs(paths) do urls[i] = "'https://localhost:" .. n.port .. p .. "'" end
    local cmd = "curl -sS --http2 --cacert " .. h.env.prefix .. "/tls/ca.pem --parallel --parallel-max 50 " ..
      "--max-time 20 " .. (extra or "") .. " -o /dev/null -w '" .. WRITE_OUT .. "' " .. table.concat(urls, " -o /dev/null ")
    local p = assert(io.popen(cmd .. " 2>" .. h.env.prefix .. "/curl.err"))
    local out = {}
    for line in p:lines() do
      local t, i = {}, 0
      for v in (line .. "|"):gmatch("([^|]*)|") do
        i = i + 1
        t[FIELDS[i]] = v
      end
      assert(tonumber(t.status), "curl: " .. line .. " " .. tostring(h.read_file(h.env.prefix .. "/curl.err")))
      out[#out + 1] = t
    end
    p:close()
    assert.equal(#paths, #out)
    return out
  end

  local function count(responses, field, value)
    local c = 0
    for _, res in ipairs(responses) do if res[field] == value then c = c + 1 end end
    return c
  end

  --- One connection carried them all, over HTTP/2.
  local function multiplexed(responses)
    local connects = 0
    for _, res in ipairs(responses) do
      assert.equal("2", res.version)
      connects = connects + tonumber(res.connects)
    end
    assert.equal(1, connects)
  end

  --- One HTTP/2 connection carried the responses, with these statuses ({ ["200"] = how many, ... }).
  local function answered(responses, want)
    multiplexed(responses)
    local got = {}
    for _, res in ipairs(responses) do got[res.status] = (got[res.status] or 0) + 1 end
    assert.same(want, got)
  end

  --- The backend's "hits max_in_flight in_flight" for key.
  local function stats(key)
    return h.backend_stats(backend, key)
  end

  it("a concurrency guard of one permit lets one of 8 streams of a key into the backend and refuses the others " ..
     "with 429; the permit is back for the next request", function()
    local res = streams(h.rep("/g/one_at_a_time?key=c1&ms=800", 8))
    answered(res, { ["200"] = 1, ["429"] = 7 })
    local hits, max = stats("c1")
    assert.equal(1, hits)
    assert.equal(1, max)
    assert.equal("200", streams({ "/g/one_at_a_time?key=c1" })[1].status)
  end)

  it("a rate guard of 2 a minute admits 2 of 6 streams of a client, refuses 4 with Retry-After, and every answer " ..
     "carries the RateLimit fields", function()
    local res = streams(h.rep("/g/per_minute?key=r1", 6))
    answered(res, { ["200"] = 2, ["429"] = 4 })
    for _, x in ipairs(res) do
      assert.matches('^"2%-per%-1m";q=2;w=60', x.policy)
      assert.matches('^"2%-per%-1m";r=%d+;t=%d+', x.ratelimit)
      if x.status == "429" then assert.is_true(tonumber(x.retry_after) >= 1, x.retry_after) end
    end
    assert.equal(2, (stats("r1")))
  end)

  it("dedup lets one of 5 duplicate streams through and refuses the others with 409 while it is in flight", function()
    local res = streams(h.rep("/g/once?key=d1&ms=800", 5))
    answered(res, { ["200"] = 1, ["409"] = 4 })
    assert.equal(1, (stats("d1")))
  end)

  it("idempotency runs a payment sent on 5 streams at once once, and answers the other 4 with its replay", function()
    local res = streams(h.rep("/payments?key=pay-h2&ms=300", 5),
      "-X POST -d amount=10 -H 'Idempotency-Key: \"order-h2\"' -H 'Authorization: Bearer a'")
    answered(res, { ["200"] = 5 })
    assert.equal(4, count(res, "replayed", "true"))
    assert.equal(1, (stats("pay-h2")))
  end)

  it("idempotency fingerprints a 200 KB body that nginx keeps in a temp file (past client_body_buffer_size): sent on " ..
     "3 streams it runs once and is replayed; the same key with another such body gets 422", function()
    local function body_file(name, fill)
      local path = h.env.prefix .. "/" .. name
      local f = assert(io.open(path, "w"))
      f:write(string.rep(fill, 200 * 1024))
      f:close()
      return path
    end
    local headers = "-H 'Idempotency-Key: \"order-big\"' -H 'Authorization: Bearer b' -H 'Content-Type: application/octet-stream'"
    local res = streams(h.rep("/payments?key=pay-big&ms=300", 3), "--data-binary @" .. body_file("big-a", "a") .. " " .. headers)
    answered(res, { ["200"] = 3 })
    assert.equal(2, count(res, "replayed", "true"))
    assert.equal(1, (stats("pay-big")))
    local other = streams({ "/payments?key=pay-big&ms=300" }, "--data-binary @" .. body_file("big-b", "b") .. " " .. headers)
    assert.equal("422", other[1].status)
    assert.equal(1, (stats("pay-big")))
  end)

  it("a client that drops its connection with streams in flight keeps each key taken while the backend may still " ..
     "work on it (never two in the backend), and the key frees when its unrenewed lease runs out", function()
    -- curl gives up after 0.5 s and closes the connection: nginx ends both streams (499) and cuts their upstream
    -- requests, but the application behind keeps working on them (1.5 s). The guard's ttl is 3 s.
    local cmd = "curl -sS --http2 --cacert " .. h.env.prefix .. "/tls/ca.pem --parallel --max-time 0.5 -o /dev/null " ..
      "'https://localhost:" .. n.port .. "/g/one_at_a_time?key=gone1&ms=1500' -o /dev/null " ..
      "'https://localhost:" .. n.port .. "/g/one_at_a_time?key=gone2&ms=1500' >/dev/null 2>&1"
    local t0 = ngx.now()
    h.sh(cmd)
    for _, key in ipairs({ "gone1", "gone2" }) do
      local _, _, in_flight = stats(key)
      assert.equal(1, in_flight, key .. ": the backend works on, its client gone")
      assert.equal(1, h.cmd(r.port, "zcard", h.guard_key("one_at_a_time", key)), key .. ": its permit is gone")
      assert.equal("429", streams({ "/g/one_at_a_time?key=" .. key })[1].status)
    end
    for _, key in ipairs({ "gone1", "gone2" }) do
      local status
      assert.is_true(h.eventually(5, function()
        status = streams({ "/g/one_at_a_time?key=" .. key })[1].status
        return status == "200"
      end), key .. " still refused: " .. tostring(status))
      local hits, max = stats(key)
      assert.equal(2, hits)
      assert.equal(1, max)
    end
    assert.is_true(ngx.now() - t0 <= 3 + 2, "the key was kept " .. (ngx.now() - t0) .. " s, past its 3 s ttl")
    -- The last requests' permits go back from their log phase, after the response.
    assert.is_true(h.eventually(2, function()
      return h.cmd(r.port, "exists", h.guard_key("one_at_a_time", "gone1"), h.guard_key("one_at_a_time", "gone2")) == 0
    end))
  end)
end)

h.check_error_logs({})
