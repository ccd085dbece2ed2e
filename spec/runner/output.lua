-- busted output: gtest-style lines for humans, and a tally for the runner.
return function(options)
  local busted = require "busted"
  local handler = require("busted.outputHandlers.gtest")(options)
  local tally = { passed = 0, failed = 0 }
  package.loaded["runner.tally"] = tally
  busted.subscribe({ "suite", "end" }, function()
    tally.passed = handler.successesCount
    tally.failed = handler.failuresCount + handler.errorsCount
    return nil, true
  end)
  return handler
end
