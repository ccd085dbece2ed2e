-- The core behaviours of spec/topology/suite.lua on a standalone redis-server
-- (the runner's own), as on Sentinel, Cluster and Redlock.
local h = require "helpers"
local suite = require "topology.suite"

describe("redis standalone", function()
  local t = suite.topology("standalone")
  setup(t.start)
  teardown(t.stop)
  suite.run(t)
end)

h.check_error_logs()
