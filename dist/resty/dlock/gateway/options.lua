-- Generated from src/resty/dlock/gateway/options.ts by TypeScriptToLua: edit that file, not this one.
-- The option table of gateway.new, declared once for every mode (core/schema.lua):
-- which modes each option applies to, its bounds and default. A mode's table
-- is the options that apply to it; the options of the other modes are refused
-- by name ("hold applies to mode dedup only, not mutex").
--
-- A new mode is a line in MODES (its name, the status it refuses with) and
-- `modes: [...]` on the options only it takes (or a `notFor` entry with why
-- on those that apply to every mode but it); the guard built from the checked
-- table is the face's (gateway.lua).
local _M = {}
local check = require("resty.dlock.core.check")
local core = require("resty.dlock.core.options")
local idem = require("resty.dlock.gateway.idempotency.options")
local keys = require("resty.dlock.gateway.key")
local modes = require("resty.dlock.core.schema.modes")
local lua_type = type
local lua_pairs = pairs
local lua_ipairs = ipairs
_M.MODES = {
    {name = "dedup", status = 409},
    {name = "concurrency", status = 429},
    {name = "throttle", status = 429},
    {name = "mutex", status = 503},
    {name = "idempotency", status = 409, apart = true},
    {name = "rate", status = 429, apart = true}
}
--- The modes that guard with a lock or a semaphore (all but idempotency).
local LOCKING = {"dedup", "concurrency", "throttle", "mutex"}
local IDEMPOTENCY = {"idempotency"}
local RATE = {"rate"}
--- Lock modes that can fall back on this nginx's share (on_error = "local").
local SHARED_LOCAL = {"concurrency", "mutex"}
--- Modes that guard with Redis calls per request and a status of their own when refusing.
local DECIDING = {"dedup", "concurrency", "throttle", "mutex", "rate"}
local DAY = 86400000
--- Least `wait` of idempotency, ms: the time a response's store may take to reach Redis after the client has the response.
local MIN_WAIT = 1000
--- Extra refusal headers. A name that is no HTTP token or a value with a control
-- character would reach every refused client as a split or broken response (or be
-- escaped by ngx_lua into something the operator never wrote): refused at new().
local function headers(h)
    if h == nil then
        return nil, nil
    end
    if lua_type(h) ~= "table" then
        return check.fail("headers must be a table of name = value strings", h)
    end
    for k, v in lua_pairs(h) do
        if lua_type(k) ~= "string" or lua_type(v) ~= "string" then
            return check.fail("headers must be a table of name = value strings", k)
        end
        if not check.found(k, "^[!#$%%&'*+%-.^_`|~%w]+$") then
            return check.fail("headers: a header name must be an HTTP token", k)
        end
        if check.found(v, "[^\t%C]") then
            return check.fail("headers: the value of " .. k .. " has a control character", v)
        end
    end
    return h, nil
