-- Generated from src/resty/dlock/core/clock.ts by TypeScriptToLua: edit that file, not this one.
local _M = {}
local ffi = require("ffi")
local ngx_now = ngx.now
local stream = ngx.config.subsystem == "stream"
pcall(ffi.cdef, "double ngx_http_lua_ffi_now(void);")
pcall(ffi.cdef, "double ngx_stream_lua_ffi_now(void);")
local function lookup()
    local C = ffi.C
    return stream and C.ngx_stream_lua_ffi_now or C.ngx_http_lua_ffi_now
end
local found, fn = pcall(lookup)
local ffi_now = found and fn or ngx_now
--- ngx.now(): seconds (with ms) of the event loop's cached time.
function _M.now()
    local t = ffi_now()
    return t
end
return _M
