--[[ Generated with https://github.com/TypeScriptToLua/TypeScriptToLua ]]
local ____exports = {}
local function hex(s)
    return string.format(
        string.rep("%02x", #s),
        string.byte(s, 1, #s)
    )
end
local function script(name, src)
    return {
        name = name,
        src = src,
        sha = hex(ngx.sha1_bin(src))
    }
end
--- KEYS[1] lock key, ARGV[1] token, ARGV[2] ttl ms.
-- Returns "OK" when acquired, else the holder's PTTL (-1: the key has no TTL).
-- A key of another type is an error, not "busy": someone else's data sits there.
____exports.ACQUIRE = script("acquire", "\nif redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then\n  return 'OK'\nend\nlocal t = redis.call('TYPE', KEYS[1]).ok\nif t ~= 'string' then\n  return redis.error_reply('WRONGTYPE lock key ' .. KEYS[1] .. ' holds a ' .. t .. ', not a lock')\nend\nreturn redis.call('PTTL', KEYS[1])\n")
--- KEYS[1] lock key, ARGV[1] token. 1 when deleted, 0 when the key is not ours.
____exports.RELEASE = script("release", "\nif redis.call('GET', KEYS[1]) == ARGV[1] then\n  return redis.call('DEL', KEYS[1])\nend\nreturn 0\n")
--- KEYS[1] lock key, ARGV[1] token, ARGV[2] ttl ms. 1 when extended, 0 when not ours.
____exports.EXTEND = script("extend", "\nif redis.call('GET', KEYS[1]) == ARGV[1] then\n  return redis.call('PEXPIRE', KEYS[1], ARGV[2])\nend\nreturn 0\n")
--- Run a single-key script; replies and errors exactly as lua-resty-redis returns them.
function ____exports.run(red, s, key, ...)
    local res, err = red:evalsha(s.sha, 1, key, ...)
    if res == false and err ~= nil and string.sub(err, 1, 8) == "NOSCRIPT" then
        return red:eval(s.src, 1, key, ...)
    end
    return res, err
end
return ____exports
