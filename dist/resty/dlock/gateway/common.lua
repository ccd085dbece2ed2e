-- Generated from src/resty/dlock/gateway/common.ts by TypeScriptToLua: edit that file, not this one.
-- What every guard has, whatever its mode: how it words a failure of Redis,
-- and where it can decide at all. (Its options: options.lua.)
local _M = {}
local check = require("resty.dlock.core.check")
local giveback = require("resty.dlock.gateway.giveback")
local keys = require("resty.dlock.gateway.key")
local stats = require("resty.dlock.gateway.stats")
local lua_tostring = tostring
local get_phase = ngx.get_phase
local ngx_log = ngx.log
local ERR = ngx.ERR
local ngx_header = ngx.header
local ngx_exit = ngx.exit
local math_max = math.max
local math_ceil = math.ceil
local lua_pairs = pairs
local lua_getmetatable = getmetatable
local given_back = giveback.refused
--- The `fleet` of an on_error = "local" guard: how many nginx share `what` (its limit, lock or permits).
function _M.fleet(v, what)
    return check.integer(
        "fleet",
        v,
        1,
        10000,
        "a positive integer with on_error = \"local\" (how many nginx share the " .. what .. ")"
    )
end
--- What a guard's log lines say it does with a request whose key could not be
-- computed: "refused with 503 (on_error = \"deny\")". on_error decides it, but
-- "local" refuses: a key error is the operator's, and no share of a limit applies.
function _M.errorWhat(onError, errorStatus)
    if onError == "local" then
        return "refused with " .. lua_tostring(errorStatus) .. " (on_error = \"local\": a key error is not Redis failing)"
    end
    return onError == "deny" and "refused with " .. lua_tostring(errorStatus) .. " (on_error = \"deny\")" or "let through unguarded (on_error = \"allow\")"
end
--- What a guard's log lines say it does with a request without its key: "refused with 400 (on_missing = \"reject\")".
function _M.missingWhat(onMissing, missingStatus)
    return onMissing == "reject" and "refused with " .. lua_tostring(missingStatus) .. " (on_missing = \"reject\")" or "let through unguarded (on_missing = \"pass\")"
end
--- Phases where a guard can decide: it needs cosockets and ngx.exit. Elsewhere
-- (log, filters, set_by_lua, init) the response is gone or there is no request:
-- nothing to refuse, so access() says so and returns instead of raising.
local DECIDES = check.set("rewrite", "access", "content")
--- Guards that said so, per worker: one line each, not one per request.
local misplaced = {}
--- Whether access() of guard `name` can run now; logs once per guard when it cannot.
function _M.decides(name)
    local phase = get_phase()
    if DECIDES[phase] ~= nil then
        return true
    end
    if misplaced[name] == nil then
        misplaced[name] = true
        ngx_log(
            ERR,
            "dlock: guard ",
            name,
            ": access() called in the ",
            phase,
            " phase, where it can refuse nothing: call it from access_by_lua or rewrite_by_lua"
        )
    end
    return false
end
--- Methods said called without their guard, per worker: one line each.
local misusedCalls = {}
--- Was a guard's method called without its guard (obj not of metatable mt: a
-- "." where ":" was meant)? The config's mistake, said at error level once
-- per worker and method. access() then ends the request with 500 (a guard
-- lets no request through that it did not judge); log() does nothing, and
-- the keeper ends the request's leases when it is gone.
function _M.misused(obj, mt, call)
    if lua_getmetatable(obj) == mt then
        return false
    end
    if misusedCalls[call] == nil then
        misusedCalls[call] = true
        ngx_log(
            ERR,
            "dlock: guard:",
            call,
            "() was called without its guard (with \".\" where \":\" was meant): ",
            "write guards.name:",
            call,
            "()"
        )
    end
    if call == "access" and DECIDES[get_phase()] ~= nil then
        ngx_exit(500)
    end
    return true
end
--- End the request with a guard's refusal because Redis failed (or the breaker
-- is open): Retry-After (whole seconds, at least 1) when the wait is known,
-- and the guard's extra headers.
local function refuseDown(headers, status, retryAfterMs)
    if retryAfterMs ~= nil then
        ngx_header["Retry-After"] = math_max(1, math_ceil(retryAfterMs / 1000))
    end
    if headers ~= nil then
        for k, v in lua_pairs(headers) do
            ngx_header[k] = v
        end
    end
    return ngx_exit(status)
end
--- End the request with a guard's refusal that Redis decided (or that the
-- request's key earned): the guards it passed before give back what they took.
local function refuse(headers, status, retryAfterMs)
    given_back()
    return refuseDown(headers, status, retryAfterMs)
end
--- The request's key by template t, or nil when there is none and the guard
-- has answered for it: a key that cannot be computed follows on_error (never
-- let through by on_missing = "pass"), a missing one on_missing. Counted, and
-- logged once per interval.
function _M.keyOf(g, t)
    local raw, kerr = keys.value(t)
    if raw ~= nil then
        keys.note(g, t, true)
        return raw
    end
    if kerr ~= nil then
        stats.incr(g._dict, g.name, "key_errors")
        keys.failed(g.name, kerr, g._errorWhat)
        if g._onError ~= "allow" then
            refuse(g._headers, g._errorStatus, nil)
        end
        return nil
    end
    stats.incr(g._dict, g.name, "missing_key")
    keys.note(g, t, false)
    if g._onMissing == "reject" then
        refuse(g._headers, g._missingStatus, nil)
    end
    return nil
end
-- Exported by name: this module's own uses of them are locals, not lookups in its exports table.
_M.refuse = refuse
_M.refuseDown = refuseDown
return _M
