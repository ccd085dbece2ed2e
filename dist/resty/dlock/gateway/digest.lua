-- Generated from src/resty/dlock/gateway/digest.ts by TypeScriptToLua: edit that file, not this one.
-- The Redis key of a client-controlled request key: the prefix, then the hex
-- SHA-1 of the key, so any size and any bytes map to a bounded key. Built in
-- C buffers: the digest, its hex after the prefix, one Lua string in all.
-- Hashed in Lua it took three (the digest, its hex, the joined key), and
-- interning each new string cost the worker more than hashing the key
-- (bench/README.md, where an uncontended lock's time goes).
local _M = {}
local token = require("resty.dlock.core.token")
local ffi = require("ffi")
-- lua-resty-core declares it already; the pcall makes us independent of the order.
pcall(ffi.cdef, "int ngx_http_lua_ffi_sha1_bin(const unsigned char *src, size_t len, unsigned char *dst);")
local sha1_bin = ngx.sha1_bin
local hex = token.hex
local ffi_C = ffi.C
local ffi_string = ffi.string
local ffi_copy = ffi.copy
local lua_pcall = pcall
--- Longest prefix built in the buffer; a longer one is joined in Lua.
local PREFIX_MAX = 512
local SHA1_HEX = 40
local out = ffi.new("uint8_t[?]", PREFIX_MAX + SHA1_HEX)
local digest = ffi.new("uint8_t[?]", 20)
local function lookup()
    return ffi_C.ngx_http_lua_ffi_sha1_bin ~= nil and ffi_C.ngx_hex_dump ~= nil
end
local found, both = lua_pcall(lookup)
local inC = found and both == true
--- The prefix `out` starts with now: guards hash one after another, each copies its own once.
local copied
--- prefix .. the lower-case hex SHA-1 of raw, as one new string.
function _M.key(prefix, raw)
    local n = #prefix
    if inC and n <= PREFIX_MAX and ffi_C.ngx_http_lua_ffi_sha1_bin(raw, #raw, digest) == 1 then
        if copied ~= prefix then
            ffi_copy(out, prefix, n)
            copied = prefix
        end
        ffi_C.ngx_hex_dump(out + n, digest, 20)
        return ffi_string(out, n + SHA1_HEX)
    end
    return prefix .. hex(sha1_bin(raw))
end
return _M
