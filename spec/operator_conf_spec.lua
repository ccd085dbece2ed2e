-- The nginx.conf an operator starts from, as it ships, with the gateway dropped
-- in the way that configuration means it:
--  * Debian's /etc/nginx/nginx.conf, as `apt install nginx libnginx-mod-http-lua`
--    leaves it (workers as www-data, worker_processes auto, every module of
--    /etc/nginx/modules-enabled, sendfile, tcp_nopush, gzip on, an access log):
--    conf.d/dlock.conf at http level and a site in sites-enabled instead of the
--    default one; only the paths that would touch the system's own nginx move
--    (pid, logs, includes of /etc/nginx);
--  * OpenResty's conf/nginx.conf (workers as nobody, its user line being a
--    comment, one worker, gzip off): an include of the gateway at the end of
--    its http block, its own server moved off port 80, run with a prefix of
--    its own.
-- Which one follows the runner's nginx (DLOCK_NGINX). The Redis asks for a
-- client certificate (mutual TLS) and an ACL user's password; the key only
-- root may read.
local h = require "helpers"

local USER, USER_PASSWORD = "gate", "operator-secret-1"

local function exists(path)
  local f = io.open(path)
  if f then f:close() end
  return f ~= nil
end

--- Run cmd with a shell, or fail naming it and what it printed.
local function run(cmd)
  local p = io.popen("(" .. cmd .. ") 2>&1; echo \"exit $?\"")
  local out = p:read("*a")
  p:close()
  local body, rc = out:match("^(.-)exit (%d+)\n$")
  assert(tonumber(rc) == 0, cmd .. " failed:\n" .. tostring(body or out))
  return body
end

