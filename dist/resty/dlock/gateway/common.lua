--[[ Generated with https://github.com/TypeScriptToLua/TypeScriptToLua ]]
local ____exports = {}
local check = require("resty.dlock.core.check")
--- o[name], or dflt when it is nil.
function ____exports.opt(o, name, dflt)
    local v = o[name]
    local ____temp_0
    if v == nil then
        ____temp_0 = dflt
    else
        ____temp_0 = v
    end
    return ____temp_0
end
--- error_status, headers, breaker_failures and breaker_cooldown, with their defaults.
function ____exports.parse(o)
    local errorStatus, e1 = check.integer(
        "error_status",
        ____exports.opt(o, "error_status", 503),
        200,
        599,
        "an HTTP status code"
    )
    if errorStatus == nil then
        return nil, e1
    end
    local headers
    local h = o.headers
    if h ~= nil then
        if type(h) ~= "table" then
            return check.fail("headers must be a table of name = value strings", h)
        end
        for k, v in pairs(h) do
            if type(k) ~= "string" or type(v) ~= "string" then
                return check.fail("headers must be a table of name = value strings", k)
            end
        end
        headers = h
    end
    local breakerFailures, e2 = check.integer(
        "breaker_failures",
        ____exports.opt(o, "breaker_failures", 3),
        1,
        1000000,
        "a positive integer"
    )
    if breakerFailures == nil then
        return nil, e2
    end
    local breakerCooldown, e3 = check.integer(
        "breaker_cooldown",
        ____exports.opt(o, "breaker_cooldown", 5000),
        1,
        3600000,
        "a positive integer of ms"
    )
    if breakerCooldown == nil then
        return nil, e3
    end
    return {errorStatus = errorStatus, headers = headers, breakerFailures = breakerFailures, breakerCooldown = breakerCooldown}, nil
end
--- Phases where a guard can decide: it needs cosockets and ngx.exit. Elsewhere
-- (log, filters, set_by_lua, init) the response is gone or there is no request:
-- nothing to refuse, so access() says so and returns instead of raising.
local DECIDES = check.set("rewrite", "access", "content")
--- Guards that said so, per worker: one line each, not one per request.
local misplaced = {}
--- Whether access() of guard `name` can run now; logs once per guard when it cannot.
function ____exports.decides(name)
    local phase = ngx.get_phase()
    if DECIDES[phase] ~= nil then
        return true
    end
    if not (misplaced[name] ~= nil) then
        misplaced[name] = true
        ngx.log(
            ngx.ERR,
            "dlock: guard ",
            name,
            ": access() called in the ",
            phase,
            " phase, where it can refuse nothing: call it from access_by_lua or rewrite_by_lua"
        )
    end
    return false
end
return ____exports
