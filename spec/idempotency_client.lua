-- The client side of the idempotency guard's specs (idempotency_spec.lua,
-- idempotency_lifecycle_spec.lua): two nginx of one fleet
-- (nginx/spec-idempotency.conf, 2 workers each) on one Redis, b forwarding to
-- a's backend, which counts how often each operation runs; and what a client
-- of theirs sends and reads.
local h = require "helpers"
local cjson = require "cjson.safe"
local assert = require "luassert"   -- busted's, as the specs have it: problem() asserts like a spec

local _M = {}
local redis, a, b

--- Another nginx of the fleet, on its Redis; its backend `backend`, or one of its own.
local function start(backend)
  local own = h.free_port()
  local n = h.start_nginx("spec-idempotency.conf", {
    REDIS_PORT = redis.port, OWN_BACKEND_PORT = own, BACKEND_PORT = backend or own, DEAD_PORT = h.free_port(),
  })
  n.backend = backend or own
  return n
end

--- The fleet's two nginx and its Redis, started: a, b, redis.
function _M.up()
  redis = h.start_redis()
  a = start()
  b = start(a.backend)
  return a, b, redis
end

--- Stop what up() started.
function _M.down()
  if a then a.stop() end
  if b then b.stop() end
  if redis then redis.stop() end
  redis, a, b = nil, nil, nil
end

--- One request (h.http) as the spec's client, whose keys the guards keep per Authorization (unless
--- opts.anonymous or a test names its own); a request that gets no answer fails the test.
local function request(n, method, path, opts)
  opts = opts or {}
  local headers = {}
  for k, v in pairs(opts.headers or {}) do headers[k] = v end
  if headers.Authorization == nil and not opts.anonymous then headers.Authorization = "Bearer spec-client" end
  local res, err = h.http(n.port, path, { method = method, headers = headers, body = opts.body or "",
    timeout = opts.timeout, abort_after = opts.abort_after })
  return assert(res, err)
end

--- POST over HTTP/1.1: returns as soon as the last byte of the body is in (chunked or
--- Content-Length), before nginx ends the request (its log phase, the close).
local function post11(n, path, key, body)
  local sock = ngx.socket.tcp()
  sock:settimeout(10000)
  assert(sock:connect("127.0.0.1", n.port))
  assert(sock:send("POST " .. path .. " HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer spec-client\r\n" ..
    "Idempotency-Key: " .. key .. "\r\nContent-Length: " .. #body .. "\r\n\r\n" .. body))
  local status = tonumber(assert(sock:receive("*l")):match("^HTTP/1%.1 (%d+)"))
  local headers = {}
  while true do
    local line = assert(sock:receive("*l"))
    if line == "" then break end
    local k, v = line:match("^([^:]+): *(.*)$")
    headers[k:lower()] = v
  end
  local parts = {}
  if headers["content-length"] then
    parts[1] = assert(sock:receive(tonumber(headers["content-length"])))
  elseif headers["transfer-encoding"] == "chunked" then
    while true do
      local size = tonumber(assert(sock:receive("*l")), 16)
      if size == 0 then assert(sock:receive("*l")) break end
      parts[#parts + 1] = assert(sock:receive(size))
      assert(sock:receive("*l"))
    end
  end
  sock:close()
  return { status = status, headers = headers, body = table.concat(parts) }
end

local function post(n, path, key, body, extra)
  local headers = { ["Idempotency-Key"] = key }
  for k, v in pairs(extra or {}) do headers[k] = v end
  return request(n, "POST", path, { headers = headers, body = body })
end

local function executions(n, key)
  return (h.backend_stats(n.backend, key))
end

local function guard(n, name)
  return assert(cjson.decode(request(n, "GET", "/dlock/status").body)).guards[name]
end

local function problem(res, status, kind)
  assert.equal(status, res.status)
  assert.equal("application/problem+json", res.headers["content-type"])
  local p = assert(cjson.decode(res.body))
  assert.equal(status, p.status)
  assert.is_truthy(p.type:find(kind, 1, true), p.type)
  assert.is_string(p.title)
  assert.is_string(p.detail)
  return p
end

--- A fresh key and the backend key of the operation (the query names it).
local function fresh(name)
  local k = h.unique(name):gsub("[^%w]", "-")
  return k, "?key=" .. k
end

--- The headers a replay must repeat (what the application sent, but its cookies): a repeated one's values in order.
local function app_headers(res)
  return { res.headers["content-type"], res.headers["x-execution"], res.headers["x-multi"] }
end

_M.start = start
_M.request = request
_M.post11 = post11
_M.post = post
_M.executions = executions
_M.guard = guard
_M.problem = problem
_M.fresh = fresh
_M.app_headers = app_headers

return _M
