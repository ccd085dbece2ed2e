--[[ Generated with https://github.com/TypeScriptToLua/TypeScriptToLua ]]
local ____exports = {}
--- Append the head of a command of n words.
function ____exports.command(parts, n)
    local i = #parts
    parts[i + 1] = "*"
    parts[i + 2] = n
    parts[i + 3] = "\r\n"
end
--- Append one word of a command.
function ____exports.arg(parts, w)
    local s = tostring(w)
    local i = #parts
    parts[i + 1] = "$"
    parts[i + 2] = #s
    parts[i + 3] = "\r\n"
    parts[i + 4] = s
    parts[i + 5] = "\r\n"
end
local concat = table.concat
local sub = string.sub
--- One command, encoded.
function ____exports.encode(words)
    local parts = {}
    ____exports.command(parts, #words)
    for ____, w in ipairs(words) do
        ____exports.arg(parts, w)
    end
    return concat(parts)
end
--- One reply from sock, as lua-resty-redis returns it: the value (ngx.null for
-- a nil bulk or array), or false and the message of an error reply; nil and
-- the socket's error when the connection failed.
function ____exports.read(sock)
    local line, err = sock:receive("*l")
    if line == nil then
        return nil, err
    end
    local kind = sub(line, 1, 1)
    local rest = sub(line, 2)
    if kind == "+" then
        return rest, nil
    end
    if kind == "-" then
        return false, rest
    end
    if kind == ":" then
        return tonumber(rest), nil
    end
    if kind == "$" then
        local n = tonumber(rest) or -1
        if n < 0 then
            return ngx.null, nil
        end
        local data, derr = sock:receive(n + 2)
        if data == nil then
            return nil, derr
        end
        return sub(data, 1, n), nil
    end
    if kind == "*" then
        local n = tonumber(rest) or -1
        if n < 0 then
            return ngx.null, nil
        end
        local out = {}
        for i = 1, n do
            local v, verr = ____exports.read(sock)
            if v == nil then
                return nil, verr
            end
            out[i] = v == false and ({false, verr}) or v
        end
        return out, nil
    end
    return nil, "bad reply: " .. line
end
return ____exports
