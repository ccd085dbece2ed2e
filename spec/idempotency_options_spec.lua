-- The idempotency guard's options (gateway.new with mode = "idempotency"):
-- their defaults, the options of other modes refused, each bad value named,
-- and the Idempotency-Key header's syntax. No nginx of its own: what the guard
-- does with them is in idempotency_spec.lua and idempotency_lifecycle_spec.lua.
local h = require "helpers"

describe("gateway.new mode idempotency options", function()
  local gateway = require "resty.dlock.gateway"
  local n = 0
  local function new(o)
    n = n + 1
    local opts = { name = "idem-opts-" .. n, mode = "idempotency", key = "$http_idempotency_key", on_error = "deny",
      scope = "$http_authorization", redis = h.redis_opts() }
    for k, v in pairs(o) do opts[k] = v end
    if o.scope == "none" then opts.scope = nil end
    return gateway.new(opts)
  end

  it("takes the options of the issue with their defaults", function()
    local g = assert(new({ scope = "$http_authorization", methods = { "POST" }, on_missing = "reject", ttl = 3600000,
      lease = 30000, wait = 2000, max_body = 10, max_request_body = 10, store = { "2xx", 500 },
      store_headers = { "set-cookie" } }))
    assert.is_nil(g._skip["set-cookie"])
    assert.equal("idempotency", g.mode)
    local d = assert(new({}))
    assert.equal(86400000, d._ttl)
    assert.equal(60000, d._lease)
    assert.equal(1048576, d._maxBody)
    assert.equal(1000, d._wait)
    assert.is_true(d._skip["set-cookie"])
    assert.is_nil(assert(new({ scope = false }))._scope)
    assert.is_true(d._store[201])
    assert.is_true(d._store[500])
    assert.is_nil(d._store[429])
    assert.is_nil(d._store[502])
  end)

  it("refuses options of other modes, naming the option and value", function()
    for name, v in pairs({ hold = 1000, permits = 2, renew = true, read_body = true, reject_status = 409 }) do
      local g, err = new({ [name] = v })
      assert.is_nil(g)
      assert.is_truthy(err:find("dlock: " .. name .. " does not apply to mode idempotency, got", 1, true), err)
    end
  end)

  it("refuses options of mode idempotency in other modes", function()
    for _, name in ipairs({ "scope", "methods", "lease", "max_body", "max_request_body", "store", "store_headers" }) do
      local g, err = gateway.new({ mode = "dedup", key = "$arg_k", on_error = "allow", [name] = 1 })
      assert.is_nil(g)
      assert.is_truthy(err:find(name .. " applies to mode idempotency only, not dedup", 1, true), err)
    end
  end)

  it("says what is wrong with a bad value", function()
    local cases = {
      { { max_body = -1 }, "dlock: max_body must be a non-negative integer of bytes, got -1" },
      { { lease = 10 }, "dlock: lease must be an integer of ms (at least 300), got 10" },
      { { ttl = "1d" }, "dlock: ttl must be an integer of ms (at least 1000), got \"1d\"" },
      { { methods = { "post" } }, "dlock: methods must be a list of upper-case HTTP methods, got \"post\"" },
      { { store = { "6xx" } }, "dlock: store must be a list of statuses (200..599) and classes (\"2xx\"..\"5xx\"), got \"6xx\"" },
      { { store = {} }, "dlock: store must be a list of statuses (200..599) and classes (\"2xx\"..\"5xx\"), got a table" },
      { { store = { 200, [5] = 500 } }, "dlock: store must be a list of statuses (200..599) and classes" },
      { { on_missing = "drop" }, "dlock: on_missing must be \"pass\" or \"reject\", got \"drop\"" },
      { { scope = "tenant" }, "dlock: scope must name at least one nginx variable" },
      { { scope = "none" }, "dlock: scope is required for mode idempotency: what tells clients apart " ..
        "(\"$http_authorization\", \"$cookie_session\", a function), or scope = false to share every key among all clients, got nil" },
      { { wait = 0 }, "dlock: wait must be an integer of ms of at least 1000 (a retry sent right after the first response " ..
        "must find it stored), got 0" },
      { { store_headers = { "Content-Type" } }, "dlock: store_headers must be a list of headers not stored by default " ..
        "(\"Set-Cookie\"); other headers are stored anyway, and hop-by-hop ones never, got \"Content-Type\"" },
      { { store_headers = "Set-Cookie" }, "dlock: store_headers must be a list of headers not stored by default" },
    }
    for _, c in ipairs(cases) do
      local g, err = new(c[1])
      assert.is_nil(g)
      assert.is_truthy(err:find(c[2], 1, true), err)
    end
  end)

  it("parses keys as sf-Strings or tokens", function()
    local idem = require "resty.dlock.gateway.idempotency"
    assert.equal("abc", idem.parseKey('"abc"'))
    assert.equal('a"b\\c', idem.parseKey('"a\\"b\\\\c"'))
    assert.equal("8e03978e-40d5-43e8-bc93-6894a57f9324", idem.parseKey("8e03978e-40d5-43e8-bc93-6894a57f9324"))
    assert.is_nil(idem.parseKey('""'))
    assert.is_nil(idem.parseKey('"a\\x"'))
    assert.is_nil(idem.parseKey('"a\\\\"b"'))
    assert.is_nil(idem.parseKey("a b"))
    assert.is_nil(idem.parseKey('"caf\195\169"'))
    assert.is_nil(idem.parseKey('"' .. string.rep("k", 256) .. '"'))
  end)
end)

h.check_error_logs({})
