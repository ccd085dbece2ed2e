-- Generated from src/resty/dlock/redis/resp.ts by TypeScriptToLua: edit that file, not this one.
-- The Redis protocol (RESP2), for what lua-resty-redis does not expose: a
-- pipeline whose replies are read one at a time, so that a connection that
-- breaks after the third reply leaves the first three calls answered and only
-- the rest "outcome unknown" (commit_pipeline reads all or nothing).
local _M = {}
local lua_tonumber = tonumber
local lua_tostring = tostring
local ngx_null = ngx.null
local concat = table.concat
local sub = string.sub
--- Append the head of a command of n words.
local function command(parts, n)
    local i = #parts
    parts[i + 1] = "*"
    parts[i + 2] = n
    parts[i + 3] = "\r\n"
end
--- Append one word of a command.
local function arg(parts, w)
    local s = lua_tostring(w)
    local i = #parts
    parts[i + 1] = "$"
    parts[i + 2] = #s
    parts[i + 3] = "\r\n"
    parts[i + 4] = s
    parts[i + 5] = "\r\n"
end
--- One command, encoded.
function _M.encode(words)
    local parts = {}
    command(parts, #words)
    for i = 1, #words do
        arg(parts, words[i])
    end
    return concat(parts)
end
function _M.reader(sock)
    return {sock = sock, buf = "", pos = 1}
end
--- Nothing is left unread (a connection fit to go back to the pool).
function _M.drained(r)
    return r.pos > #r.buf
end
local byte = string.byte
local find = string.find
local CHUNK = 65536
--- The reply at pos of buf: value, error message (of an error reply), and the
-- position after it; no position when buf ends before the reply does.
local function parse(buf, pos)
    local eol = find(buf, "\r\n", pos, true)
    if eol == nil then
        return nil, nil, nil
    end
    local kind = byte(buf, pos)
    local line = sub(buf, pos + 1, eol - 1)
    local after = eol + 2
    if kind == 43 then
        return line, nil, after
    end
    if kind == 45 then
        return false, line, after
    end
    if kind == 58 then
        return lua_tonumber(line), nil, after
    end
    if kind == 36 then
        local n = lua_tonumber(line) or -1
        if n < 0 then
            return ngx_null, nil, after
        end
        if #buf < after + n + 1 then
            return nil, nil, nil
        end
        return sub(buf, after, after + n - 1), nil, after + n + 2
    end
    if kind == 42 then
        local n = lua_tonumber(line) or -1
        if n < 0 then
            return ngx_null, nil, after
        end
        local out = {}
        local p = after
        for i = 1, n do
            local v, verr, next = parse(buf, p)
            if next == nil then
                return nil, nil, nil
            end
            -- An error inside an array (a script's table reply) stays a value, as lua-resty-redis keeps it.
            out[i] = v == false and ({false, verr}) or v
            p = next
        end
        return out, nil, p
    end
    return nil, "bad reply: " .. line, -1
end
--- The next reply, once buf holds no whole reply: read chunks until it does.
local function readMore(r)
    while true do
        local data, rerr = r.sock:receiveany(CHUNK)
        if data == nil then
            return nil, rerr
        end
        r.buf = r.pos > #r.buf and data or sub(r.buf, r.pos) .. data
        r.pos = 1
        local v, err, next = parse(r.buf, r.pos)
        if next ~= nil then
            if next < 0 then
                return nil, err
            end
            r.pos = next
            return v, err
        end
    end
end
--- The next reply, as lua-resty-redis returns one: the value (ngx.null for a
-- nil bulk or array), or false and the message of an error reply; nil and
-- the socket's error when the connection failed. A reply already read comes
-- without a loop: the sender's loop over a batch's replies stays one trace.
function _M.read(r)
    local v, err, next = parse(r.buf, r.pos)
    if next == nil then
        return readMore(r)
    end
    if next < 0 then
        return nil, err
    end
    r.pos = next
    return v, err
end
return _M
