-- Generated from src/resty/dlock/redis/setup.ts by TypeScriptToLua: edit that file, not this one.
local _M = {}
local refusedBy, unverified, plaintext, lua_tostring, lua_type, str_find
local check = require("resty.dlock.core.check")
local schema = require("resty.dlock.core.schema")
local clientcert = require("resty.dlock.redis.clientcert")
function refusedBy(broken, s)
    if not broken then
        return ""
    end
    local versions = "; or no TLS version it takes: lua_ssl_protocols (nginx's log has the server's alert)"
    if s.client_cert == nil then
        return " (the server may want a client certificate, as redis-server does unless tls-auth-clients is no: " .. "redis.ssl_client_cert and redis.ssl_client_priv_key" .. versions .. ")"
    end
    return " (the server may not trust the issuer of redis.ssl_client_cert: its tls-ca-cert-file" .. versions .. ")"
end
function unverified(why, s, name)
    if not s.ssl_verify or lua_type(why) ~= "string" then
        return ""
    end
    if why == "certificate host mismatch" then
        if s.server_name ~= nil then
            return " (ssl_verify: the certificate does not name server_name " .. s.server_name .. ")"
        end
        return " (ssl_verify: the certificate does not name " .. lua_tostring(name) .. ", the host it is reached by: " .. "server_name, when given, is checked instead)"
    end
    if (str_find(why, "^%d+: ")) ~= nil then
        return " (ssl_verify: the chain is checked against nginx's lua_ssl_trusted_certificate, up to lua_ssl_verify_depth)"
    end
    return ""
end
function plaintext(why, s)
    if why ~= "timeout" then
        return ""
    end
    local option = (str_find(s.endpoint, "^sentinel ")) ~= nil and "redis.sentinel.ssl" or "redis.ssl"
    return " (a port in plaintext never answers a TLS handshake: is it a TLS port? " .. option .. ")"
end
local apply_cert = clientcert.apply
local lua_pcall = pcall
local lua_setmetatable = setmetatable
lua_tostring = tostring
lua_type = type
str_find = string.find
local ngx_md5 = ngx.md5
local str_sub = string.sub
local named = schema.named
local secrets = lua_setmetatable({}, {__mode = "k"})
--- Credentials for AUTH, or nil without a password.
function _M.credentials(username, password)
    if password == nil then
        return nil
    end
    local c = {
        username = username,
        digest = str_sub(
            ngx_md5((username or "") .. "\0" .. password),
            1,
            16
        )
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
        local why = session
        if ok then
            why = err
        end
        return "dlock: redis " .. s.endpoint .. ": TLS handshake failed: " .. check.text(why) .. refusedBy(why == "handshake failed", s) .. unverified(why, s, name) .. plaintext(why, s)
    end
    return nil
end
--- What it may mean when a fresh connection in plaintext is reset or closed at
-- its first command: a redis-server's TLS port does that to anything that is
-- not a TLS handshake. "" otherwise.
function _M.tlsPort(err, ssl, option)
    if ssl then
        return ""
    end
    if (str_find(err, "connection reset by peer", 1, true)) == nil and (str_find(err, "closed$")) == nil then
        return ""
    end
    return " (a TLS port resets a connection in plaintext at once: if this is one, " .. option .. " = true)"
end
local MAXCLIENTS = "max number of clients reached"
local PROTECTED = " in protected mode"
--- An error (Redis' or turnedAway's) after which the server has closed the connection.
function _M.closedAfter(err)
    return (str_find(err, MAXCLIENTS, 1, true)) ~= nil or (str_find(err, "DENIED", 1, true)) ~= nil and (str_find(err, PROTECTED, 1, true)) ~= nil
end
--- The refusals a redis-server (or a sentinel) answers a connection's first
-- command with, before it closes the connection: said as what they are, with
-- what to look at (`option`: where the password goes), not as a failed AUTH or
-- eviction check (or a TLS port's reset, which the next command meets). nil
-- for any other error.
--   - at its maxclients, it takes no more connections;
--   - in protected mode (no password for the default user, the default), it
--     takes connections from its loopback interface only.
function _M.awayWhy(err, option)
    local e = lua_tostring(err)
    if (str_find(e, MAXCLIENTS, 1, true)) ~= nil then
        return e .. " (the server is at its maxclients and takes no more connections: each nginx worker keeps up to " .. "redis.pool_size to it)"
    end
    if (str_find(e, "^DENIED Redis is running" .. PROTECTED)) ~= nil then
        return "DENIED: the server is" .. PROTECTED .. " (no password for its default user) and takes connections from its " .. "loopback interface only: give it requirepass (and " .. option .. " here), or set protected-mode no where the " .. "network is private"
    end
    return nil
end
--- awayWhy, as an error naming the endpoint ("sentinel host:port" for a sentinel).
function _M.turnedAway(endpoint, err)
    local why = _M.awayWhy(err, (str_find(endpoint, "^sentinel ")) ~= nil and "redis.sentinel.password" or "redis.password")
    if why == nil then
        return nil
    end
    return "dlock: redis " .. endpoint .. ": " .. why
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
            local away = _M.turnedAway(s.endpoint, err)
            if away ~= nil then
                return away
            end
            return "dlock: redis " .. s.endpoint .. ": authentication failed for user " .. (c.username or "default") .. ": " .. lua_tostring(err)
        end
    elseif s.ssl then
        local pong, err = red:ping()
        if pong ~= "PONG" then
            local terr = viaTls(s, pong, err)
            if terr ~= nil then
                return terr
            end
            local away = _M.turnedAway(s.endpoint, err)
            if away ~= nil then
                return away
            end
            return "dlock: redis " .. s.endpoint .. ": PING after the TLS handshake failed: " .. lua_tostring(err)
        end
    end
    if s.db ~= 0 then
        local ok, err = red:select(s.db)
        if not ok then
            local away = _M.turnedAway(s.endpoint, err)
            if away ~= nil then
                return away
            end
            return "dlock: redis " .. s.endpoint .. ": SELECT " .. lua_tostring(s.db) .. " failed: " .. lua_tostring(err)
        end
    end
    return nil
end
return _M
