-- Generated from src/resty/dlock/gateway/idempotency/options.ts by TypeScriptToLua: edit that file, not this one.
-- Mode idempotency at gateway.new: the checks of its own options (declared
-- with every other mode's in ../options.lua), and the guard's fields made of
-- the checked table. Nothing here runs per request.
local _M = {}
local backend = require("resty.dlock.redis.backend")
local check = require("resty.dlock.core.check")
local common = require("resty.dlock.gateway.common")
local ledger = require("resty.dlock.core.ledger")
local meter = require("resty.dlock.core.meter")
local records = require("resty.dlock.redis.records")
local stats = require("resty.dlock.gateway.stats")
local breaker = require("resty.dlock.gateway.breaker")
local keys = require("resty.dlock.gateway.key")
local lua_type = type
local lua_pairs = pairs
local lua_tostring = tostring
local lua_tonumber = tonumber
local str_match = string.match
local str_lower = string.lower
local found = check.found
--- Not part of a stored response: hop-by-hop headers, those nginx sets anew on
-- a replay, and the RateLimit fields: they tell the quota at the time they
-- were sent (a rate guard sets the replay's own).
local SKIP = {
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "proxy-authenticate",
    "content-length",
    "date",
    "server",
    "idempotent-replayed",
    "ratelimit",
    "ratelimit-policy"
}
--- Not stored unless store_headers lists them: one client's session must not reach another.
local PRIVATE = {"set-cookie"}
--- Stored by default: what the application decided (2xx, 3xx, 4xx, and 500 as
-- Stripe does), not what says "not done, try again" (408, 409, 425, 429) nor
-- gateway errors (502, 503, 504: the operation may or may not have run).
local function defaultStore()
    local s = {}
    for i = 200, 499 do
        s[i] = true
    end
    s[408] = nil
    s[409] = nil
    s[425] = nil
    s[429] = nil
    s[500] = true
    return s
end
--- The `store` option: statuses and classes, as a table of statuses.
function _M.store(v)
    if v == nil then
        return defaultStore(), nil
    end
    local what = "store must be a list of statuses (200..599) and classes (\"2xx\"..\"5xx\")"
    if lua_type(v) ~= "table" then
        return check.fail(what, v)
    end
    -- An empty list would store nothing: every retry would run again, not what anyone means by it.
    if #v == 0 or not check.isList(v) then
        return check.fail(what, v)
    end
    local s = {}
    for i, x in lua_pairs(v) do
        if lua_type(i) ~= "number" then
            return check.fail(what, i)
        end
        if lua_type(x) == "number" then
            local n, err = check.integer("store", x, 200, 599, "a status from 200 to 599")
            if n == nil then
                return nil, err
            end
            s[n] = true
        else
            local d = str_match(lua_tostring(x), "^([2-5])xx$")
            if lua_type(x) ~= "string" or d == nil then
                return check.fail(what, x)
            end
            local base = lua_tonumber(d) * 100
            for j = base, base + 99 do
                s[j] = true
            end
        end
    end
    return s, nil
end
--- The headers not stored: SKIP, and PRIVATE ones store_headers does not list.
function _M.storeHeaders(v)
    local skip = {}
    for i = 1, #SKIP do
        skip[SKIP[i]] = true
    end
    for i = 1, #PRIVATE do
        skip[PRIVATE[i]] = true
    end
    if v == nil then
        return skip, nil
    end
    local what = "store_headers must be a list of headers not stored by default (\"Set-Cookie\")"
    if lua_type(v) ~= "table" then
        return check.fail(what, v)
    end
    for i, x in lua_pairs(v) do
        if lua_type(i) ~= "number" or lua_type(x) ~= "string" then
            return check.fail(what, x)
        end
        local n = str_lower(x)
        local known = false
        for j = 1, #PRIVATE do
            if PRIVATE[j] == n then
                known = true
            end
        end
        if not known then
            return check.fail(what .. "; other headers are stored anyway, and hop-by-hop ones never", x)
        end
        skip[n] = nil
    end
    return skip, nil
end
local KIND = {
    acquire = records.IDEM_CLAIM,
    release = records.IDEM_RELEASE,
    extend = records.IDEM_EXTEND,
    shared = true,
    fenced = false,
    drop = nil
}
--- The `scope` option: required, since without one a client's stored response
-- (its cookies, its data) is replayed to any other that sends the same key;
-- false shares every key among all clients (nil in the guard).
function _M.scope(v)
    if v == nil then
        return check.fail("scope is required for mode idempotency: what tells clients apart (\"$http_authorization\", " .. "\"$cookie_session\", a function), or scope = false to share every key among all clients", v)
    end
    if v == false then
        return nil, nil
    end
    return keys.compile("scope", v)
end
--- The `methods` option: a list of methods, as a set.
function _M.methods(m)
    if lua_type(m) ~= "table" or #m == 0 or not check.isList(m) then
        return check.fail("methods must be a list of HTTP methods ({ \"POST\", \"PATCH\" })", m)
    end
    local set = {}
    local list = m
    for i = 1, #list do
        local x = list[i]
        if lua_type(x) ~= "string" or not found(x, "^%u+$") then
            return check.fail("methods must be a list of upper-case HTTP methods", x)
        end
        set[x] = true
    end
    return set, nil
end
--- The guard's fields, of options checked by ../options.lua. unlogged: what the
-- keeper calls for a request of the guard that ended without log() (inflight.Owner).
function _M.parse(o, name, unlogged)
    local conf = o.redis
    local refused = backend.refuses(conf, "idempotency")
    if refused ~= nil then
        return nil, refused
    end
    local dict = o.dict
    local prefix = o.prefix or "dlock:gw:" .. name .. ":"
    ledger.prepare(dict)
    stats.prepare(dict, name)
    local leaseMs = o.lease
    local owner = {
        name = name,
        _dict = dict,
        _ttl = leaseMs,
        _renew = true,
        _release = false,
        _hold = 0,
        _unlogged = unlogged
    }
    local leaseStore = {
        dict = dict,
        redis = conf,
        prefix = prefix,
        ttl = leaseMs,
        wait = 0,
        meter = meter.make(dict, name)
    }
    local f = {
        name = name,
        mode = "idempotency",
        _dict = dict,
        _key = o.key,
        _scope = o.scope,
        _methods = o.methods,
        _onMissing = o.on_missing,
        _onError = o.on_error,
        _ttl = o.ttl,
        _lease = leaseMs,
        _wait = o.wait,
        _maxBody = o.max_body,
        _maxRequestBody = o.max_request_body,
        _store = o.store,
        _skip = o.store_headers,
        _missingWhat = common.missingWhat(o.on_missing, 400),
        _errorWhat = common.errorWhat(o.on_error, o.error_status),
        _errorStatus = o.error_status,
        _headers = o.headers,
        _breakerFailures = o.breaker_failures,
        _breakerCooldown = o.breaker_cooldown,
        _probeFor = breaker.probeWindow(conf),
        _conf = conf,
        _prefix = prefix,
        _owner = owner,
        _kind = KIND,
        _leaseStore = leaseStore
    }
    return f, nil
end
return _M
