-- Generated from src/resty/dlock/gateway/vars.ts by TypeScriptToLua: edit that file, not this one.
local _M = {}
local ffi = require("ffi")
local base = require("resty.core.base")
local ngx_var = ngx.var
local get_request = base.get_request
local ffi_string = ffi.string
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
            local rc = var_get(
                r,
                name,
                n,
                lower,
                0,
                valuePtr,
                valueLen,
                errPtr
            )
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
