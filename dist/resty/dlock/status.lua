--[[ Generated with https://github.com/TypeScriptToLua/TypeScriptToLua ]]
local ____exports = {}
local version = require("resty.dlock.version")
local json = require("resty.dlock.status.json")
local exposition = require("resty.dlock.status.exposition")
____exports._VERSION = version.VERSION
____exports.DEFAULT_LIMIT = json.DEFAULT_LIMIT
____exports.MAX_LIMIT = json.MAX_LIMIT
____exports.report = json.report
____exports.serve = json.serve
____exports.metrics_text = exposition.metrics_text
____exports.metrics = exposition.metrics
return ____exports
