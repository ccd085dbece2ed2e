-- Generated from src/resty/dlock/gateway/idempotency/answers.ts by TypeScriptToLua: edit that file, not this one.
-- What a request the guard does not let through is sent: the stored response
-- (a replay), or an RFC 9457 problem saying why not. Each ends the request.
local _M = {}
local giveback = require("resty.dlock.gateway.giveback")
local stats = require("resty.dlock.gateway.stats")
local breaker = require("resty.dlock.gateway.breaker")
local keys = require("resty.dlock.gateway.key")
local lua_tostring = tostring
local lua_pairs = pairs
local HTTP_OK = ngx.HTTP_OK
local ngx_header = ngx.header
local req_get_method = ngx.req.get_method
local ngx_exit = ngx.exit
local ngx_print = ngx.print
local ngx_send_headers = ngx.send_headers
local ngx = ngx
local str_gsub = string.gsub
local str_lower = string.lower
local str_format = string.format
local str_byte = string.byte
local str_gmatch = string.gmatch
local given_back = giveback.refused
--- Problem types (RFC 9457 `type`), one per refusal.
-- A URN: no page of ours to point at, and clients match the string, not its content.
local TYPE = "urn:resty-dlock:idempotency:"
local function jsonStr(s)
    local q = str_gsub(
        s,
        "[%c\"\\]",
        function(c) return str_format("\\u%04x", str_byte(c)) end
    )
    return "\"" .. q .. "\""
end
--- An RFC 9457 problem details answer, and the end of the request. Unless
-- Redis failed (kind "unavailable"), the guards the request passed before
-- give back what they took (giveback.lua): it never ran.
local function problem(g, status, kind, title, detail, retryAfter)
    if kind ~= "unavailable" then
        given_back()
    end
    ngx.status = status
    ngx_header["Content-Type"] = "application/problem+json"
    if retryAfter ~= nil then
        ngx_header["Retry-After"] = retryAfter
    end
    if g._headers ~= nil then
        for k, v in lua_pairs(g._headers) do
            ngx_header[k] = v
        end
    end
    local body = str_format(
        "{\"type\":%s,\"title\":%s,\"status\":%d,\"detail\":%s}\n",
        jsonStr(TYPE .. kind),
        jsonStr(title),
        status,
        jsonStr(detail)
    )
    ngx_header["Content-Length"] = #body
    ngx_print(body)
    return ngx_exit(HTTP_OK)
end
--- Answer with the stored response.
local function replay(g, rec)
    stats.incr(g._dict, g.name, "replayed")
    ngx.status = rec.status
    -- Header lines "name: value\n", a name repeated for each of its values (Set-Cookie...),
    -- as the backend wrote it (records of earlier releases: in lower case).
    -- One name in two spellings is one header (ngx.header would let the second replace the first).
    local multi = {}
    local spelt = {}
    for n, v in str_gmatch(rec.headers, "([^:\n]+): ([^\n]*)\n") do
        local lower = str_lower(n)
        local list = multi[lower]
        if list == nil then
            list = {}
            multi[lower] = list
            spelt[lower] = n
        end
        list[#list + 1] = v
    end
    for lower, list in lua_pairs(multi) do
        local name = spelt[lower]
        if #list == 1 then
            ngx_header[name] = list[1]
        else
            ngx_header[name] = list
        end
    end
    -- None stored: none sent. Unset, nginx would add its default_type to the replay.
    if multi["content-type"] == nil then
        ngx_header["Content-Type"] = nil
    end
    ngx_header["Idempotent-Replayed"] = "true"
    if rec.status == 204 or rec.status == 304 then
        -- RFC 9110: a 204 has no Content-Length, and a 304's would describe the
        -- representation, not this empty answer; ngx.exit on its own would add "0".
        ngx_send_headers()
        return ngx_exit(HTTP_OK)
    end
    -- A HEAD response's own (stored) Content-Length stands, or none: its body was never sent.
    if multi["content-length"] == nil and req_get_method() ~= "HEAD" then
        ngx_header["Content-Length"] = #rec.body
    end
    ngx_print(rec.body)
    return ngx_exit(HTTP_OK)
end
--- A completed record for this request: replay it, or say why it cannot be.
function _M.answer(g, rec, fp)
    if rec.fp ~= fp then
        stats.incr(g._dict, g.name, "mismatch")
        return problem(
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
    -- Completed, but its response was not kept (larger than max_body): the
    -- operation ran, so it must not run again; tell the client so, for good.
    stats.incr(g._dict, g.name, "replayed")
    ngx_header["Idempotent-Replayed"] = "true"
    return problem(
        g,
        409,
        "not-replayable",
        "Request already processed, its response is not replayable",
        "the first request with this key completed with status " .. lua_tostring(rec.status) .. "; its response was too large to store, so it cannot be replayed"
    )
end
function _M.inFlight(g)
    stats.incr(g._dict, g.name, "conflict")
    return problem(
        g,
        409,
        "in-flight",
        "A request with this Idempotency-Key is being processed",
        "retry after the first request with this key has completed",
        1
    )
end
--- A key (or scope) that cannot be computed: on_error, never a pass as if it were missing.
function _M.keyFailure(g, problemText)
    stats.incr(g._dict, g.name, "key_errors")
    keys.failed(g.name, problemText, g._errorWhat)
    if g._onError == "allow" then
        return
    end
    problem(
        g,
        g._errorStatus,
        "unavailable",
        "Idempotency keys cannot be checked right now",
        "the idempotency key of this request could not be computed; retry later with the same key"
    )
end
function _M.onRedisFailure(g, err)
    if err ~= nil then
        breaker.redisFailed(g, err)
    end
    -- on_error = "allow" runs it without protection against a second execution: counted, logged above.
    if breaker.failedOpen(g) then
        return
    end
    problem(
        g,
        g._errorStatus,
        "unavailable",
        "Idempotency keys cannot be checked right now",
        "the store of idempotency keys is unavailable; retry later with the same key"
    )
end
-- Exported by name: this module's own uses of them are locals, not lookups in its exports table.
_M.problem = problem
return _M
