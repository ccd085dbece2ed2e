-- Generated from src/resty/dlock/version.ts by TypeScriptToLua: edit that file, not this one.
local _M = {}
_M.VERSION = "0.1.0"
return _M
