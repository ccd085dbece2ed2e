-- Generated from src/resty/dlock/redis/replicas.ts by TypeScriptToLua: edit that file, not this one.
-- redis.replicas: one WAIT after the writes of a batch (roundtrip.lua), and
-- what a write is when fewer replicas than asked have it: given back by its
-- caller (fault "replicas"). Replication is asynchronous: a lock on a master
-- that fails over before a replica has it is lost, and a second holder gets in.
local _M = {}
local connection = require("resty.dlock.redis.connection")
local dictcount = require("resty.dlock.core.dictcount")
local lua_tostring = tostring
local lua_type = type
local str_format = string.format
local done = connection.done
--- Dict key counting writes that fewer replicas than asked acknowledged in time.
_M.SHORTFALLS = "c:redis:replica_shortfalls"
--- WAIT for conf.replicas replicas to acknowledge this connection's writes: nil
-- when enough did; else the error (the connection is handed back, or closed).
function _M.waited(red, conf, s)
    connection.readLonger(red, conf, conf.replicas_timeout)
    local n, err = red:wait(conf.replicas, conf.replicas_timeout)
    done(red, conf, n ~= nil)
    if lua_type(n) == "number" and n >= conf.replicas then
        return nil
    end
    if conf.dict ~= nil then
        dictcount.count(conf.dict, _M.SHORTFALLS, 1)
    end
    if lua_type(n) == "number" then
        return str_format(
            "dlock: redis %s: only %d of %d replica(s) acknowledged the %s within %d ms",
            conf.endpoint,
            n,
            conf.replicas,
            s.name,
            conf.replicas_timeout
        )
    end
    return "dlock: redis " .. conf.endpoint .. ": WAIT for replicas after the " .. s.name .. " failed: " .. lua_tostring(err)
end
--- Writes that may not be on enough replicas: their callers give them back.
function _M.unconfirmed(wrote, err)
    for i = 1, #wrote do
        local j = wrote[i]
        j.res = nil
        j.err = err
        j.fault = "replicas"
    end
end
return _M
