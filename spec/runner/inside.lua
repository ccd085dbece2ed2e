-- Runs busted inside the nginx worker, from a timer, so specs get cosockets,
-- ngx.sleep, ngx.thread and shared dicts. Writes "passed failed" to
-- <prefix>/result for spec/runner/run, which owns the processes.
local env = require "testenv"

local _M = {}

local function read_args()
  local args = {}
  for line in io.lines(env.prefix .. "/busted.args") do
    if line ~= "" then args[#args + 1] = line end
  end
  return args
end

local function write_result(passed, failed)
  local f = assert(io.open(env.prefix .. "/result", "w"))
  f:write(passed, " ", failed, "\n")
  f:close()
end

local function run(premature)
  if premature then return end
  -- busted's runner reads its command line from the global `arg` and calls
  -- os.exit at the end; neither suits a worker, so feed the one and stop the other.
  local args = { "--output=" .. env.root .. "/spec/runner/output.lua", "--directory=" .. env.root }
  for _, a in ipairs(read_args()) do args[#args + 1] = a end
  if #read_args() == 0 then args[#args + 1] = "spec" end
  rawset(_G, "arg", args)
  local compat = require "busted.compatibility"
  compat.exit = function() end
  local ok, err = pcall(require("busted.runner"), { standalone = false, output = "plainTerminal" })
  if not ok then
    io.stderr:write("spec runner: busted failed: ", tostring(err), "\n")
  end
  local tally = package.loaded["runner.tally"]
  if not ok or not tally then
    write_result(tally and tally.passed or 0, (tally and tally.failed or 0) + 1)
  else
    write_result(tally.passed, tally.failed)
  end
end

function _M.start()
  if ngx.worker.id() ~= 0 then return end
  local ok, err = ngx.timer.at(0, run)
  if not ok then
    write_result(0, 1)
    ngx.log(ngx.ERR, "spec runner: cannot start timer: ", err)
  end
end

return _M
