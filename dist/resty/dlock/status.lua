-- Generated from src/resty/dlock/status.ts by TypeScriptToLua: edit that file, not this one.
local _M = {}
local version = require("resty.dlock.version")
local json = require("resty.dlock.status.json")
local exposition = require("resty.dlock.status.exposition")
_M._VERSION = version.VERSION
_M.DEFAULT_LIMIT = json.DEFAULT_LIMIT
_M.MAX_LIMIT = json.MAX_LIMIT
_M.report = json.report
_M.serve = json.serve
_M.metrics_text = exposition.metrics_text
_M.metrics = exposition.metrics
return _M
