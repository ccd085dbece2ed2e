-- Generated from src/resty/dlock/redis/setup.ts by TypeScriptToLua: edit that file, not this one.
-- What a fresh connection goes through before its first command, in the one
-- order every Redis accepts: TLS, then AUTH, then SELECT. Servers with a
-- password answer anything else, PING and ROLE included, with NOAUTH, so
-- nothing may be sent ahead of AUTH. Used for data nodes (connection.lua) and for
-- sentinels (sentinel.lua); pooled connections went through it when fresh.
local _M = {}
local check = require("resty.dlock.core.check")
local schema = require("resty.dlock.core.schema")
local clientcert = require("resty.dlock.redis.clientcert")
local hints = require("resty.dlock.redis.hints")
local apply_cert = clientcert.apply
local lua_pcall = pcall
local lua_setmetatable = setmetatable
local lua_tostring = tostring
local ngx_md5 = ngx.md5
local str_sub = string.sub
local named = schema.named
local refusedBy = hints.refusedBy
local unverified = hints.unverified
local plaintext = hints.plaintext
local turnedAway = hints.turnedAway
local secrets = lua_setmetatable({}, {__mode = "k"})
--- Credentials for AUTH, or nil without a password.
function _M.credentials(username, password)
    if password == nil then
        return nil
    end
    local c = {
        username = username,
        digest = str_sub(ngx_md5((username or "") .. "\0" .. password), 1, 16)
    }
    secrets[c] = password
    return c
end
local function shake(sock, serverName, verify)
    return sock:sslhandshake(nil, serverName, verify)
end
--- The name a handshake sends (SNI) and ssl_verify checks: server_name, else
-- the host the server is reached by when that is a name, as lua-resty-http,
-- Redisson and redis-py (check_hostname) check it; a node a sentinel or
-- CLUSTER SLOTS names by name is checked by its own. An address is no name
-- to send, and nginx checks certificates against names only: with an address
-- and no server_name, ssl_verify checks the chain alone.
local function nameOf(s)
    if s.server_name ~= nil then
        return s.server_name
    end
    return named(s.host) and s.host or nil
end
--- TLS on the client's own socket: lua-resty-redis 0.27 has no ssl option, and
-- this way both clients behave the same. Never plaintext: any failure is an
-- error (the caller closes the connection). lua-resty-core 0.1.25's
-- sslhandshake sometimes raises on a verification failure instead of
-- returning an error: hence the pcall. ssl_verify checks the chain against
-- lua_ssl_trusted_certificate and the name (nameOf) against the certificate.
local function tls(sock, s)
    if sock == nil then
        return "dlock: redis " .. s.endpoint .. ": TLS: the Redis client has no socket"
    end
    if s.client_cert ~= nil then
        local cerr = apply_cert(sock, s.client_cert)
        if cerr ~= nil then
            return "dlock: redis " .. s.endpoint .. ": TLS client certificate: " .. cerr
        end
    end
    local name = nameOf(s)
    local ok, session, err = lua_pcall(shake, sock, name, s.ssl_verify)
    if not ok or session == nil then
        -- A raise leaves its message where the session would be.
        local why = session
        if ok then
            why = err
        end
        return "dlock: redis " .. s.endpoint .. ": TLS handshake failed: " .. check.text(why) .. refusedBy(why == "handshake failed", s) .. unverified(why, s, name) .. plaintext(why, s)
    end
    return nil
end
--- The first reply over TLS proves the handshake: the same lua-resty-core has
-- been seen to report success on a failed one. A Redis error reply (false)
-- came through TLS; a socket error (nil) did not.
local function viaTls(s, ok, err)
    if s.ssl and ok == nil then
        return "dlock: redis " .. s.endpoint .. ": TLS handshake failed: " .. lua_tostring(err) .. refusedBy(true, s)
    end
    return nil
end
--- Set up a fresh connection (sock: its cosocket, connection.socket); nil, or what went wrong (the caller closes it).
function _M.run(red, sock, s)
    if s.ssl then
        local terr = tls(sock, s)
        if terr ~= nil then
            return terr
        end
    end
    local c = s.credentials
    if c ~= nil then
        local password = secrets[c]
        -- Two-argument AUTH is the ACL form (Redis >= 6); one argument is requirepass.
        local ok
        local err
        if c.username ~= nil then
            ok, err = red:auth(c.username, password)
        else
            ok, err = red:auth(password)
        end
        if not ok then
            local terr = viaTls(s, ok, err)
            if terr ~= nil then
                return terr
            end
            local away = turnedAway(s.endpoint, err, s.asSentinel == true)
            if away ~= nil then
                return away
            end
            -- The user, never the password: which of several credentials is wrong.
            return "dlock: redis " .. s.endpoint .. ": authentication failed for user " .. (c.username or "default") .. ": " .. lua_tostring(err)
        end
    elseif s.ssl then
        local pong, err = red:ping()
        if pong ~= "PONG" then
            local terr = viaTls(s, pong, err)
            if terr ~= nil then
                return terr
            end
            local away = turnedAway(s.endpoint, err, s.asSentinel == true)
            if away ~= nil then
                return away
            end
            return "dlock: redis " .. s.endpoint .. ": PING after the TLS handshake failed: " .. lua_tostring(err)
        end
    end
    if s.db ~= 0 then
        local ok, err = red:select(s.db)
        if not ok then
            local away = turnedAway(s.endpoint, err, s.asSentinel == true)
            if away ~= nil then
                return away
            end
            return "dlock: redis " .. s.endpoint .. ": SELECT " .. lua_tostring(s.db) .. " failed: " .. lua_tostring(err)
        end
    end
    return nil
end
return _M
