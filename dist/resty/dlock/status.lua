--[[ Generated with https://github.com/TypeScriptToLua/TypeScriptToLua ]]
local ____exports = {}
do
    local ____version = require("resty.dlock.version")
    ____exports._VERSION = ____version.VERSION
end
do
    local ____json = require("resty.dlock.status.json")
    ____exports.DEFAULT_LIMIT = ____json.DEFAULT_LIMIT
    ____exports.MAX_LIMIT = ____json.MAX_LIMIT
    ____exports.report = ____json.report
    ____exports.serve = ____json.serve
end
do
    local ____exposition = require("resty.dlock.status.exposition")
    ____exports.metrics_text = ____exposition.metrics_text
    ____exports.metrics = ____exposition.metrics
end
return ____exports
