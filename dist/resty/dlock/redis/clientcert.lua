-- Generated from src/resty/dlock/redis/clientcert.ts by TypeScriptToLua: edit that file, not this one.
-- A client certificate for TLS to Redis. A redis-server with TLS asks every
-- client for one unless told otherwise (`tls-auth-clients yes` is its
-- default), and so do sentinels and cluster nodes set up the same way.
--
-- Read, parsed and checked against its key once, when the factory is made:
-- init_by_lua runs as the master's user, so a key file only root may read
-- works, as nginx's own ssl_certificate_key does, and a key that belongs to
-- another certificate is refused there rather than at every handshake. Each
-- fresh connection hands both to its handshake (setup.lua). The parsed key
-- stays in this module: no table a caller can reach holds it.
local _M = {}
local ffi = require("ffi")
local io_open = io.open
local lua_pcall = pcall
local lua_require = require
local lua_setmetatable = setmetatable
local lua_tostring = tostring
local lua_type = type
local ngx_md5 = ngx.md5
local str_find = string.find
local str_sub = string.sub
local parsed = lua_setmetatable({}, {__mode = "k"})
--- The PEM text an option gives: the value itself when it is PEM, else the file it names; or why not.
local function pem(name, v)
    if (str_find(v, "-----BEGIN ", 1, true)) ~= nil then
        return v, nil
    end
    local f, err = io_open(v, "rb")
    if f == nil then
        local hint = ""
        if (str_find(lua_tostring(err), "Permission denied", 1, true)) ~= nil then
            hint = " (it is read when the factory is made: make it in init_by_lua, which runs as the master's user, " .. "or let the workers' user read the file)"
        end
        return nil, "dlock: redis." .. name .. ": cannot read " .. lua_tostring(err) .. hint
    end
    local text = f:read("*a")
    f:close()
    return lua_type(text) == "string" and text or "", nil
end
--- Where a value came from, for messages: its path, never the PEM text (a key's is a secret).
local function origin(v)
    return (str_find(v, "-----BEGIN ", 1, true)) ~= nil and "the PEM text given" or v
end
-- nginx links OpenSSL, so its functions are in the process (Debian's nginx and OpenResty both).
lua_pcall(ffi.cdef, "void *OPENSSL_sk_value(const void *st, int i); int X509_check_private_key(const void *x, const void *k);")
local function lookupOpenSsl()
    local c = ffi.C
    -- Indexing ffi.C raises for a symbol the process lacks: look both up here.
    return {OPENSSL_sk_value = c.OPENSSL_sk_value, X509_check_private_key = c.X509_check_private_key}
end
local hasOpenSsl, openssl = lua_pcall(lookupOpenSsl)
--- Does key belong to the first certificate of chain? True when it cannot be told.
local function belongs(chain, key)
    if not hasOpenSsl then
        return true
    end
    local o = openssl
    return o.X509_check_private_key(o.OPENSSL_sk_value(chain, 0), key) == 1
end
--- The client certificate of redis.ssl_client_cert and redis.ssl_client_priv_key
-- (each a PEM file's path or PEM text), or why it cannot be used.
function _M.load(cert, key)
    local ok, mod = lua_pcall(lua_require, "ngx.ssl")
    if not ok or lua_type(mod) ~= "table" then
        return nil, "dlock: redis.ssl_client_cert needs lua-resty-core's ngx.ssl: " .. lua_tostring(mod)
    end
    local ssl = mod
    local certPem, cerr = pem("ssl_client_cert", cert)
    if certPem == nil then
        return nil, cerr
    end
    local keyPem, kerr = pem("ssl_client_priv_key", key)
    if keyPem == nil then
        return nil, kerr
    end
    local chain, perr = ssl.parse_pem_cert(certPem)
    if chain == nil then
        return nil, "dlock: redis.ssl_client_cert: no PEM certificate in " .. origin(cert) .. " (" .. lua_tostring(perr) .. ")"
    end
    local pkey, pkerr = ssl.parse_pem_priv_key(keyPem)
    if pkey == nil then
        return nil, "dlock: redis.ssl_client_priv_key: no unencrypted PEM private key in " .. origin(key) .. " (" .. lua_tostring(pkerr) .. ")"
    end
    if not belongs(chain, pkey) then
        return nil, "dlock: redis.ssl_client_priv_key: the key in " .. origin(key) .. " does not belong to the certificate in " .. origin(cert)
    end
    local c = {digest = str_sub(ngx_md5(certPem), 1, 16)}
    parsed[c] = {chain = chain, key = pkey}
    return c, nil
end
--- Hand c's certificate and key to sock's coming handshake; nil, or why not.
function _M.apply(sock, c)
    local p = parsed[c]
    if sock.setclientcert == nil then
        return "this nginx's lua module has no tcpsock:setclientcert (it needs lua-nginx-module 0.10.23 and lua-resty-core 0.1.25 or newer)"
    end
    local ok, err = sock:setclientcert(p.chain, p.key)
    if ok == nil then
        return lua_tostring(err)
    end
    return nil
end
return _M
