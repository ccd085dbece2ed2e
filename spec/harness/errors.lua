-- Error logs. nginx logs at error level what an operator must look at; in
-- normal operation there is none. Every spec file ends with
-- h.check_error_logs(expected), which adds a last test that fails on any
-- [error], [crit], [alert] or [emerg] line written while the file ran (the
-- runner's error log from where it stood when the file began, and the logs
-- of every nginx the file started) that matches none of `expected`: Lua
-- patterns naming the lines a spec causes on purpose (a Redis it kills, a
-- request it breaks). Name them narrowly; { pattern, max = n } allows at most
-- n such lines (a spec that stops Redis once expects one timeout, not a flood).
-- One warning counts as well: a stock nginx (no OpenResty delayed-events
-- patch) warns "this will hurt performance" for every ngx.sleep(0), so neither
-- the library nor an nginx.conf of this project may sleep 0 s.

local nginx = require "harness.nginx"
local process = require "harness.process"

local env = require "testenv"
local started, size = nginx.started, nginx.size

local _M = {}

local SEVERE = { "%[error%]", "%[crit%]", "%[alert%]", "%[emerg%]", "ngx%.sleep%(0%) called without delayed events patch" }

--- Where the error logs stand now: { runner = bytes, started = nginx started so far }.
function _M.error_log_mark()
  return { runner = size(env.prefix .. "/logs/error.log"), started = #started }
end

local function severe(line)
  for _, p in ipairs(SEVERE) do
    if line:find(p) then return true end
  end
  return false
end

-- A process stopped on purpose (process.stop_pid) exits with a connection of the
-- runner's still open to it: a wake-up subscription whose PING reached Redis
-- as it shut down reads the reset its exit sent. That line, in the runner's
-- log, within a second of a stop, is the stop's, not a fault.
local RESET = "recv%(%) failed %(104: Connection reset by peer%),[^\n]* context: ngx%.timer$"

local function reset_of_a_stop(line)
  if not line:find(RESET) then return false end
  local y, mo, d, hh, mi, ss = line:match("^(%d+)/(%d+)/(%d+) (%d+):(%d+):(%d+)")
  if not y then return false end
  -- nginx logs local time, to the second: the line was written in [at, at + 1).
  local at = os.time({ year = y, month = mo, day = d, hour = hh, min = mi, sec = ss })
  for _, stop in ipairs(process.stops) do
    if at + 1 >= stop.from and at <= stop.to + 1 then return true end
  end
  return false
end

-- An entry of `expected`: its pattern and its max (nil: any number).
local function allowance(e)
  if type(e) == "table" then return e[1], e.max end
  return e, nil
end

-- The [error] (and worse) lines since mark that match none of the patterns in
-- `expected`, and how many lines each pattern matched (by its index).
local function scan(mark, expected)
  local files = { { env.prefix .. "/logs/error.log", mark.runner } }
  for i = mark.started + 1, #started do files[#files + 1] = { started[i].log, started[i].from } end
  local out, seen = {}, {}
  for _, f in ipairs(files) do
    local fh = io.open(f[1], "r")
    if fh then
      fh:seek("set", f[2])
      for line in fh:lines() do
        if severe(line) and not (f[1] == files[1][1] and reset_of_a_stop(line)) then
          local known = false
          for i, e in ipairs(expected or {}) do
            local p, max = allowance(e)
            if line:find(p) then
              seen[i] = (seen[i] or 0) + 1
              known = max == nil or seen[i] <= max
              break
            end
          end
          if not known then out[#out + 1] = f[1]:sub(#env.prefix + 2) .. ": " .. line end
        end
      end
      fh:close()
    end
  end
  return out, seen
end

--- The [error] (and worse) lines since mark that match none of the patterns in `expected`.
function _M.unexpected_errors(mark, expected)
  local out = scan(mark, expected)
  return out
end

--- The lines nginx logs when a server asking for a client certificate breaks
--- the connection off (none shown, or one it does not trust), in the handshake
--- or, under TLS 1.3 with a newer OpenSSL (OpenResty's), at the first read or
--- write after it; at most max of each, for h.check_error_logs.
function _M.refused_client_certs(max)
  local out = {}
  for _, alert in ipairs({ "sslv3 alert handshake failure:SSL alert number 40", "tlsv1 alert unknown ca:SSL alert number 48",
                           "tlsv13 alert certificate required:SSL alert number 116" }) do
    out[#out + 1] = { "SSL_[%w_]+%(%) failed %(SSL: error:%x+:SSL routines::" .. alert:gsub("%p", "%%%0") .. "%)", max = max }
  end
  -- Or the reset it sent after its alert, met by the first write after the handshake.
  out[#out + 1] = { "SSL_write%(%) failed %(104: Connection reset by peer%)", max = max }
  return out
end

--- At the end of a spec file (outside its describe blocks): the last test of the file,
--- "logs no unexpected [error] lines" (see above). `expected`: Lua patterns of the lines it causes on purpose.
function _M.check_error_logs(expected)
  local busted = getfenv(2)
  local mark
  busted.setup(function() mark = _M.error_log_mark() end)
  -- Busted names a test after where its function is written (here): the spec file goes into its name.
  local file = debug.getinfo(2, "S").short_src:match("[^/]*$")
  busted.it(file .. " logs no unexpected [error], [crit] or [alert] lines", function()
    local bad, seen_of = scan(mark, expected)
    -- How often each allowance was used, for narrowing them (<prefix>/error-allowances.txt).
    local f = io.open(env.prefix .. "/error-allowances.txt", "a")
    if f then
      for i, e in ipairs(expected or {}) do
        local p, max = allowance(e)
        f:write(file, "\t", seen_of[i] or 0, "\t", tostring(max), "\t", p, "\n")
      end
      f:close()
    end
    -- The distinct messages (without time, pid and connection), each with its count and first line.
    local seen, order = {}, {}
    for _, line in ipairs(bad) do
      local msg = line:gsub("^(%S+: )%d+/%d+/%d+ %d+:%d+:%d+ (%[%a+%]) %d+#%d+: %*?%d* ?", "%1%2 ")
      if not seen[msg] then
        seen[msg] = 0
        order[#order + 1] = msg
      end
      seen[msg] = seen[msg] + 1
    end
    local out = {}
    for i = 1, math.min(#order, 20) do out[i] = seen[order[i]] .. " x " .. order[i] end
    busted.assert.is_true(#bad == 0, #bad .. " unexpected line(s) in the nginx error logs:\n" .. table.concat(out, "\n"))
  end)
end

return _M
