-- Debian's own nginx.conf, as `apt install nginx libnginx-mod-http-lua` leaves it
-- (workers as www-data, worker_processes auto, every module of
-- /etc/nginx/modules-enabled loaded, sendfile, tcp_nopush, gzip on, an access
-- log), with an operator's gateway dropped in the way Debian means it:
-- conf.d/dlock.conf at http level and a site in sites-enabled instead of the
-- default one. Nothing of the stock file is changed but the paths that would
-- touch the system's own nginx (pid, logs, includes of /etc/nginx). The
-- Redis asks for a client certificate (mutual TLS) and an ACL user's password;
-- the key only root may read. The binary and modules are Debian's: under
-- another nginx (DLOCK_NGINX=/opt/openresty) this file has nothing to run.
local h = require "helpers"

local STOCK = "/etc/nginx/nginx.conf"
local USER, USER_PASSWORD = "gate", "operator-secret-1"

local function exists(path)
  local f = io.open(path)
  if f then f:close() end
  return f ~= nil
end
local debian = h.env.nginx == "/usr/sbin/nginx" and exists(STOCK)

--- Run cmd with a shell, or fail naming it and what it printed.
local function run(cmd)
  local p = io.popen("(" .. cmd .. ") 2>&1; echo \"exit $?\"")
  local out = p:read("*a")
  p:close()
  local body, rc = out:match("^(.-)exit (%d+)\n$")
  assert(tonumber(rc) == 0, cmd .. " failed:\n" .. tostring(body or out))
  return body
end

--- curl over HTTP/1.1 (gzip answers only 1.1 by default): { status, headers (lower-cased), body } with the body
--- as sent (compressed when it was), for a request with these extra curl arguments.
local function curl(port, path, args)
  local dir = h.env.prefix .. "/operator-curl"
  run("mkdir -p " .. dir)
  local head, body = dir .. "/head", dir .. "/body"
  run("curl -sS --http1.1 -o " .. body .. " -D " .. head .. " " .. (args or "") .. " http://127.0.0.1:" .. port .. path)
  local raw = h.read_file(head)
  local res = { status = tonumber(raw:match("^HTTP/%S+ (%d+)")), headers = {}, body = h.read_file(body) }
  for k, v in raw:gmatch("\r\n([^:\r\n]+): *([^\r\n]*)") do res.headers[k:lower()] = v end
  return res
end

local function gunzip(data)
  local path = h.env.prefix .. "/operator-curl/gz"
  local f = assert(io.open(path, "wb"))
  f:write(data)
  f:close()
  return run("gzip -dc < " .. path)
end

