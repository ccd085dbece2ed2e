-- make run (nginx/demo): the gateway's front page lists what to try, the same
-- curl lines the demo prints in the terminal.
local h = require "helpers"

describe("make run's demo gateway", function()
  local port, pid, printed
  local out = h.prefix .. "/demo.out"

  setup(function()
    port = h.free_port()
    local p = io.popen("export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin; " ..
      "DLOCK_NGINX=" .. h.env.nginx .. " DLOCK_DEMO_PORT=" .. port .. " bash " .. h.root .. "/nginx/demo > " .. out .. " 2>&1 & echo $!")
    pid = tonumber(p:read("*l"))
    p:close()
    -- The runner stops it too, should this spec fail before its teardown.
    local f = assert(io.open(h.prefix .. "/pids", "a"))
    f:write(pid, "\n")
    f:close()
    assert(h.eventually(15, function()
      printed = h.read_file(out) or ""
      return printed:find("Ctrl-C stops", 1, true) ~= nil
    end), "the demo did not start:\n" .. tostring(printed))
  end)

  teardown(function()
    if pid then h.stop_pid(pid, "TERM") end
  end)

  it("answers / with 200 and the curl lines the demo printed, for its own address", function()
    local res = assert(h.http(port, "/"))
    assert.equal(200, res.status)
    assert.matches("^text/plain", res.headers["content-type"])
    local url = "http://127.0.0.1:" .. port
    assert.matches("lua-resty-dlock demo gateway on " .. url .. "\n", res.body, 1, true)
    for _, path in ipairs({ "/orders?ms=2000", "/reports?user=alice", "/refresh?user=bob", "/jobs?job=nightly",
                            "/api", "/dlock/status", "/dlock/metrics" }) do
      assert.matches("curl [^\n]*" .. url:gsub("%p", "%%%0") .. path:gsub("%p", "%%%0"), res.body)
    end
    assert.is_truthy(printed:find(res.body, 1, true), "the page differs from what the demo printed:\n" .. printed)
    assert.is_nil(res.body:find("@URL@", 1, true))
  end)

  it("serves what the page tells to try", function()
    assert.equal(200, assert(h.http(port, "/dlock/status")).status)
    assert.equal(200, assert(h.http(port, "/jobs?job=" .. h.unique("demo") .. "&ms=0")).status)
    -- The rate-limited location: burst 5 at once, then 429 with Retry-After and the RateLimit fields.
    local key = h.unique("demo-api")
    local codes = {}
    for i = 1, 8 do
      local res = assert(h.http(port, "/api?ms=0", { headers = { ["X-Api-Key"] = key } }))
      codes[i] = res.status
      assert.matches('^"10%-per%-1s";r=%d;t=1$', res.headers["ratelimit"])
      assert.equal('"10-per-1s";q=10;w=1;dlock-burst=5', res.headers["ratelimit-policy"])
      if res.status == 429 then assert.equal("1", res.headers["retry-after"]) end
    end
    assert.same({ 200, 200, 200, 200, 200 }, { unpack(codes, 1, 5) })
    assert.is_truthy(table.concat(codes, " "):find("429", 1, true))
    assert.equal(400, assert(h.http(port, "/api?ms=0")).status)
  end)
end)

h.check_error_logs()
