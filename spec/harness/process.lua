-- Processes and ports for every spec: shell commands, the pids of what a
-- spec starts (appended to <prefix>/pids, so spec/runner/run stops it even
-- when a spec fails midway), stopping one, and ports unique for the whole run.
local env = require "testenv"

local _M = {}

-- Busted loads this module afresh for each spec file: the ports handed out
-- are kept in a shared dict of the runner's nginx, not in module locals.
local harness = ngx.shared.spec_harness

function _M.sh(cmd)
  local ok = os.execute(cmd)
  return ok == true or ok == 0
end

local function track(pid)
  local f = assert(io.open(env.prefix .. "/pids", "a"))
  f:write(pid, "\n")
  f:close()
end

_M.track = track

local function read_file(path)
  local f = io.open(path, "r")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

_M.read_file = read_file

--- Does something accept connections on 127.0.0.1:port? Probed from bash:
--- a refused cosocket connect is an [error] line in nginx's log.
function _M.listening(port)
  return _M.sh("bash -c '(exec 3<>/dev/tcp/127.0.0.1/" .. port .. ") 2>/dev/null'")
end

--- Signal pid (resumed first, in case it is stopped) and wait up to 5 s for it to exit, then KILL.
local function signal_until_gone(pid, sig)
  _M.sh("kill -CONT " .. pid .. " 2>/dev/null; kill -" .. sig .. " " .. pid .. " 2>/dev/null")
  for _ = 1, 100 do
    if not _M.sh("kill -0 " .. pid .. " 2>/dev/null") then return end
    ngx.sleep(0.05)
  end
  _M.sh("kill -KILL " .. pid)
end

-- The times this spec file stopped a process, { from, to } in seconds: a
-- connection the runner had open to it (a wake-up subscription sending its
-- PING as Redis shut down) may read the reset its exit sent (errors.lua).
_M.stops = {}

--- Stop pid with sig (see signal_until_gone), and keep when in _M.stops.
function _M.stop_pid(pid, sig)
  ngx.update_time()
  local stop = { from = ngx.now() }
  signal_until_gone(pid, sig)
  ngx.update_time()
  stop.to = ngx.now()
  _M.stops[#_M.stops + 1] = stop
  return true
end

-- Ports handed out in this run: never twice, so a spec's log lines about a
-- port cannot be mistaken for another spec's that happened to get it again.
local function free_port()
  for _ = 1, 50 do
    local p = io.popen("bash -c '. " .. env.root .. "/nginx/lib.sh; free_port'")
    local port = tonumber(p:read("*l"))
    p:close()
    if port and harness:add("port:" .. port, true) then
      return port
    end
  end
  error("no free port that was not used before in this run")
end

_M.free_port = free_port

return _M
