-- Generated from src/resty/dlock/version.ts by TypeScriptToLua: edit that file, not this one.
local _M = {}
-- The one place the release number lives: every public module re-exports it as
-- _VERSION, and spec/packaging_spec.lua holds package.json, the rockspec,
-- dist.ini and CHANGELOG.md to it.
_M.VERSION = "0.1.0"
return _M
