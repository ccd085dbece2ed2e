-- Generated from src/resty/dlock/core/schema/hosts.ts by TypeScriptToLua: edit that file, not this one.
-- Hosts and "host:port" nodes as the redis options name them and nginx's
-- connect() takes them: IPv6 in brackets, names told from addresses, ports
-- read in place.
local _M = {}
local check = require("resty.dlock.core.check")
local lua_type = type
local str_find = string.find
local str_byte = string.byte
local str_match = string.match
--- "dlock: <what>, got <v>", or only v's type when v is a secret.
local function refuse(what, v, secret)
    if secret then
        return check.hidden(what, v)
    end
    return check.fail(what, v)
end
--- The port whose digits run from `at` to the end of s: read in place, a substring would be garbage.
local function port(s, at)
    local p = 0
    for i = at, #s do
        p = p * 10 + str_byte(s, i) - 48
        if p > 65535 then
            return nil
        end
    end
    return p >= 1 and p or nil
end
--- A host as nginx's connect() takes it: an IPv6 address in brackets ("[::1]"),
-- which is also how "host:port" names it unambiguously. Hosts come bare from
-- the `host` option, CLUSTER SLOTS, MOVED and the sentinels.
local function literal(host)
    -- Two colons at least: "10.0.0.1:6379" is a host with a port, not an IPv6 address.
    if (str_match(host, "^[%x%.]*:[%x%.]*:[%x:%.]*$")) ~= nil then
        return "[" .. host .. "]"
    end
    return host
end
--- A host as `host` takes it: a name, an IPv4 address, or IPv6 bare or in brackets; not "host:port" nor a URL.
local function hostLike(s)
    if (str_match(s, "^[%w%.%-_]+$")) ~= nil then
        return true
    end
    return (str_match(s, "^%[?[%x%.]*:[%x%.]*:[%x:%.]*%]?$")) ~= nil
end
-- Per host as literal() gives it: whether it is a name (bounded by the hosts of
-- configurations, sentinels' answers and CLUSTER SLOTS).
local names = {}
--- Whether a host (as literal() gives it) is a name nginx must resolve, not an
-- address: what a certificate can be checked against, and what nginx's
-- resolver may keep a connect waiting for.
local function named(host)
    local n = names[host]
    if n == nil then
        n = (str_match(host, "^%[")) == nil and (str_match(host, "^[%d%.]+$")) == nil
        names[host] = n
    end
    return n
end
--- "host:port" or "[v6]:port" (the host keeps its brackets); `label` names the list it came from.
local function node(label, v)
    if lua_type(v) ~= "string" then
        return check.fail(label .. " must be \"host:port\" strings", v)
    end
    -- A URL with credentials ("redis://:secret@host:port") is refused without being shown.
    local what = label .. " must be \"host:port\" strings"
    local secret = (str_find(v, "@", 1, true)) ~= nil
    -- The () captures are positions: numbers, where the port digits start.
    local host, at = str_match(v, "^(%[[%x:%.]+%]):()%d+$")
    if host == nil then
        host, at = str_match(v, "^([%w%.%-_]+):()%d+$")
    end
    if host == nil then
        return refuse(what, v, secret)
    end
    local p = port(v, at)
    if p == nil then
        return refuse(what, v, secret)
    end
    return {host = host, port = p}, nil
end
-- Exported by name: this module's own uses of them are locals, not lookups in its exports table.
_M.hostLike = hostLike
_M.literal = literal
_M.named = named
_M.node = node
_M.refuse = refuse
return _M
