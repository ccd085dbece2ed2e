--[[ Generated with https://github.com/TypeScriptToLua/TypeScriptToLua ]]
local ____exports = {}
local check = require("resty.dlock.core.check")
local stats = require("resty.dlock.gateway.stats")
local keys = require("resty.dlock.gateway.key")
--- Problem types (RFC 9457 `type`), one per refusal.
local TYPE = "urn:resty-dlock:idempotency:"
local function jsonStr(s)
    local q = string.gsub(
        s,
        "[%c\"\\]",
        function(c) return string.format(
            "\\u%04x",
            string.byte(c)
        ) end
    )
    return ("\"" .. q) .. "\""
end
--- An RFC 9457 problem details answer, and the end of the request.
function ____exports.problem(g, status, kind, title, detail, retryAfter)
    ngx.status = status
    ngx.header["Content-Type"] = "application/problem+json"
    if retryAfter ~= nil then
        ngx.header["Retry-After"] = retryAfter
    end
    if g.headers ~= nil then
        for k, v in pairs(g.headers) do
            ngx.header[k] = v
        end
    end
    local body = string.format(
        "{\"type\":%s,\"title\":%s,\"status\":%d,\"detail\":%s}\n",
        jsonStr(TYPE .. kind),
        jsonStr(title),
        status,
        jsonStr(detail)
    )
    ngx.header["Content-Length"] = #body
    ngx.print(body)
    return ngx.exit(ngx.HTTP_OK)
end
--- Answer with the stored response.
local function replay(g, rec)
    stats.incr(g.dict, g.name, "replayed")
    ngx.status = rec.status
    local multi = {}
    for n, v in string.gmatch(rec.headers, "([^:\n]+): ([^\n]*)\n") do
        local name = n
        local list = multi[name]
        if list == nil then
            list = {}
            multi[name] = list
        end
        list[#list + 1] = v
    end
    for name, list in pairs(multi) do
        if #list == 1 then
            ngx.header[name] = list[1]
        else
            ngx.header[name] = list
        end
    end
    ngx.header["Idempotent-Replayed"] = "true"
    if rec.status == 204 or rec.status == 304 then
        ngx.send_headers()
        return ngx.exit(ngx.HTTP_OK)
    end
    ngx.header["Content-Length"] = #rec.body
    ngx.print(rec.body)
    return ngx.exit(ngx.HTTP_OK)
end
--- A completed record for this request: replay it, or say why it cannot be.
function ____exports.answer(g, rec, fp)
    if rec.fp ~= fp then
        stats.incr(g.dict, g.name, "mismatch")
        return ____exports.problem(
            g,
            422,
            "mismatch",
            "Idempotency-Key reused with another request",
            "this key was first used with another method, path, query or body"
        )
    end
    if rec.state == "done" then
        return replay(g, rec)
    end
    stats.incr(g.dict, g.name, "replayed")
    ngx.header["Idempotent-Replayed"] = "true"
    return ____exports.problem(
        g,
        409,
        "not-replayable",
        "Request already processed, its response is not replayable",
        ("the first request with this key completed with status " .. tostring(rec.status)) .. "; its response was too large to store, so it cannot be replayed"
    )
end
function ____exports.inFlight(g)
    stats.incr(g.dict, g.name, "conflict")
    return ____exports.problem(
        g,
        409,
        "in-flight",
        "A request with this Idempotency-Key is being processed",
        "retry after the first request with this key has completed",
        1
    )
end
--- A key (or scope) that cannot be computed: on_error, never a pass as if it were missing.
function ____exports.keyFailure(g, problemText)
    stats.incr(g.dict, g.name, "key_errors")
    keys.failed(g.name, problemText, g.errorWhat)
    if g.onError == "allow" then
        return
    end
    ____exports.problem(
        g,
        g.errorStatus,
        "unavailable",
        "Idempotency keys cannot be checked right now",
        "the idempotency key of this request could not be computed; retry later with the same key"
    )
end
function ____exports.onRedisFailure(g, err)
    if err ~= nil then
        stats.incr(g.dict, g.name, "redis_errors")
        stats.failure(g.dict, g.name, g.breakerFailures, g.breakerCooldown)
        ngx.log(
            ngx.ERR,
            "dlock: guard ",
            g.name,
            ": ",
            check.reason(err)
        )
    end
    if g.onError == "allow" then
        stats.incr(g.dict, g.name, "failed_open")
        return
    end
    stats.incr(g.dict, g.name, "failed_closed")
    ____exports.problem(
        g,
        g.errorStatus,
        "unavailable",
        "Idempotency keys cannot be checked right now",
        "the store of idempotency keys is unavailable; retry later with the same key"
    )
end
return ____exports
