-- nginx instances for the specs, rendered from the templates under nginx/,
-- and a tiny HTTP client on cosockets to talk to them.
local h = require "harness.base"
local process = require "harness.process"

local env, next_seq = h.env, h.next_seq
local track, read_file, free_port = process.track, process.read_file, process.free_port

local _M = {}

-- The error logs of the nginx instances start_nginx started, in order, and
-- their size before (see check_error_logs).
local started = {}

local function size(path)
  local f = io.open(path, "r")
  if not f then return 0 end
  local n = f:seek("end")
  f:close()
  return n
end

_M.started, _M.size = started, size

--- The error log of an nginx started otherwise (a system nginx.conf): checked
--- by check_error_logs from here on, as start_nginx's are.
function _M.follow_log(path)
  started[#started + 1] = { log = path, from = size(path) }
end

--- Whether the runner's nginx was built with `flag` (as `nginx -V` names it,
--- e.g. "http_auth_request_module"): Debian's has modules an OpenResty build may not.
function _M.nginx_has(flag)
  local p = io.popen(env.nginx .. " -V 2>&1")
  local out = p:read("*a")
  p:close()
  return out:find("--with-" .. flag, 1, true) ~= nil
end

--- Whether the runner's nginx is OpenResty's (its own patches: phases that may yield where a stock nginx's may not).
function _M.nginx_is_openresty()
  local p = io.popen(env.nginx .. " -v 2>&1")
  local out = p:read("*a")
  p:close()
  return out:find("openresty/", 1, true) ~= nil
end

--- Start an nginx from a template under nginx/ with @NAME@ values; returns
--- { port, prefix, pid, stop(), reload(), workers(), exited(pids), replaced(old, count), error_log() }. It runs
--- daemonized with its own prefix.
function _M.start_nginx(template, vars)
  local port = free_port()
  local prefix = env.prefix .. "/nginx-" .. next_seq()
  os.execute("mkdir -p " .. prefix .. "/logs")
  -- The first substitution of a name wins, so the caller's values go first.
  -- Each NAME=value one shell word, whatever the value holds (spaces, quotes).
  local function word(v) return "'" .. tostring(v):gsub("'", "'\\''") .. "'" end
  local kv = {}
  for k, v in pairs(vars or {}) do kv[#kv + 1] = word(k .. "=" .. tostring(v)) end
  kv[#kv + 1] = "HTTP_PORT=" .. port
  kv[#kv + 1] = "REDIS_PORT=" .. env.redis_port
  -- A later spec file may get the same prefix (busted loads this module afresh per file): its log from here on.
  started[#started + 1] = { log = prefix .. "/logs/error.log", from = size(prefix .. "/logs/error.log") }
  -- nginx gives its workers no environment, so the runner's binary is named here:
  -- render_conf fills @LUA_MODULES@ for that binary (none when Lua is built in).
  local cmd = string.format("DLOCK_NGINX=%s bash -c '. %s/nginx/lib.sh; render_conf \"$@\"' render_conf %s/nginx/%s %s %s/nginx.conf %s",
    env.nginx, env.root, env.root, template, prefix, prefix, table.concat(kv, " "))
  assert(process.sh(cmd), "render_conf failed")
  assert(process.sh(env.nginx .. " -p " .. prefix .. " -c " .. prefix .. "/nginx.conf -g 'daemon on;' 2>>" .. prefix .. "/logs/start.log"),
    "nginx did not start: " .. tostring(read_file(prefix .. "/logs/start.log")))
  local pid
  for _ = 1, 100 do
    pid = tonumber(read_file(prefix .. "/logs/nginx.pid") or "")
    if pid then break end
    ngx.sleep(0.05)
  end
  assert(pid, "nginx wrote no pid file")
  track(pid)
  local n = { port = port, prefix = prefix, pid = pid }
  function n.stop() return process.stop_pid(pid, "QUIT") end
  function n.workers()
    local p = io.popen("pgrep -P " .. pid)
    local out = {}
    for line in p:lines() do out[#out + 1] = tonumber(line) end
    p:close()
    return out
  end
  function n.error_log() return read_file(prefix .. "/logs/error.log") or "" end
  --- nginx -s reload: new workers start, the old ones finish their requests and exit.
  function n.reload()
    return process.sh(env.nginx .. " -p " .. prefix .. " -c " .. prefix .. "/nginx.conf -s reload")
  end
  --- Until none of `pids` (old workers) is running; true, or false after `seconds`.
  function n.exited(pids, seconds)
    return h.eventually(seconds or 5, function()
      for _, p in ipairs(pids) do
        if process.sh("kill -0 " .. p .. " 2>/dev/null") then
          ngx.sleep(0.05)
          return false
        end
      end
      return true
    end)
  end
  --- After a reload: the old workers (`old`) gone within 5 s and `count` new ones running; true, or false and why.
  function n.replaced(old, count)
    if not n.exited(old, 5) then return false, "an old worker still runs 5 s after the reload" end
    local now = n.workers()
    if #now ~= count then return false, #now .. " workers run, not " .. count end
    for _, w in ipairs(now) do
      for _, o in ipairs(old) do
        if o == w then return false, "worker " .. w .. " is an old one" end
      end
    end
    return true
  end
  for _ = 1, 100 do
    local res = _M.http(port, "/ping")
    if res and res.status == 200 then break end
    ngx.sleep(0.05)
  end
  return n
end

--- GET (or opts.method) over a cosocket, HTTP/1.0: { status, headers, body, raw_head }, or nil, err.
--- Header names are lower-cased; a repeated one is a list of its values, as ngx.req.get_headers() gives it.
--- opts: headers (a value may be a list: one line each), body (sent with its Content-Length), timeout (ms), abort_after (ms: close the socket then,
--- mid-request, and return { aborted = true }).
function _M.http(port, path, opts)
  opts = opts or {}
  local sock = ngx.socket.tcp()
  sock:settimeout(opts.timeout or 10000)
  local ok, err = sock:connect("127.0.0.1", port)
  if not ok then return nil, err end
  local lines = { (opts.method or "GET") .. " " .. path .. " HTTP/1.0", "Host: localhost" }
  if opts.body then lines[#lines + 1] = "Content-Length: " .. #opts.body end
  for k, v in pairs(opts.headers or {}) do
    -- A list of values is sent as that many lines of the header.
    for _, x in ipairs(type(v) == "table" and v or { v }) do lines[#lines + 1] = k .. ": " .. x end
  end
  local _, serr = sock:send(table.concat(lines, "\r\n") .. "\r\n\r\n" .. (opts.body or ""))
  if serr then sock:close() return nil, serr end
  if opts.abort_after then
    ngx.sleep(opts.abort_after / 1000)
    sock:close()
    return { aborted = true }
  end
  local data, rerr, partial = sock:receive("*a")
  sock:close()
  data = data or partial
  if not data or data == "" then return nil, rerr end
  local head, body = data:match("^(.-)\r\n\r\n(.*)$")
  head = head or data
  local res = { status = tonumber(head:match("^HTTP/%d%.%d (%d+)")), headers = {}, body = body or "", raw_head = head }
  for k, v in head:gmatch("\r\n([^:\r\n]+): *([^\r\n]*)") do
    k = k:lower()
    local seen = res.headers[k]
    if seen == nil then
      res.headers[k] = v
    elseif type(seen) == "table" then
      seen[#seen + 1] = v
    else
      res.headers[k] = { seen, v }
    end
  end
  return res
end

--- Guard `name`'s row on the status page (/dlock/status) of the nginx on `port`.
function _M.guard_row(port, name)
  local res = assert(_M.http(port, "/dlock/status"))
  return assert(require("cjson.safe").decode(res.body), res.body).guards[name]
end

--- The witness of nginx/backend.conf on `port` for key: hits, most inside at once, inside now.
function _M.backend_stats(port, key)
  local res = assert(_M.http(port, "/stats?key=" .. key))
  local hits, max, inflight = res.body:match("^(%d+) (%d+) (%d+)")
  return tonumber(hits), tonumber(max), tonumber(inflight)
end

--- A client's requests one after another, `count` to each of `paths` (on the nginx on `port`, with
--- ?key= a key of their own per path): how many were answered other than 200, and a line per path
--- naming the first few of them (request:status).
function _M.one_after_another(port, paths, count)
  local total, report = 0, {}
  for _, path in ipairs(paths) do
    local key = h.unique("seq" .. path:gsub("%W", "-"))
    local refused, first = 0, {}
    for i = 1, count do
      local res = assert(_M.http(port, path .. "?key=" .. key))
      if res.status ~= 200 then
        refused = refused + 1
        if #first < 5 then first[#first + 1] = i .. ":" .. res.status end
      end
    end
    total = total + refused
    report[#report + 1] = path .. " refused " .. refused .. " of " .. count .. " (request:status " .. table.concat(first, " ") .. ")"
  end
  return total, table.concat(report, "; ")
end

--- A header's value as one string (a repeated header is a list of its values).
function _M.joined(v)
  if type(v) == "table" then return table.concat(v, ", ") end
  return v
end

--- The items of a RateLimit or RateLimit-Policy value, in order: { name = <the sf-string>, params = { k = v } }.
function _M.ratelimit_items(v)
  local out = {}
  for item in (_M.joined(v) .. ","):gmatch("%s*([^,]+),") do
    local name, rest = item:match('^"([^"]*)"(.*)$')
    local params = {}
    for k, x in (rest or ""):gmatch(";([%w%-]+)=([^;]+)") do params[k] = tonumber(x) or x end
    out[#out + 1] = { name = name, params = params }
  end
  return out
end

--- A copy of the library (dist/) at dir/lib that workers running as nobody can read (a checkout
--- may be in a private directory, as root's home is); its path.
function _M.public_lib(dir)
  local lib = dir .. "/lib"
  assert(process.sh("mkdir -p " .. dir .. " && chmod 755 " .. dir .. " && rm -rf " .. lib .. " && cp -r " .. env.root .. "/dist " ..
    lib .. " && chmod -R a+rX " .. lib))
  return lib
end

--- A copy of the specs' client key at dir/keys/client.key that only root may read; its path.
function _M.private_key(dir, cert)
  local keys = dir .. "/keys"
  assert(process.sh("mkdir -p " .. keys .. " && cp " .. cert.ssl_client_priv_key .. " " .. keys .. "/client.key && chmod 700 " ..
    keys .. " && chmod 600 " .. keys .. "/client.key"))
  return keys .. "/client.key"
end

--- n GETs of path on port, sent 50 ms apart and in flight together; during(), when
--- given, runs while they are; their statuses, sorted.
function _M.together(port, path, n, during)
  local threads, statuses = {}, {}
  for i = 1, n do
    threads[i] = ngx.thread.spawn(_M.http, port, path)
    ngx.sleep(0.05)
  end
  if during then during() end
  for i = 1, n do
    local ok, res, err = ngx.thread.wait(threads[i])
    assert(ok, res)
    statuses[i] = assert(res, err).status
  end
  table.sort(statuses)
  return statuses
end

--- GET a peer's hammer location, whose body is "<taken> <errors>": how many it took, or nil and why not.
function _M.hammered(port, path, timeout)
  local res, err = _M.http(port, path, { timeout = timeout })
  local got, errs = (res and res.body or ""):match("^(%d+) (%d+)")
  if not res or res.status ~= 200 or errs ~= "0" then
    return nil, "peer: " .. tostring(res and res.status or err) .. " " .. tostring(res and res.body)
  end
  return tonumber(got)
end

--- GET path on a connection kept open (HTTP/1.1): the crash-hold locations
--- stream a line saying what they took, then hold it until the worker dies.
--- Reads lines until one matches `pattern`; returns its captures, then the socket.
function _M.hold_open(port, path, pattern)
  local sock = ngx.socket.tcp()
  sock:settimeout(5000)
  assert(sock:connect("127.0.0.1", port))
  assert(sock:send("GET " .. path .. " HTTP/1.1\r\nHost: x\r\n\r\n"))
  while true do
    local line = assert(sock:receive("*l"))
    local got = { line:match(pattern) }
    if got[1] ~= nil then
      got[#got + 1] = sock
      return unpack(got)
    end
  end
end

return _M
