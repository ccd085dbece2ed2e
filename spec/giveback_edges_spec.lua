-- Giving back at the edges: a request refused after an internal redirect may
-- have run at the backend, so what earlier guards took stays taken; an
-- idempotency claim a later guard's refusal ends is dropped, not stored; and a
-- client that leaves a FastCGI response still being sent is an abort (the
-- bytes received count the records' framing). Real nginx (nginx/spec-giveback-edges.conf, one worker), real
-- Redis, an OpenResty backend and a small FastCGI application (python3).
local h = require "helpers"

local n, r, be, fcgi_pid

-- A FastCGI responder: ?mode=quick (a short answer), ?mode=whole&size=B (B bytes
-- with their Content-Length, in records of 65528), ?mode=match&pause=N
-- (Content-Length 3200: 100 records of 24 bytes, N ms of work, then the last 800).
local FCGI = [==[
import socket, socketserver, struct, sys, time, urllib.parse

def rec(t, content, rid=1):
    pad = (-len(content)) % 8
    return struct.pack(">BBHHBB", 1, t, rid, len(content), pad, 0) + content + b"\0" * pad

class H(socketserver.BaseRequestHandler):
    def handle(self):
        s = self.request
        f = s.makefile("rb")
        params = b""
        rid = 1
        while True:
            hd = f.read(8)
            if len(hd) < 8: return
            _, t, rid, cl, pl, _ = struct.unpack(">BBHHBB", hd)
            body = f.read(cl); f.read(pl)
            if t == 4: params += body
            if t == 5 and cl == 0: break
        q = b""
        i = 0
        while i < len(params):
            def ln():
                nonlocal i
                b = params[i]
                if b < 128:
                    i += 1; return b
                v = struct.unpack(">I", params[i:i+4])[0] & 0x7fffffff
                i += 4; return v
            n = ln(); v = ln()
            name = params[i:i+n]; i += n
            val = params[i:i+v]; i += v
            if name == b"QUERY_STRING": q = val
        a = dict(urllib.parse.parse_qsl(q.decode()))
        mode = a.get("mode", "quick")
        try:
            if mode == "match":
                size, c, k = 3200, 24, 100
                head = b"Status: 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n" % size
                head += b"X-Pad: " + b"p" * ((-(len(head) + 7 + 4)) % 8) + b"\r\n\r\n"
                s.sendall(rec(6, head, rid))
                s.sendall(b"".join(rec(6, b"x" * c, rid) for _ in range(k)))
                time.sleep(int(a.get("pause", "2000")) / 1000)
                s.sendall(rec(6, b"x" * (size - c * k), rid))
            elif mode == "whole":
                size = int(a.get("size", "25165824"))
                s.sendall(rec(6, b"Status: 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n" % size, rid))
                left = size
                while left > 0:
                    m = min(65528, left)
                    s.sendall(rec(6, b"x" * m, rid))
                    left -= m
            else:
                body = b"quick\n"
                s.sendall(rec(6, b"Status: 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body, rid))
            s.sendall(rec(6, b"", rid) + rec(3, struct.pack(">IBBBB", 0, 0, 0, 0, 0), rid))
        except (BrokenPipeError, ConnectionResetError):
            pass

class S(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True

S(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
]==]

local function start_fcgi(port)
  local dir = h.env.prefix .. "/fcgi-" .. port
  assert(h.sh("mkdir -p " .. dir))
  local f = assert(io.open(dir .. "/fcgi.py", "w"))
  f:write(FCGI)
  f:close()
  assert(h.sh(string.format("/usr/bin/python3 %s/fcgi.py %d > %s/log 2>&1 & echo $! > %s/pid", dir, port, dir, dir)))
  local pid = tonumber(h.read_file(dir .. "/pid"))
  assert(pid, "no pid for the FastCGI application")
  h.track(pid)
  assert(h.eventually(5, function() ngx.sleep(0.05) return h.listening(port) end), "the FastCGI application did not start")
  return pid
end

local function get(path, opts)
  return assert(h.http(n.port, path, opts))
end

local function row(name) return h.guard_row(n.port, name) end

--- How many requests with ?key=k reached the application.
local function app_hits(k)
  return tonumber(assert(h.http(be, "/apphits?key=" .. k)).body:match("%d+"))
end

describe("giving back at the edges", function()
  setup(function()
    r = h.start_redis()
    be = h.free_port()
    local fport = h.free_port()
    fcgi_pid = start_fcgi(fport)
    n = h.start_nginx("spec-giveback-edges.conf", { REDIS_PORT = r.port, BACKEND_PORT = be, FCGI_PORT = fport })
  end)
  teardown(function()
    if n then n.stop() end
    if fcgi_pid then h.stop_pid(fcgi_pid, "TERM") end
    if r then r.stop() end
  end)

  describe("a guard that refuses after the request ran at the backend (internal redirect)", function()
    it("keeps the client's rate charge when the file's mutex after the application's X-Accel-Redirect is busy: 3 a minute reach the application, not more", function()
      local file, k = h.unique("file"), h.unique("app")
      local holder = h.spawn(get, "/ip-app?ip=" .. h.unique("holder") .. "&file=" .. file .. "&ms=3000&key=" .. h.unique("h"))
      ngx.sleep(0.3)
      local ip = h.unique("ip")
      local statuses = {}
      for i = 1, 6 do statuses[i] = get("/ip-app?ip=" .. ip .. "&file=" .. file .. "&key=" .. k).status end
      -- Each of these ran the application (it decided and answered X-Accel-Redirect);
      -- only then did the file's mutex refuse the download.
      assert.equal(3, app_hits(k), "requests of one address that reached the application, 3 a minute allowed; statuses: " ..
        table.concat(statuses, " "))
      assert.same({ 503, 503, 503, 429, 429, 429 }, statuses)
      assert.equal(200, holder().status)
    end)

    it("keeps the client's rate charge when the guard of an error_page fallback refuses after the application answered 502", function()
      local file, k = h.unique("file"), h.unique("app")
      local holder = h.spawn(get, "/ip-app?ip=" .. h.unique("holder") .. "&file=" .. file .. "&ms=3000&key=" .. h.unique("h"))
      ngx.sleep(0.3)
      local ip = h.unique("ip")
      local statuses = {}
      for i = 1, 6 do statuses[i] = get("/ip-fail?ip=" .. ip .. "&file=" .. file .. "&key=" .. k).status end
      assert.equal(3, app_hits(k), "requests of one address that reached the application, 3 a minute allowed; statuses: " ..
        table.concat(statuses, " "))
      -- The address used its 3 a minute at the application.
      assert.equal(429, get("/ip-only?ip=" .. ip).status)
      assert.equal(200, holder().status)
    end)

    it("keeps a throttle's key when the file's mutex after the application's X-Accel-Redirect refuses: the application ran, the user waits its minute", function()
      local file, k, user = h.unique("file"), h.unique("app"), h.unique("user")
      local holder = h.spawn(get, "/ip-app?ip=" .. h.unique("holder") .. "&file=" .. file .. "&ms=3000&key=" .. h.unique("h"))
      ngx.sleep(0.3)
      assert.equal(503, get("/user-app?user=" .. user .. "&file=" .. file .. "&key=" .. k).status)
      assert.equal(1, app_hits(k))
      -- The user's request ran at the application: one a minute.
      local again = get("/user-app?user=" .. user .. "&file=" .. h.unique("other") .. "&key=" .. k)
      assert.equal(429, again.status, "the user's second request within its minute reached the application")
      assert.equal(1, app_hits(k))
      assert.equal(200, holder().status)
    end)
  end)

  it("refuses a payment without its account header after its idempotency key was claimed, with no [error] line and no lost claim; the corrected retry runs", function()
    local key, k = h.unique("idem"), h.unique("pay")
    local function pay(headers)
      return get("/pay?key=" .. k, { method = "POST", body = "amount=10", headers = headers })
    end
    local function errors()
      local out = {}
      for line in n.error_log():gmatch("[^\n]+") do
        if line:find("[error]", 1, true) then out[#out + 1] = line end
      end
      return out
    end
    local before, lost = #errors(), row("idem").lost
    -- Without its account header: per_account refuses (400, missing_status) after idem claimed the key.
    assert.equal(400, pay({ ["Idempotency-Key"] = key }).status)
    ngx.sleep(0.3)
    local now = errors()
    assert.equal(before, #now, "a refusal by the guard after the idempotency guard logged: " .. tostring(now[#now]))
    assert.equal(lost, row("idem").lost, "counted as a claim lost")
    -- The same payment with the header: it never ran, so it runs now (no refusal replayed).
    local retry = pay({ ["Idempotency-Key"] = key, ["X-Account"] = h.unique("acct") })
    assert.is_nil(retry.headers["idempotent-replayed"], retry.raw_head)
    assert.equal(200, retry.status)
  end)

  describe("a client that leaves a FastCGI response", function()
    it("keeps a mutex when the client leaves while the FastCGI application is still sending (bytes received count the records' framing)", function()
      local job = h.unique("job")
      local before = row("fjob")
      -- 2400 of the 3200 body bytes sent (3200 bytes with the records' headers), then 2 s of work.
      get("/fcgi?job=" .. job .. "&mode=match&pause=2000", { abort_after = 500 })
      ngx.sleep(0.2)
      local second = get("/fcgi?job=" .. job .. "&mode=quick")
      local seen = h.read_file(n.prefix .. "/logs/fcgi.log") or ""
      assert.equal(before.aborted + 1, row("fjob").aborted, "the abort was not counted: the key was released; " .. seen)
      assert.equal(503, second.status, "a second job ran beside the first one, still at work")
      ngx.sleep(2)
    end)
  end)
end)

h.check_error_logs({
  -- the idempotency test's own finding, failed there
  { "dlock: guard idem: the claim on dlock:gw:idem:%x+ ran out before its response could be stored", max = 1 },
})