describe("Debian's stock nginx.conf with an operator's gateway in conf.d and sites-enabled", function()
  if not debian then
    pending("the runner's nginx is not Debian's /usr/sbin/nginx with " .. STOCK .. " (DLOCK_NGINX)")
    return
  end

  local redis, dir, port, pid

  setup(function()
    redis = h.start_redis(nil, "--user " .. USER .. " on '>" .. USER_PASSWORD .. "' " .. h.least_privilege_rules(),
      unpack(h.tls_args(true)))
    dir = h.env.prefix .. "/debian-nginx"
    port = h.free_port()
    local cert = h.client_cert()
    -- The stock configuration, copied; the paths that are the system nginx's own moved here.
    run("rm -rf " .. dir .. " && mkdir -p " .. dir .. "/logs " .. dir .. "/keys && cp -r /etc/nginx " .. dir .. "/etc" ..
      " && rm -f " .. dir .. "/etc/sites-enabled/*" ..
      " && cp " .. cert.ssl_client_priv_key .. " " .. dir .. "/keys/client.key && chmod 700 " .. dir .. "/keys" ..
      " && chmod 600 " .. dir .. "/keys/client.key" ..
      " && cp -r " .. h.env.root .. "/dist " .. dir .. "/lib && chmod -R a+rX " .. dir .. "/lib")
    local conf = assert(h.read_file(dir .. "/etc/nginx.conf"))
    local moved = conf:gsub("pid /run/nginx%.pid;", "pid " .. dir .. "/nginx.pid;")
      :gsub("/var/log/nginx/", dir .. "/logs/")
      :gsub("include /etc/nginx/([^;]+);", function(rest)
        if rest:find("^modules%-enabled/") then return nil end
        return "include " .. dir .. "/etc/" .. rest .. ";"
      end)
    -- Only those lines differ from the stock file (modules-enabled stays the system's: its modules are the point).
    assert.is_truthy(moved:find("include /etc/nginx/modules-enabled/*.conf;", 1, true))
    assert.is_truthy(("\n" .. moved):find("\nuser www%-data;"))
    assert.is_truthy(moved:find("\n%s*gzip on;"))
    local f = assert(io.open(dir .. "/etc/nginx.conf", "w"))
    f:write(moved)
    f:close()
    -- The operator's gateway, at http level (conf.d) ...
    f = assert(io.open(dir .. "/etc/conf.d/dlock.conf", "w"))
    f:write(string.format([[
lua_package_path "%s/lib/?.lua;;";
lua_shared_dict dlock 10m;
lua_shared_dict backend 1m;
lua_ssl_trusted_certificate %s/tls/ca.pem;
init_by_lua_block {
    local gateway = require "resty.dlock.gateway"
    local redis = { host = "127.0.0.1", port = %d, username = "%s", password = "%s",
                    ssl = true, ssl_verify = true, server_name = "localhost",
                    ssl_client_cert = "%s", ssl_client_priv_key = "%s/keys/client.key" }
    guards = {
        one = assert(gateway.new({ name = "one", mode = "concurrency", permits = 1, key = "$arg_key",
                                   on_error = "deny", redis = redis })),
        pay = assert(gateway.new({ name = "pay", mode = "idempotency", key = "$http_idempotency_key",
                                   scope = "$http_authorization", on_error = "deny", redis = redis })),
    }
}
init_worker_by_lua_block { assert(require("resty.dlock").init_worker()) }
log_by_lua_block { require("resty.dlock.gateway").log() }
header_filter_by_lua_block { require("resty.dlock.gateway").header_filter() }
body_filter_by_lua_block { require("resty.dlock.gateway").body_filter() }
]], dir, h.env.prefix, redis.tls_port, USER, USER_PASSWORD, cert.ssl_client_cert, dir))
    f:close()
    -- ... and its site. The backend answers text/html (what gzip compresses by default), counting its runs.
    f = assert(io.open(dir .. "/etc/sites-enabled/gateway", "w"))
    f:write(string.format([[
server {
    listen 127.0.0.1:%d;
    location = /ping { return 200 "pong\n"; }
    location = /worker {
        content_by_lua_block {
            local f = assert(io.open("/proc/self/status"))
            ngx.say(f:read("*a"):match("\nUid:%%s+(%%d+)"))
            f:close()
        }
    }
    location = /one {
        access_by_lua_block { guards.one:access() }
        content_by_lua_block { ngx.sleep(0.6) ngx.say("ran") }
    }
    location = /pay {
        access_by_lua_block { guards.pay:access() }
        default_type text/html;
        content_by_lua_block {
            local n = ngx.shared.backend:incr("runs", 1, 0)
            ngx.say("<html><body>", string.rep("payment accepted ", 200), "run ", n, "</body></html>")
        }
    }
    location = /runs { content_by_lua_block { ngx.say(ngx.shared.backend:get("runs") or 0) } }
}
]], port))
    f:close()
    run("/usr/sbin/nginx -t -c " .. dir .. "/etc/nginx.conf")
    require("harness.nginx").follow_log(dir .. "/logs/error.log")
    run("/usr/sbin/nginx -c " .. dir .. "/etc/nginx.conf")
    assert(h.eventually(5, function()
      pid = tonumber(h.read_file(dir .. "/nginx.pid") or "")
      local res = pid and h.http(port, "/ping")
      return res and res.status == 200
    end), "Debian's nginx did not start")
    h.track(pid)
  end)
  teardown(function()
    if pid then h.stop_pid(pid, "QUIT") end
    if redis then redis.stop() end
  end)

  it("runs its workers as www-data, as many as the machine has CPUs", function()
    local uid = tonumber(run("id -u www-data"))
    assert.equal(uid, tonumber(assert(h.http(port, "/worker")).body))
    local workers = run("pgrep -P " .. pid)
    local n = select(2, workers:gsub("\n", ""))
    assert.equal(tonumber(run("nproc")), n)
  end)

  it("lets one request of a key in and refuses the others with 429", function()
    assert.same({ 200, 429, 429 }, h.together(port, "/one?key=" .. h.unique("k"), 3))
  end)

  it("replays a payment with gzip on: the first answer compressed, its replay the same body compressed or not, " ..
     "as each client asks, and the backend ran it once", function()
    local key = h.unique("pay")
    local ask = "-X POST -d amount=5 -H 'Authorization: Bearer client-1' -H 'Idempotency-Key: " .. key .. "'"
    local gz = ask .. " -H 'Accept-Encoding: gzip'"
    local first = curl(port, "/pay", gz)
    assert.equal(200, first.status)
    assert.equal("gzip", first.headers["content-encoding"])
    local body = gunzip(first.body)
    assert.matches("^<html><body>payment accepted .*run %d+</body></html>\n$", body)
    local again = curl(port, "/pay", gz)
    assert.equal(200, again.status)
    assert.equal("true", again.headers["idempotent-replayed"])
    assert.equal("gzip", again.headers["content-encoding"])
    assert.equal(body, gunzip(again.body))
    local plain = curl(port, "/pay", ask)
    assert.equal("true", plain.headers["idempotent-replayed"])
    assert.is_nil(plain.headers["content-encoding"])
    assert.equal(body, plain.body)
    assert.equal(tonumber(body:match("run (%d+)")), tonumber(assert(h.http(port, "/runs")).body))
  end)
end)

h.check_error_logs({})