end
--- A value checked with the others of its kind where they are used together (rate's limits: core/rate.lua parse).
local function given(v)
    return v, nil
end
--- mode mutex's shared: the methods whose requests take the lock shared (readers), as a set.
local function methodsShared(v)
    if v == nil then
        return nil, nil
    end
    if lua_type(v) ~= "table" or #v == 0 or not check.isList(v) then
        return check.fail("shared must be a list of HTTP methods ({ \"GET\", \"HEAD\" })", v)
    end
    local set = {}
    for _, x in lua_ipairs(v) do
        if lua_type(x) ~= "string" or not check.found(x, "^%u+$") then
            return check.fail("shared must be a list of upper-case HTTP methods", x)
        end
        set[x] = true
    end
    return set, nil
end
local function key(v)
    return keys.compile("key", v)
end
local STATUS = "an HTTP status code from 300 to 599 (a refusal must not read as a success)"
_M.SPECS = {
    {name = "mode", kind = "enum", values = {"dedup", "concurrency", "throttle", "mutex", "idempotency", "rate"}, required = true},
    {name = "name", kind = "check", check = core.checkName, doc = "`<mode>#<n>`"},
    {name = "key", kind = "check", check = key, required = true},
    {
        name = "scope",
        kind = "check",
        check = idem.scope,
        required = true,
        modes = IDEMPOTENCY
    },
    {
        name = "methods",
        kind = "check",
        check = idem.methods,
        default = {"POST", "PATCH"},
        modes = IDEMPOTENCY
    },
    {
        name = "on_error",
        kind = "enum",
        values = {"allow", "deny"},
        required = true,
        unit = "\"allow\" (fail open) or \"deny\" (fail closed)",
        modes = {"dedup", "throttle", "idempotency"}
    },
    {
        name = "on_error",
        kind = "enum",
        values = {"allow", "deny", "local"},
        required = true,
        modes = SHARED_LOCAL,
        unit = "\"allow\" (fail open), \"deny\" (fail closed) or \"local\" (this nginx's share of the permits)"
    },
    {
        name = "on_error",
        kind = "enum",
        values = {"allow", "deny", "local"},
        required = true,
        modes = RATE,
        unit = "\"allow\" (fail open), \"deny\" (fail closed) or \"local\" (this nginx's share of the limit)"
    },
    {
        name = "rate",
        kind = "check",
        check = given,
        doc = "required (or `limits`)",
        modes = RATE
    },
    {name = "period", kind = "check", check = given, doc = "1000", modes = RATE},
    {name = "burst", kind = "check", check = given, doc = "`rate`", modes = RATE},
    {name = "limits", kind = "check", check = given, doc = "none", modes = RATE},
    {name = "cost", kind = "check", check = given, doc = "1", modes = RATE},
    {name = "ratelimit_headers", kind = "boolean", default = true, modes = RATE},
    {
        name = "fleet",
        kind = "check",
        check = given,
        doc = "required there",
        modes = {"rate", "concurrency", "mutex"}
    },
    {name = "on_missing", kind = "enum", values = {"pass", "reject"}, default = "pass"},
    {
        name = "shared",
        kind = "check",
        check = methodsShared,
        doc = "none",
        modes = {"mutex"}
    },
    {
        name = "hold",
        kind = "integer",
        min = 0,
        max = core.MAX_TTL,
        unit = "a non-negative integer of ms",
        default = 0,
        modes = {"dedup"}
    },
    {
        name = "renew",
        kind = "boolean",
        default = true,
        modes = LOCKING,
        notFor = {throttle = "its lock is never released"}
    },
    {
        name = "read_body",
        kind = "boolean",
        default = false,
        modes = LOCKING,
        notFor = {throttle = "it holds nothing while the request runs"}
    },
    {
        name = "reject_status",
        kind = "integer",
        min = 300,
        max = 599,
        unit = STATUS,
        doc = "per mode",
        modes = DECIDING
    },
    {
        name = "missing_status",
        kind = "integer",
        min = 300,
        max = 599,
        unit = STATUS,
        default = 400,
        modes = DECIDING
    },
    {
        name = "ttl",
        kind = "integer",
        min = 1000,
        max = 30 * DAY,
        unit = "an integer of ms (at least 1000)",
        default = DAY,
        modes = IDEMPOTENCY
    },
    {
        name = "lease",
        kind = "integer",
        min = 300,
        max = DAY,
        unit = "an integer of ms (at least 300)",
        default = 60000,
        modes = IDEMPOTENCY
    },
    {
        name = "wait",
        kind = "integer",
        min = MIN_WAIT,
        max = DAY,
        default = MIN_WAIT,
        modes = IDEMPOTENCY,
        unit = "an integer of ms of at least " .. tostring(MIN_WAIT) .. " (a retry sent right after the first response must find it stored)"
    },
    {
        name = "max_body",
        kind = "integer",
        min = 0,
        max = 512 * 1048576,
        unit = "a non-negative integer of bytes",
        default = 1048576,
        modes = IDEMPOTENCY
    },
    {
        name = "max_request_body",
        kind = "integer",
        min = 0,
        max = 512 * 1048576,
        unit = "a non-negative integer of bytes",
        default = 1048576,
        modes = IDEMPOTENCY
    },
    {
        name = "store",
        kind = "check",
        check = idem.store,
        doc = "2xx, 3xx, 4xx except 408/409/425/429, and 500",
        modes = IDEMPOTENCY
    },
    {
        name = "store_headers",
        kind = "check",
        check = idem.storeHeaders,
        doc = "none",
        modes = IDEMPOTENCY
    },
    {
        name = "error_status",
        kind = "integer",
        min = 300,
        max = 599,
        unit = STATUS,
        default = 503
    },
    {name = "headers", kind = "check", check = headers, doc = "none"},
    {
        name = "breaker_failures",
        kind = "integer",
        min = 1,
        max = 1000000,
        unit = "a positive integer",
        default = 3
    },
    {
        name = "breaker_cooldown",
        kind = "integer",
        min = 1,
        max = 3600000,
        unit = "a positive integer of ms",
        default = 5000
    },
    modes.only(core.PERMITS, {"concurrency"}),
    {name = "dict", kind = "check", check = check.sharedDict, default = "dlock"},
    core.REDIS,
    {
        name = "prefix",
        kind = "string",
        maxLen = 256,
        empty = true,
        doc = "`dlock:gw:<name>:`",
        modes = DECIDING
    },
    {
        name = "prefix",
        kind = "string",
        maxLen = 256,
        doc = "`dlock:gw:<name>:`",
        modes = IDEMPOTENCY
    },
    modes.only(core.TTL, LOCKING),
    modes.only(core.WAIT, {"concurrency", "mutex"})
}
_M.validate = modes.modes("gateway.new options", "mode", _M.MODES, _M.SPECS)
--- The mode named `name` (valid after validate).
function _M.mode(name)
    local found = _M.MODES[1]
    for i = 1, #_M.MODES do
        if _M.MODES[i].name == name then
            found = _M.MODES[i]
        end
    end
    return found
end
return _M
