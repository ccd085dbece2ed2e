-- Generated from src/resty/dlock/redis/master.ts by TypeScriptToLua: edit that file, not this one.
-- A master the sentinels named, as a server of its own: how a fresh connection
-- to it is set up (its messages name it, "sentinel <name>: master host:port",
-- and its hints the master's options, not the sentinels'), its configuration
-- for the eviction check, and ROLE on it (a just-demoted master must not take
-- locks). connection.lua calls these on a fresh connection behind Sentinel.
local _M = {}
local derived = require("resty.dlock.redis.derived")
local hints = require("resty.dlock.redis.hints")
local sentinel = require("resty.dlock.redis.sentinel")
local lua_tostring = tostring
local lua_type = type
local ngx_log = ngx.log
local NOTICE = ngx.NOTICE
local str_match = string.match
local sentinel_forget = sentinel.forget
--- Per Sentinel pool and master address: how a fresh connection to it is set up, its messages naming it.
local masterSetups = {}
--- The setup of a connection to the master host:port the sentinels of conf named: "sentinel <name>: master host:port".
local function setupOf(conf, host, port)
    local name = conf.pool .. "@" .. host .. ":" .. lua_tostring(port)
    local s = masterSetups[name]
    if s == nil then
        s = {
            endpoint = conf.endpoint .. ": master " .. host .. ":" .. lua_tostring(port),
            host = host,
            ssl = conf.ssl,
            ssl_verify = conf.ssl_verify,
            server_name = conf.server_name,
            client_cert = conf.client_cert,
            credentials = conf.credentials,
            db = conf.db,
            announced = hints.BY_SENTINELS
        }
        masterSetups[name] = s
    end
    return s
end
--- Per Sentinel pool and master address: that master as a server of its own (for the eviction check).
local sentinelMasters = {}
local function confOf(conf, host, port)
    local name = conf.pool .. "@" .. host .. ":" .. lua_tostring(port)
    local m = sentinelMasters[name]
    if m == nil then
        m = derived.node(conf, host, port)
        sentinelMasters[name] = m
    end
    return m
end
--- Masters ("<credentials digest>@host:port") whose user may not run ROLE: an
-- ACL without `@admin` or `@dangerous` (a lock user's usual rights), or ROLE
-- renamed away. Asked once, whichever pool (the locks', the wake-ups') asks.
local roleRefused = {}
--- An error reply that every later ROLE on that server would get too.
local function refusedForGood(err)
    local code = str_match(lua_tostring(err), "^(%u+)")
    return code == "NOPERM" or (str_match(lua_tostring(err), "^ERR unknown command")) ~= nil
end
--- ROLE on a fresh connection to the master Sentinel named: a just-demoted one
-- must not take locks. A server that refuses ROLE to this user is taken on the
-- sentinels' word: a demoted master is a read-only replica, which refuses
-- every lock write with READONLY, and that has the sentinels asked again.
local function isMaster(red, conf, host, port)
    local who = (conf.credentials ~= nil and conf.credentials.digest or "") .. "@" .. host .. ":" .. lua_tostring(port)
    if roleRefused[who] ~= nil then
        return nil
    end
    local role, err = red:role()
    if lua_type(role) == "table" and role[1] == "master" then
        return nil
    end
    if role == false and refusedForGood(err) then
        -- Said once: another connection's ROLE may have been refused while this one's was on its way.
        if roleRefused[who] ~= nil then
            return nil
        end
        roleRefused[who] = true
        ngx_log(
            NOTICE,
            "dlock: redis ",
            conf.endpoint,
            ": ROLE on ",
            host,
            ":",
            port,
            " refused (",
            err,
            "): taking the sentinels' word that it is the master (a demoted one refuses lock writes: READONLY)"
        )
        return nil
    end
    sentinel_forget(conf.pool)
    local away = hints.turnedAway(setupOf(conf, host, port).endpoint, err)
    if away ~= nil then
        return away
    end
    if lua_type(role) ~= "table" then
        return "dlock: redis " .. conf.endpoint .. ": ROLE on " .. host .. ":" .. lua_tostring(port) .. " failed: " .. lua_tostring(err) .. "; asking the sentinels again"
    end
    return "dlock: redis " .. conf.endpoint .. ": " .. host .. ":" .. lua_tostring(port) .. " is a " .. lua_tostring(role[1]) .. ", not the master (a failover is under way); asking the sentinels again"
end
-- Exported by name: this module's own uses of them are locals, not lookups in its exports table.
_M.confOf = confOf
_M.isMaster = isMaster
_M.setupOf = setupOf
return _M
