--[[ Generated with https://github.com/TypeScriptToLua/TypeScriptToLua ]]
local _M = {}
_M.VERSION = "0.1.0"
return _M
