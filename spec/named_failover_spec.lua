-- A Sentinel set as the usual Kubernetes charts run it, every part at once:
-- sentinels reached by name through nginx's resolver, announcing their master
-- by host name (resolve-hostnames, announce-hostnames), TLS everywhere checked
-- against those names (ssl_verify, no server_name), a password on every server
-- and another on the sentinels, WAIT for a replica; then a failover. Every
-- name is localhost: the one name every machine's sentinels can resolve (they
-- use the system's resolver), and the one the test certificate carries.
local h = require "helpers"

describe("Sentinel by host names with verified TLS and passwords, through a failover", function()
  local dns, n, set
  local PW, SPW = "data-secret", "sentinel-secret"

  setup(function()
    dns = h.start_dns("localhost=127.0.0.1")
    n = h.resolving_nginx(dns)
    set = h.start_sentinel_set({ name = "k8s", tls = true, password = PW, sentinel_password = SPW, host = "localhost",
      args = { "--replica-announce-ip localhost" },
      sentinel_conf = "sentinel resolve-hostnames yes\nsentinel announce-hostnames yes" })
  end)
  teardown(function()
    if set then set.stop() end
    if n then n.stop() end
    if dns then dns.stop() end
  end)

  --- The redis options, the sentinels named.
  local function redis_lua()
    local nodes = {}
    for i, s in ipairs(set.sentinels) do nodes[i] = "'localhost:" .. s.tls_port .. "'" end
    return "{ sentinel = { master = 'k8s', nodes = { " .. table.concat(nodes, ", ") .. " }, password = '" .. SPW .. "' }, " ..
      "password = '" .. PW .. "', ssl = true, ssl_verify = true, replicas = 1, connect_timeout = 500, read_timeout = 1000 }"
  end

  --- The plaintext port of the server whose TLS port is tls_port.
  local function plain(tls_port)
    for _, r in ipairs({ set.master, unpack(set.replicas) }) do
      if r.tls_port == tls_port then return r.port end
    end
  end

  it("locks on the master the sentinels name localhost, keeps a lock through the failover, and locks on the new master", function()
    local addr = h.cmd(set.sentinels[1].port, "sentinel", "get-master-addr-by-name", "k8s")
    assert.same({ "localhost", tostring(set.master.tls_port) }, addr)
    local key = h.unique("held")
    local token = assert(h.lock_via(n, redis_lua(), key, true))
    assert.equal(token, h.cmd(set.master.port, "get", "dlock:" .. key))

    local new = plain(set.failover())
    assert.is_not_nil(new)
    assert.are_not.equal(set.master.port, new)
    assert.equal("localhost", h.cmd(set.sentinels[1].port, "sentinel", "get-master-addr-by-name", "k8s")[1])
    -- The held lock, written with WAIT 1, is on the new master: refused there, never let through.
    assert.equal(token, h.cmd(new, "get", "dlock:" .. key))
    local decided, err
    assert(h.eventually(10, function()
      decided, err = h.lock_via(n, redis_lua(), key)
      if decided or err == "busy\n" then return true end
      ngx.sleep(0.1)
    end), "no decision on the new master: " .. tostring(err))
    assert.is_nil(decided)
    assert.equal("busy\n", err)
    -- A fresh key is taken on the new master, the name checked by TLS as before, once the old master
    -- follows it as a replica (WAIT 1 refuses a lock no replica has: not taken).
    assert(h.wait_replicated(new, 15), "no replica streams from the new master")
    local fresh = h.unique("after")
    assert(h.lock_via(n, redis_lua(), fresh, true))
    assert.is_string(h.cmd(new, "get", "dlock:" .. fresh))
  end)
end)

h.check_error_logs({
  -- The old master going down to a replica drops the connections it had.
  { "recv%(%) failed %(104: Connection reset by peer%)", max = 20 },
})
