--[[ Generated with https://github.com/TypeScriptToLua/TypeScriptToLua ]]
local ____exports = {}
local backend = require("resty.dlock.redis.backend")
local check = require("resty.dlock.core.check")
local ledger = require("resty.dlock.core.ledger")
local meter = require("resty.dlock.core.meter")
local scripts = require("resty.dlock.redis.scripts")
local shared = require("resty.dlock.gateway.common")
local keys = require("resty.dlock.gateway.key")
--- Options no other mode takes.
____exports.ONLY = {
    "scope",
    "methods",
    "lease",
    "max_body",
    "max_request_body",
    "store",
    "store_headers"
}
local OPTIONS = check.set(
    "name",
    "mode",
    "key",
    "scope",
    "methods",
    "on_missing",
    "ttl",
    "lease",
    "wait",
    "max_body",
    "max_request_body",
    "store",
    "store_headers",
    "on_error",
    "error_status",
    "headers",
    "breaker_failures",
    "breaker_cooldown",
    "dict",
    "redis",
    "prefix"
)
local DAY = 86400000
--- Least `wait`, ms: the time a response's store may take to reach Redis after the client has the response.
local MIN_WAIT = 1000
--- Not part of a stored response: hop-by-hop headers, and those nginx sets anew on a replay.
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
    "idempotent-replayed"
}
--- Not stored unless store_headers lists them: one client's session must not reach another.
local PRIVATE = {"set-cookie"}
local opt = shared.opt
local found = check.found
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
local function parseStoreOpt(v)
    if v == nil then
        return defaultStore(), nil
    end
    local what = "store must be a list of statuses (200..599) and classes (\"2xx\"..\"5xx\")"
    if type(v) ~= "table" then
        return check.fail(what, v)
    end
    local s = {}
    for i, x in pairs(v) do
        if type(i) ~= "number" then
            return check.fail(what, i)
        end
        if type(x) == "number" then
            local n, err = check.integer(
                "store",
                x,
                200,
                599,
                "a status from 200 to 599"
            )
            if n == nil then
                return nil, err
            end
            s[n] = true
        else
            local d = string.match(
                tostring(x),
                "^([2-5])xx$"
            )
            if type(x) ~= "string" or d == nil then
                return check.fail(what, x)
            end
            local base = tonumber(d) * 100
            for j = base, base + 99 do
                s[j] = true
            end
        end
    end
    return s, nil
end
--- The headers not stored: SKIP, and PRIVATE ones store_headers does not list.
local function parseStoreHeaders(v)
    local skip = {}
    for ____, n in ipairs(SKIP) do
        skip[n] = true
    end
    for ____, n in ipairs(PRIVATE) do
        skip[n] = true
    end
    if v == nil then
        return skip, nil
    end
    local what = "store_headers must be a list of headers not stored by default (\"Set-Cookie\")"
    if type(v) ~= "table" then
        return check.fail(what, v)
    end
    for i, x in pairs(v) do
        if type(i) ~= "number" or type(x) ~= "string" then
            return check.fail(what, x)
        end
        local n = string.lower(x)
        local known = false
        for ____, pn in ipairs(PRIVATE) do
            if pn == n then
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
    acquire = scripts.IDEM_CLAIM,
    release = scripts.IDEM_RELEASE,
    extend = scripts.IDEM_EXTEND,
    shared = true,
    fenced = false,
    drop = nil
}
--- Validate the options (already checked against gateway.new's names) into a
-- guard's fields. unlogged: what the keeper calls for a request of the guard
-- that ended without log() (inflight.Owner).
function ____exports.parse(o, name, unlogged)
    for k, v in pairs(o) do
        if not (OPTIONS[k] ~= nil) then
            return check.fail(k .. " does not apply to mode idempotency", v)
        end
    end
    local key, kerr = keys.compile("key", o.key)
    if key == nil then
        return nil, kerr
    end
    local scope
    local sc = o.scope
    if sc == nil then
        return check.fail("scope is required for mode idempotency: what tells clients apart (\"$http_authorization\", " .. "\"$cookie_session\", a function), or scope = false to share every key among all clients", sc)
    end
    if sc ~= false then
        local s, serr = keys.compile("scope", sc)
        if s == nil then
            return nil, serr
        end
        scope = s
    end
    local methods = {}
    local m = opt(o, "methods", {"POST", "PATCH"})
    if type(m) ~= "table" or #m == 0 then
        return check.fail("methods must be a list of HTTP methods ({ \"POST\", \"PATCH\" })", m)
    end
    for ____, x in ipairs(m) do
        if type(x) ~= "string" or not found(x, "^%u+$") then
            return check.fail("methods must be a list of upper-case HTTP methods", x)
        end
        methods[x] = true
    end
    local onError = o.on_error
    if onError ~= "allow" and onError ~= "deny" then
        return check.fail("on_error must be \"allow\" (fail open) or \"deny\" (fail closed)", onError)
    end
    local onMissing = opt(o, "on_missing", "pass")
    if onMissing ~= "pass" and onMissing ~= "reject" then
        return check.fail("on_missing must be \"pass\" or \"reject\"", onMissing)
    end
    local ttl, e1 = check.integer(
        "ttl",
        opt(o, "ttl", DAY),
        1000,
        30 * DAY,
        "an integer of ms (at least 1000)"
    )
    if ttl == nil then
        return nil, e1
    end
    local leaseMs, e2 = check.integer(
        "lease",
        opt(o, "lease", 60000),
        300,
        DAY,
        "an integer of ms (at least 300)"
    )
    if leaseMs == nil then
        return nil, e2
    end
    local wait, e3 = check.integer(
        "wait",
        opt(o, "wait", MIN_WAIT),
        MIN_WAIT,
        DAY,
        ("an integer of ms of at least " .. tostring(MIN_WAIT)) .. " (a retry sent right after the first response must find it stored)"
    )
    if wait == nil then
        return nil, e3
    end
    local maxBody, e4 = check.integer(
        "max_body",
        opt(o, "max_body", 1048576),
        0,
        512 * 1048576,
        "a non-negative integer of bytes"
    )
    if maxBody == nil then
        return nil, e4
    end
    local maxReq, e5 = check.integer(
        "max_request_body",
        opt(o, "max_request_body", 1048576),
        0,
        512 * 1048576,
        "a non-negative integer of bytes"
    )
    if maxReq == nil then
        return nil, e5
    end
    local storeSet, e6 = parseStoreOpt(o.store)
    if storeSet == nil then
        return nil, e6
    end
    local skip, e7 = parseStoreHeaders(o.store_headers)
    if skip == nil then
        return nil, e7
    end
    local common, ce = shared.parse(o)
    if common == nil then
        return nil, ce
    end
    local dict, derr = check.sharedDict(opt(o, "dict", "dlock"))
    if dict == nil then
        return nil, derr
    end
    local conf, rerr = backend.parse(o.redis, dict)
    if conf == nil then
        return nil, rerr
    end
    local refused = backend.refuses(conf, "idempotency")
    if refused ~= nil then
        return nil, refused
    end
    local prefix, perr = check.str(
        "prefix",
        opt(o, "prefix", ("dlock:gw:" .. name) .. ":"),
        256
    )
    if prefix == nil then
        return nil, perr
    end
    ledger.prepare(dict)
    local owner = {
        name = name,
        dict = dict,
        ttl = leaseMs,
        renew = true,
        release = false,
        hold = 0,
        unlogged = unlogged
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
        dict = dict,
        key = key,
        scope = scope,
        methods = methods,
        onMissing = onMissing,
        onError = onError,
        ttl = ttl,
        lease = leaseMs,
        wait = wait,
        maxBody = maxBody,
        maxRequestBody = maxReq,
        store = storeSet,
        skip = skip,
        missingWhat = onMissing == "reject" and "refused with 400 (on_missing = \"reject\")" or "let through unguarded (on_missing = \"pass\")",
        errorWhat = onError == "deny" and ("refused with " .. tostring(common.errorStatus)) .. " (on_error = \"deny\")" or "let through unguarded (on_error = \"allow\")",
        errorStatus = common.errorStatus,
        headers = common.headers,
        breakerFailures = common.breakerFailures,
        breakerCooldown = common.breakerCooldown,
        conf = conf,
        prefix = prefix,
        owner = owner,
        kind = KIND,
        leaseStore = leaseStore
    }
    return f, nil
end
return ____exports