--- Write text to path.
local function write(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end

-- The stock configurations: install(dir, http, site) copies one under dir with the gateway's
-- http-level lines and its site, and gives the command that starts it and its pid file.
local STOCKS = {
  debian = {
    name = "Debian's stock /etc/nginx/nginx.conf, the gateway in conf.d and sites-enabled",
    user = "www-data", gzip = true,
    workers = function() return tonumber(run("nproc")) end,
    install = function(dir, http, site)
      run("cp -r /etc/nginx " .. dir .. "/etc && rm -f " .. dir .. "/etc/sites-enabled/*")
      local conf = assert(h.read_file(dir .. "/etc/nginx.conf"))
      local moved = conf:gsub("pid /run/nginx%.pid;", "pid " .. dir .. "/logs/nginx.pid;")
        :gsub("/var/log/nginx/", dir .. "/logs/")
        :gsub("include /etc/nginx/([^;]+);", function(rest)
          if rest:find("^modules%-enabled/") then return nil end
          return "include " .. dir .. "/etc/" .. rest .. ";"
        end)
      -- Only those lines differ from the stock file (modules-enabled stays the system's: its modules are the point).
      assert(moved:find("include /etc/nginx/modules-enabled/*.conf;", 1, true))
      assert(("\n" .. moved):find("\nuser www%-data;"))
      assert(moved:find("\n%s*gzip on;"))
      write(dir .. "/etc/nginx.conf", moved)
      write(dir .. "/etc/conf.d/dlock.conf", http)
      write(dir .. "/etc/sites-enabled/gateway", site)
      return "/usr/sbin/nginx -c " .. dir .. "/etc/nginx.conf"
    end,
  },
  openresty = {
    name = "OpenResty's stock conf/nginx.conf, the gateway included at the end of its http block",
    user = "nobody", gzip = false,
    workers = function() return 1 end,
    install = function(dir, http, site, bin)
      local stock = bin:gsub("/sbin/nginx$", "/conf")
      run("cp -r " .. stock .. " " .. dir .. "/conf")
      local conf = assert(h.read_file(dir .. "/conf/nginx.conf"))
      assert(conf:find("\n#user  nobody;", 1, true) and conf:find("\nworker_processes  1;", 1, true))
      local port = h.free_port()
      local moved, n = conf:gsub("listen       80;", "listen       127.0.0.1:" .. port .. ";")
      assert(n == 1, "the stock server's listen line")
      -- The http block ends at the file's last closing brace.
      local last = moved:match(".*()}")
      moved = moved:sub(1, last - 1) .. "    include dlock.conf;\n    include gateway.conf;\n" .. moved:sub(last)
      write(dir .. "/conf/nginx.conf", moved)
      write(dir .. "/conf/dlock.conf", http)
      write(dir .. "/conf/gateway.conf", site)
      return bin .. " -p " .. dir .. " -c conf/nginx.conf"
    end,
  },
}

local bin = h.env.nginx
local stock
if bin == "/usr/sbin/nginx" and exists("/etc/nginx/nginx.conf") then
  stock = STOCKS.debian
elseif bin:find("/nginx/sbin/nginx$") and exists((bin:gsub("/sbin/nginx$", "/conf/nginx.conf"))) then
  stock = STOCKS.openresty
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

describe(stock and stock.name or "an operator's stock nginx.conf", function()
  if not stock then
    pending("the runner's nginx (" .. bin .. ") is neither Debian's with /etc/nginx nor an OpenResty with its conf/")
    return
  end

  local redis, dir, port, pid

  setup(function()
    redis = h.start_redis(nil, "--user " .. USER .. " on '>" .. USER_PASSWORD .. "' " .. h.least_privilege_rules(),
      unpack(h.tls_args(true)))
    dir = h.env.prefix .. "/stock-nginx"
    port = h.free_port()
    local cert = h.client_cert()
    -- The key only root may read; the library where the workers can read it.
    run("rm -rf " .. dir .. " && mkdir -p " .. dir .. "/logs")
    local key, lib = h.private_key(dir, cert), h.public_lib(dir)
    -- The operator's gateway, at http level ...
    local http = string.format([[
lua_package_path "%s/?.lua;;";
lua_shared_dict dlock 10m;
lua_shared_dict backend 1m;
lua_ssl_trusted_certificate %s/tls/ca.pem;
init_by_lua_block {
    local gateway = require "resty.dlock.gateway"
    local redis = { host = "127.0.0.1", port = %d, username = "%s", password = "%s",
                    ssl = true, ssl_verify = true, server_name = "localhost",
                    ssl_client_cert = "%s", ssl_client_priv_key = "%s" }
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
]], lib, h.env.prefix, redis.tls_port, USER, USER_PASSWORD, cert.ssl_client_cert, key)
    -- ... and its site. The backend answers text/html (what gzip compresses by default), counting its runs.
    local site = string.format([[
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
]], port)
    local start = stock.install(dir, http, site, bin)
    run(start .. " -t")
    require("harness.nginx").follow_log(dir .. "/logs/error.log")
    run(start)
    assert(h.eventually(5, function()
      pid = tonumber(h.read_file(dir .. "/logs/nginx.pid") or "")
      local res = pid and h.http(port, "/ping")
      return res and res.status == 200
    end), "the stock nginx did not start")
    h.track(pid)
  end)
  teardown(function()
    if pid then h.stop_pid(pid, "QUIT") end
    if redis then redis.stop() end
  end)

  it("runs its workers as the stock configuration says (Debian: www-data, one per CPU; OpenResty: nobody, one)", function()
    local uid = tonumber(run("id -u " .. stock.user))
    assert.is_true(uid ~= 0)
    assert.equal(uid, tonumber(assert(h.http(port, "/worker")).body))
    local workers = run("pgrep -P " .. pid)
    assert.equal(stock.workers(), select(2, workers:gsub("\n", "")))
  end)

  it("lets one request of a key in and refuses the others with 429", function()
    assert.same({ 200, 429, 429 }, h.together(port, "/one?key=" .. h.unique("k"), 3))
  end)

  it("replays a payment: the first answer compressed where gzip is on (Debian's), its replay the same body, " ..
     "compressed or not as each client asks, and the backend ran it once", function()
    local key = h.unique("pay")
    local ask = "-X POST -d amount=5 -H 'Authorization: Bearer client-1' -H 'Idempotency-Key: " .. key .. "'"
    local gz = ask .. " -H 'Accept-Encoding: gzip'"
    local encoding = stock.gzip and "gzip" or nil
    local function decoded(res) return encoding and gunzip(res.body) or res.body end
    local first = curl(port, "/pay", gz)
    assert.equal(200, first.status)
    assert.equal(encoding, first.headers["content-encoding"])
    local body = decoded(first)
    assert.matches("^<html><body>payment accepted .*run %d+</body></html>\n$", body)
    local again = curl(port, "/pay", gz)
    assert.equal(200, again.status)
    assert.equal("true", again.headers["idempotent-replayed"])
    assert.equal(encoding, again.headers["content-encoding"])
    assert.equal(body, decoded(again))
    local plain = curl(port, "/pay", ask)
    assert.equal("true", plain.headers["idempotent-replayed"])
    assert.is_nil(plain.headers["content-encoding"])
    assert.equal(body, plain.body)
    assert.equal(tonumber(body:match("run (%d+)")), tonumber(assert(h.http(port, "/runs")).body))
  end)
end)

h.check_error_logs({})
