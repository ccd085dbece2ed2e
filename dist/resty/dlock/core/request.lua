-- Generated from src/resty/dlock/core/request.ts by TypeScriptToLua: edit that file, not this one.
-- Which request is running, and is a request seen earlier still alive?
--
-- The gateway must find a request's leases again in its log phase and must
-- notice a request that ended without running its log(). ngx.ctx cannot do
-- either: an internal redirect (error_page, try_files, X-Accel-Redirect,
-- ngx.exec) starts the request over with a fresh ngx.ctx, and the final
-- location may have no log_by_lua at all.
--
-- What does survive is (a) the ngx_http_request_t itself: its address stays
-- the same through internal redirects, and no two live requests of a worker
-- share it; and (b) the ngx.ctx table of the access phase: ngx_lua keeps it in
-- the registry (lua-resty-core's `ngx_lua_ctx_tables`, slot `ref`) until the
-- request's pool is freed at the very end of the request, redirects or not.
-- So "slot `ref` still holds that table" means "that request is still alive"
-- (a slot is reused only after the request that had it is gone, and then it
-- holds another table). An address alone is not enough: a later request can
-- get the address of one that is gone.
local _M = {}
local ffi = require("ffi")
local base = require("resty.core.base")
local ngx = ngx
local get_request = base.get_request
local ffi_cast = ffi.cast
local lua_tonumber = tonumber
local lua_pcall = pcall
-- A ctype object, not the string: the interpreter parses a declaration string on every cast.
local uintptr_t = ffi.typeof("uintptr_t")
-- lua-resty-core declares both already; the pcalls make us independent of the order.
pcall(ffi.cdef, "int ngx_http_lua_ffi_get_ctx_ref(ngx_http_request_t *r, int *in_ssl_phase, int *ssl_ctx_ref);")
-- ngx.is_subrequest, without the getter of ngx's metatable.
pcall(ffi.cdef, "int ngx_http_lua_ffi_is_subrequest(ngx_http_request_t *r);")
local function lookup(name)
    return ffi.C[name]
end
--- ngx_lua's C function `name`, or nil when this nginx has none (looking a missing symbol up raises).
local function cfunction(name)
    local ok, f = lua_pcall(lookup, name)
    if not ok then
        return nil
    end
    return f
end
local getCtxRef = cfunction("ngx_http_lua_ffi_get_ctx_ref")
local inSsl = ffi.new("int[1]", 1)
local sslRef = ffi.new("int[1]", 1)
local isSubrequest = cfunction("ngx_http_lua_ffi_is_subrequest")
-- A request's connection is its second field in every nginx (after a uint32_t signature).
local fields = ffi.typeof("void **")
-- Set once by lua-resty-core when it loads (before any init_by_lua code).
local registered = debug.getregistry().ngx_lua_ctx_tables
local ctxTables = type(registered) == "table" and registered or nil
local lua_rawget = rawget
local kept = lua_rawget(coroutine, "_status")
local std_status = kept or coroutine.status
--- Has co, a timer's or a light thread's coroutine, returned (or raised)? Safe whatever made it.
function _M.finished(co)
    return std_status(co) == "dead"
end
--- False when this nginx cannot tell whether a request is over (then only log() ends leases).
local canWatch = getCtxRef ~= nil and ctxTables ~= nil
--- The current request's id (its address), or nil outside a request.
function _M.id()
    local r = get_request()
    if r == nil then
        return nil
    end
    local id = lua_tonumber(ffi_cast(uintptr_t, r))
    return id
end
--- The current request's id, its ngx.ctx and where the registry keeps that
-- (-1: unknown): an anchor's fields, for a record that is its own anchor. nil outside a request.
local function here()
    local r = get_request()
    if r == nil then
        return nil, nil, -1
    end
    -- Reading ngx.ctx creates the table and registers it, so its slot exists afterwards.
    local ctx = ngx.ctx
    local ref = -1
    if canWatch then
        local n = getCtxRef(r, inSsl, sslRef)
        if n >= 0 and ctxTables[n] == ctx then
            ref = n
        end
    end
    return lua_tonumber(ffi_cast(uintptr_t, r)), ctx, ref
end
--- The current request, anchored so that alive() can tell when it is over.
function _M.anchor()
    local rid, ctx, ref = here()
    if rid == nil then
        return nil
    end
    return {id = rid, ctx = ctx, ref = ref}
end
--- The address of request r's connection.
local function connectionOf(r)
    local c = lua_tonumber(ffi_cast(uintptr_t, ffi_cast(fields, r)[1]))
    return c
end
--- When the current request is a subrequest: its main request, as the address
-- of their connection (nginx gives a subrequest its main request's; each
-- HTTP/2 or HTTP/3 stream has one of its own). nil for a main request.
function _M.mainOf()
    local r = get_request()
    if r == nil or isSubrequest == nil or isSubrequest(r) ~= 1 then
        return nil
    end
    return connectionOf(r)
end
--- The address of the current request's connection (its subrequests' too); nil outside a request.
function _M.connection()
    local r = get_request()
    if r == nil then
        return nil
    end
    return connectionOf(r)
end
--- Is the request still running (up to and including its log phase)? True when it cannot be told.
function _M.alive(a)
    if a.ref < 0 then
        return true
    end
    return ctxTables[a.ref] == a.ctx
end
-- Exported by name: this module's own uses of them are locals, not lookups in its exports table.
_M.canWatch = canWatch
_M.here = here
return _M
