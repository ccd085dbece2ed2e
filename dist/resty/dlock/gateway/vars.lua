-- Generated from src/resty/dlock/gateway/vars.ts by TypeScriptToLua: edit that file, not this one.
-- nginx variables of the current request, read with the FFI call ngx.var's
-- getter makes (lua-resty-core's var.lua), from a function of our own.
--
-- Why not ngx.var: an operator's handler that reads ngx.var from its
-- content_by_lua chunk makes LuaJIT blacklist the getter (a trace that starts
-- in it cannot return into the chunk's frame: "NYI: return to lower frame",
-- then "blacklisted"), and from then on every trace that calls it aborts,
-- a guard's whole access and log path included. jit.v under `wrk -c50` on the
-- bench's nginx: the rate, dedup and mutex guards' traces "blacklisted at
-- var.lua:68". Same answers as ngx.var; where the call is not there (another
-- subsystem, a name longer than the buffer, an error) ngx.var answers.
local _M = {}
local ffi = require("ffi")
local base = require("resty.core.base")
local ngx_var = ngx.var
local get_request = base.get_request
local ffi_string = ffi.string
-- lua-resty-core declares it already; the pcall makes us independent of the order.
pcall(ffi.cdef, "int ngx_http_lua_ffi_var_get(ngx_http_request_t *r, const char *name_data, size_t name_len, " .. "char *lowcase_buf, int capture_id, char **value, size_t *value_len, char **err);")
local function lookup()
    return ffi.C.ngx_http_lua_ffi_var_get
end
local found, fn = pcall(lookup)
local var_get = found and ngx.config.subsystem == "http" and fn or nil
--- Longest variable name read here (lower-cased into `lower`); longer ones go through ngx.var.
local NAME_MAX = 256
local lower = ffi.new("char[?]", NAME_MAX)
local valuePtr = ffi.new("char *[?]", 1)
local valueLen = ffi.new("size_t[?]", 1)
local errPtr = ffi.new("char *[?]", 1)
local OK = 0
local DECLINED = -5
--- ngx.var[name] of the current request: its value, or nil when the variable is not set.
function _M.get(name)
    local n = #name
    if var_get ~= nil and n <= NAME_MAX then
        local r = get_request()
        if r ~= nil then
            local rc = var_get(r, name, n, lower, 0, valuePtr, valueLen, errPtr)
            if rc == OK then
                return ffi_string(valuePtr[0], valueLen[0])
            end
            if rc == DECLINED then
                return nil
            end
        end
    end
    return ngx_var[name]
end
return _M
