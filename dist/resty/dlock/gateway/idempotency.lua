-- Generated from src/resty/dlock/gateway/idempotency.ts by TypeScriptToLua: edit that file, not this one.
-- Gateway mode "idempotency": the first request with an Idempotency-Key runs,
-- its response is stored in Redis, and every retry with the same key (from any
-- nginx sharing the Redis) gets that response back instead of running the
-- operation again (draft-ietf-httpapi-idempotency-key-header, Stripe semantics).
--
-- One Redis hash per (scope, key), both hashed (see scripts.IDEM_*):
-- - access: read the request body, fingerprint the request, and claim the key
--   in one script: SET NX of a "running" record with our token, or the record
--   that is there (running: 409 or wait; done: replay; other fingerprint: 422);
-- - while the request runs, the gateway's keeper renews the claim like any
--   lease (inflight.lua), also through internal redirects and reloads;
-- - header_filter / body_filter: note the status, headers and body (up to
--   max_body); at the end of the body a timer turns the claim into the stored
--   record, owner-checked (filters have no cosockets). The client may have the
--   response, and retry, before that store lands: so a duplicate that finds the
--   claim running waits for it (wait, at least 1 s, fleet-wide), and on this
--   nginx a mark in the shared dict, set before the last bytes leave, makes it
--   wait for as long as the store may take (up to the lease);
-- - log: a request that ended without its full response (client abort while
--   the upstream works, a cut upstream) keeps its claim until the lease runs
--   out, unrenewed: the backend may still be running it.
--
-- The parts: idempotency/options.lua (the option table, checked once),
-- idempotency/claim.lua (the claim, and duplicates waiting for its response),
-- idempotency/capture.lua (the held claim and its filters),
-- idempotency/record.lua (the store of its response), idempotency/answers.lua
-- (replays and problem+json refusals); this face reads the request and
-- decides among them.
local _M = {}
local check = require("resty.dlock.core.check")
local inflight = require("resty.dlock.gateway.inflight")
local stats = require("resty.dlock.gateway.stats")
local breaker = require("resty.dlock.gateway.breaker")
local token = require("resty.dlock.core.token")
local shared = require("resty.dlock.gateway.common")
local digest = require("resty.dlock.gateway.digest")
local answers = require("resty.dlock.gateway.idempotency.answers")
local capture = require("resty.dlock.gateway.idempotency.capture")
local claims = require("resty.dlock.gateway.idempotency.claim")
local options = require("resty.dlock.gateway.idempotency.options")
local keys = require("resty.dlock.gateway.key")
local lua_tostring = tostring
local ngx_log = ngx.log
local ERR = ngx.ERR
local ngx_var = ngx.var
local sha1_bin = ngx.sha1_bin
local req_get_method = ngx.req.get_method
local req_get_headers = ngx.req.get_headers
--- Whether nginx joins a header's lines in its $http_ variable (1.23.0 on).
local JOINS = ngx.config.nginx_version >= 1023000
local str_sub = string.sub
local str_gsub = string.gsub
local lua_type = type
local lua_tonumber = tonumber
local lua_setmetatable = setmetatable
local io_open = io.open
_M.headerFilter = capture.headerFilter
_M.bodyFilter = capture.bodyFilter
_M.finish = capture.finish
local nreq = ngx.req
--- Longest key accepted, in bytes, after unquoting (Stripe's limit).
local MAX_KEY = 255
local found = check.found
--- The key as sent: an sf-String ("...", \" and \\ escaped) unquoted, or a bare token. nil when invalid.
local function parseKey(raw)
    local k
    if str_sub(raw, 1, 1) == "\"" then
        if #raw < 3 or str_sub(raw, -1) ~= "\"" then
            return nil
        end
        local inner = str_sub(raw, 2, -2)
        -- Printable ASCII only; a quote or backslash only as part of an escape pair.
        if found(inner, "[^ -~]") then
            return nil
        end
        local rest = str_gsub(inner, "\\[\"\\]", "")
        if found(rest, "[\"\\]") then
            return nil
        end
        k = str_gsub(inner, "\\([\"\\])", "%1")
    else
        -- tchar (RFC 9110) plus ":" and "/", as sf-Token allows: a bare UUID too.
        if not found(raw, "^[%w!#%$%%&'%*%+%-%.%^_`|~:/]+$") then
            return nil
        end
        k = raw
    end
    if #k == 0 or #k > MAX_KEY then
        return nil
    end
    return k
end
--- Whether the key's header came in more than one line. nginx 1.23 and later join
-- the lines of a $http_ variable with ", ", which parseKey refuses (the draft's
-- key is one sf-Item); 1.22 gives the first line alone, and would claim a key the
-- client never sent alone: asked of the request's headers there, only then.
local function sentTwice(t)
    local only = t.only
    if JOINS or only == nil or str_sub(only, 1, 5) ~= "http_" then
        return false
    end
    local h = req_get_headers()
    return lua_type(h[str_sub(only, 6)]) == "table"
end
--- The request body (read now), or nil and the reason when it is larger than max.
local function body(max)
    local len = lua_tonumber(ngx_var.content_length)
    if len ~= nil and len > max then
        return nil, "large"
    end
    nreq.read_body()
    local data = nreq.get_body_data()
    if data ~= nil then
        if #data > max then
            return nil, "large"
        end
        return data, nil
    end
    local file = nreq.get_body_file()
    if file == nil then
        return "", nil
    end
    -- Buffered to a file (larger than client_body_buffer_size): read it back, bounded.
    local f = io_open(file, "rb")
    if f == nil then
        return nil, "unreadable"
    end
    local s = f:read(max + 1)
    f:close()
    local text = lua_type(s) == "string" and s or ""
    if #text > max then
        return nil, "large"
    end
    return text, nil
end
--- Method, path with query as sent, and body: two requests that differ in any of them differ here.
local function fingerprint(method, b)
    return token.hex(sha1_bin(method .. "\n" .. (ngx_var.request_uri or "") .. "\n" .. sha1_bin(b)))
end
local function access(g)
    if not shared.decides(g.name) then
        return
    end
    if inflight.holds(g._owner, nil) then
        -- The same request again, after an internal redirect: it holds the claim already.
        return
    end
    local method = req_get_method()
    if g._methods[method] == nil then
        return
    end
    local raw, kerr = keys.value(g._key)
    if raw == nil then
        if kerr ~= nil then
            answers.keyFailure(g, kerr)
            return
        end
        stats.incr(g._dict, g.name, "missing_key")
        keys.note(g, g._key, false)
        if g._onMissing == "reject" then
            answers.problem(
                g,
                400,
                "missing-key",
                "Idempotency-Key missing",
                "this endpoint requires an Idempotency-Key header"
            )
        end
        return
    end
    keys.note(g, g._key, true)
    local k = parseKey(raw)
    if k == nil or sentTwice(g._key) then
        stats.incr(g._dict, g.name, "missing_key")
        answers.problem(
            g,
            400,
            "invalid-key",
            "Idempotency-Key invalid",
            "the key must be a quoted string or a token of 1 to " .. lua_tostring(MAX_KEY) .. " printable ASCII characters"
        )
        return
    end
    local b, berr = body(g._maxRequestBody)
    if b == nil then
        if berr == "large" then
            answers.problem(
                g,
                413,
                "request-too-large",
                "Request body too large for an idempotent request",
                "requests with an Idempotency-Key may have bodies of up to " .. lua_tostring(g._maxRequestBody) .. " bytes"
            )
        end
        ngx_log(ERR, "dlock: guard ", g.name, ": cannot read the request body back from its temp file")
        answers.problem(
            g,
            500,
            "unreadable",
            "Request body unreadable",
            "the request body could not be read"
        )
        return
    end
    local fp = fingerprint(method, b)
    if breaker.skips(g._dict, g.name, g._probeFor) then
        stats.incr(g._dict, g.name, "short_circuited")
        answers.onRedisFailure(g, nil)
        return
    end
    -- Scope and key both client-controlled: hashed, fixed length, never stored in clear.
    local scoped = k
    if g._scope ~= nil then
        local sv, serr = keys.value(g._scope)
        if sv == nil then
            if serr ~= nil then
                answers.keyFailure(g, "scope: " .. serr)
                return
            end
            -- Without it, this client's key would be looked up among every other
            -- scopeless client's: another one's stored response could be replayed to it.
            stats.incr(g._dict, g.name, "missing_key")
            if g._onMissing == "reject" then
                answers.problem(
                    g,
                    400,
                    "missing-scope",
                    "Idempotency-Key without a client identity",
                    "this endpoint keeps idempotency keys per client, and this request does not say which client it is"
                )
            end
            return
        end
        scoped = sha1_bin(sv) .. k
    end
    local rkey = digest.key(g._prefix, scoped)
    local tok, terr = token.random()
    if tok == nil then
        answers.onRedisFailure(g, terr)
        return
    end
    local what, rec, err = claims.claim(g, rkey, tok, fp)
    if what == "record" and rec.state == "running" then
        if rec.fp ~= fp then
            answers.answer(g, rec, fp)
        end
        stats.incr(g._dict, g.name, "waited")
        what, rec, err = claims.waitFor(g, rkey, tok, fp)
        if what == "timeout" then
            stats.incr(g._dict, g.name, "timed_out")
            answers.inFlight(g)
        end
    end
    if what == "claimed" then
        -- Unless it cannot be renewed (no timer for the watchdog): dropped, and on_error decides.
        if capture.hold(g, rkey, tok, fp) then
            return
        end
    end
    if what == "record" then
        answers.answer(g, rec, fp)
    end
    answers.onRedisFailure(g, err)
end
--- The guards' metatable (its __index, the methods, is set once they are).
local guardMt = {}
local guardMethods = {
    access = function(self)
        if shared.misused(self, guardMt, "access") then
            return
        end
        access(self)
    end,
    log = function(self)
        if shared.misused(self, guardMt, "log") then
            return
        end
        inflight.finish(self._owner)
        capture.finish()
    end,
    header_filter = function(self)
        capture.headerFilter()
    end,
    body_filter = function(self)
        capture.bodyFilter()
    end
}
guardMt.__index = guardMethods
--- Validate the options (already checked against gateway.new's names) and build the guard.
function _M.create(o, name)
    local f, err = options.parse(o, name, capture.forget)
    if f == nil then
        return nil, err
    end
    return lua_setmetatable(f, guardMt), nil
end
-- Exported by name: this module's own uses of them are locals, not lookups in its exports table.
_M.parseKey = parseKey
return _M
