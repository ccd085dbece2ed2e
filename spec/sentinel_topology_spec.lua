-- The core behaviours of spec/topology/suite.lua through Sentinel (a master, a
-- replica, three sentinels), as on standalone, Cluster and Redlock; failovers
-- and the sentinels' own behaviour are in spec/sentinel_spec.lua.
local h = require "helpers"
local suite = require "topology.suite"

describe("redis.sentinel", function()
  local t = suite.topology("sentinel")
  setup(t.start)
  teardown(t.stop)
  suite.run(t)
end)

h.check_error_logs()
