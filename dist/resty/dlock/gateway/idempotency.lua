--[[ Generated with https://github.com/TypeScriptToLua/TypeScriptToLua ]]
local ____exports = {}
local notify, unrecord, schedule, store, watches, FINISHED, AMBIGUOUS
local backend = require("resty.dlock.backend")
local check = require("resty.dlock.check")
local inflight = require("resty.dlock.inflight")
local ledger = require("resty.dlock.ledger")
local meter = require("resty.dlock.meter")
local orphans = require("resty.dlock.orphans")
local redis = require("resty.dlock.redis")
local request = require("resty.dlock.request")
local scripts = require("resty.dlock.scripts")
local stats = require("resty.dlock.stats")
local token = require("resty.dlock.token")
local shared = require("resty.dlock.gateway.common")
local keys = require("resty.dlock.gateway.key")
function notify(rkey, rec)
    local w = watches[rkey]
    if w == nil or w.waiters == 0 then
        return
    end
    if rec ~= nil then
        w.rec = rec
    end
    w.sem:post(w.waiters)
end
function unrecord(g, l)
    local expires = ledger.forget(g.dict, l.rec, l.token)
    if expires ~= nil then
        meter.forgotten(g.leaseStore.meter, expires)
    end
end
function schedule(c)
    c.complete = true
    local ok, err = ngx.timer.at(0, store, c)
    if not ok then
        c.g.dict:delete(FINISHED .. c.lease.rkey)
        stats.incr(c.g.dict, c.g.name, "not_stored")
        ngx.log(
            ngx.ERR,
            "dlock: guard ",
            c.g.name,
            ": cannot store the response (the key stays claimed until its lease ",
            "runs out): ",
            err
        )
    end
end
function store(premature, c)
    local g = c.g
    local l = c.lease
    local status = c.status
    if g.store[status] ~= true then
        stats.incr(g.dict, g.name, "not_stored")
        g.dict:delete(FINISHED .. l.rkey)
        if AMBIGUOUS[tostring(status)] ~= nil then
            return
        end
        local res, err = backend.call(g.conf, scripts.IDEM_RELEASE, l.rkey, l.token)
        if res == nil then
            ngx.log(
                ngx.WARN,
                "dlock: guard ",
                g.name,
                ": dropping a claim: ",
                check.reason(err),
                " (it runs out after the lease)"
            )
        end
        unrecord(g, l)
        notify(l.rkey, nil)
        return
    end
    local state = c.tooLarge and "unreplayable" or "done"
    local b = c.tooLarge and "" or table.concat(c.chunks)
    ngx.update_time()
    local deadline = ngx.now() + g.lease / 1000
    local pause = 0.05
    while true do
        local res, err = backend.call(
            g.conf,
            scripts.IDEM_COMPLETE,
            l.rkey,
            l.token,
            g.ttl,
            state,
            status,
            c.headers,
            b
        )
        if res == 1 then
            g.dict:delete(FINISHED .. l.rkey)
            stats.incr(g.dict, g.name, c.tooLarge and "not_stored" or "stored")
            unrecord(g, l)
            notify(l.rkey, {
                state = state,
                fp = c.fp,
                status = status,
                headers = c.headers,
                body = b
            })
            return
        end
        if res ~= nil then
            g.dict:delete(FINISHED .. l.rkey)
            stats.incr(g.dict, g.name, "not_stored")
            stats.incr(g.dict, g.name, "lost")
            ngx.log(
                ngx.ERR,
                "dlock: guard ",
                g.name,
                ": the claim on ",
                l.rkey,
                " ran out before its response could be stored"
            )
            return
        end
        stats.incr(g.dict, g.name, "redis_errors")
        ngx.update_time()
        if ngx.now() + pause >= deadline then
            g.dict:delete(FINISHED .. l.rkey)
            stats.incr(g.dict, g.name, "not_stored")
            ngx.log(
                ngx.ERR,
                "dlock: guard ",
                g.name,
                ": response not stored, the claim runs out: ",
                check.reason(err)
            )
            return
        end
        ngx.sleep(pause)
        pause = math.min(pause * 2, 1)
    end
end
local semaphore = require("ngx.semaphore")
local nreq = ngx.req
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
--- Longest key accepted, in bytes, after unquoting (Stripe's limit).
local MAX_KEY = 255
--- Problem types (RFC 9457 `type`), one per refusal.
local TYPE = "urn:resty-dlock:idempotency:"
--- Requests of this worker that hold a claim, by request id (the same through internal redirects).
local captures = {}
local function current()
    local rid = request.id()
    if rid == nil then
        return nil
    end
    local c = captures[rid]
    if c == nil then
        return nil
    end
    if not request.alive(c.anchor) then
        captures[rid] = nil
        return nil
    end
    return c
end
watches = {}
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
local function problem(g, status, kind, title, detail, retryAfter)
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
local function answer(g, rec, fp)
    if rec.fp ~= fp then
        stats.incr(g.dict, g.name, "mismatch")
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
    stats.incr(g.dict, g.name, "replayed")
    ngx.header["Idempotent-Replayed"] = "true"
    return problem(
        g,
        409,
        "not-replayable",
        "Request already processed, its response is not replayable",
        ("the first request with this key completed with status " .. tostring(rec.status)) .. "; its response was too large to store, so it cannot be replayed"
    )
end
local function inFlight(g)
    stats.incr(g.dict, g.name, "conflict")
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
local function keyFailure(g, problemText)
    stats.incr(g.dict, g.name, "key_errors")
    keys.failed(g.name, problemText, g.errorWhat)
    if g.onError == "allow" then
        return
    end
    problem(
        g,
        g.errorStatus,
        "unavailable",
        "Idempotency keys cannot be checked right now",
        "the idempotency key of this request could not be computed; retry later with the same key"
    )
end
local function onRedisFailure(g, err)
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
    problem(
        g,
        g.errorStatus,
        "unavailable",
        "Idempotency keys cannot be checked right now",
        "the store of idempotency keys is unavailable; retry later with the same key"
    )
end
local function found(s, pattern)
    local at = string.find(s, pattern)
    return at ~= nil
end
--- The key as sent: an sf-String ("...", \" and \\ escaped) unquoted, or a bare token. nil when invalid.
function ____exports.parseKey(raw)
    local k
    if string.sub(raw, 1, 1) == "\"" then
        if #raw < 3 or string.sub(raw, -1) ~= "\"" then
            return nil
        end
        local inner = string.sub(raw, 2, -2)
        if found(inner, "[^ -~]") then
            return nil
        end
        local rest = string.gsub(inner, "\\[\"\\]", "")
        if found(rest, "[\"\\]") then
            return nil
        end
        k = string.gsub(inner, "\\([\"\\])", "%1")
    else
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
--- The request body (read now), or nil and the reason when it is larger than max.
local function body(max)
    local len = tonumber(ngx.var.content_length)
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
    local f = io.open(file, "rb")
    if f == nil then
        return nil, "unreadable"
    end
    local s = f:read(max + 1)
    f:close()
    local text = type(s) == "string" and s or ""
    if #text > max then
        return nil, "large"
    end
    return text, nil
end
--- Method, path with query as sent, and body: two requests that differ in any of them differ here.
local function fingerprint(method, b)
    return token.hex(ngx.sha1_bin((((method .. "\n") .. (ngx.var.request_uri or "")) .. "\n") .. ngx.sha1_bin(b)))
end
local function claim(g, rkey, tok, fp)
    local res, err, fault = backend.call(
        g.conf,
        scripts.IDEM_CLAIM,
        rkey,
        tok,
        g.lease,
        fp
    )
    if res == nil then
        if fault == "lost" then
            orphans.adoptAcquire(g.conf, scripts.IDEM_RELEASE, rkey, tok)
        end
        return "error", nil, err
    end
    stats.success(g.dict, g.name)
    if res == "OK" then
        return "claimed", nil, nil
    end
    local r = res
    local rec = {
        state = tostring(r[1]),
        fp = tostring(r[2]),
        status = tonumber(r[3]) or 0,
        headers = tostring(r[4]),
        body = tostring(r[5])
    }
    return "record", rec, nil
end
--- Wait up to g.wait ms for the first request's response. Returns "record" with
-- it, "claimed" when the first request's claim was dropped and we took the key,
-- "timeout", or "error".
local function waitFor(g, rkey, tok, fp)
    local w = watches[rkey]
    if w == nil then
        local sem, serr = semaphore.new(0)
        if sem == nil then
            return "error", nil, "dlock: ngx.semaphore: " .. tostring(serr)
        end
        w = {sem = sem, waiters = 0, polling = false, rec = nil}
        watches[rkey] = w
    end
    w.waiters = w.waiters + 1
    local deadline = ngx.now() * 1000 + g.wait
    local extended = false
    local pause = 5
    local what = "timeout"
    local found
    local err
    while true do
        if w.rec ~= nil then
            what = "record"
            found = w.rec
            break
        end
        ngx.update_time()
        local left = deadline - ngx.now() * 1000
        local mark = nil
        if left <= 0 and not extended then
            mark = g.dict:get(FINISHED .. rkey)
        end
        if mark ~= nil then
            extended = true
            deadline = ngx.now() * 1000 + g.lease
            left = g.lease
        end
        if left <= 0 then
            break
        end
        if w.polling then
            w.sem:wait(math.min(left, 250) / 1000)
        else
            w.polling = true
            local got, rec, cerr = claim(g, rkey, tok, fp)
            w.polling = false
            if got == "record" and rec.state ~= "running" then
                w.rec = rec
                if w.waiters > 1 then
                    w.sem:post(w.waiters - 1)
                end
                what = "record"
                found = rec
                break
            end
            if got ~= "record" then
                if w.waiters > 1 then
                    w.sem:post(1)
                end
                what = got
                err = cerr
                break
            end
            w.sem:wait(math.min(left, pause) / 1000)
            pause = math.min(pause * 2, 100)
        end
    end
    w.waiters = w.waiters - 1
    if w.waiters == 0 and watches[rkey] == w then
        watches[rkey] = nil
    end
    return what, found, err
end
--- Shared dict mark of a claim whose holder has sent its whole response (the store is on its way).
FINISHED = "idem:fin:"
--- We hold the claim: renew it while the request runs, capture the response.
local function hold(g, rkey, tok, fp)
    stats.incr(g.dict, g.name, "acquired")
    local a = request.anchor()
    if a == nil then
        return
    end
    local rec = ledger.recordKey(rkey, tok, true)
    local recorded = ledger.record(
        g.dict,
        rec,
        tok,
        rkey,
        g.lease
    )
    if recorded ~= nil then
        meter.recorded(g.leaseStore.meter, recorded)
    end
    local now = ngx.now() * 1000
    local l = {
        key = rkey,
        token = tok,
        ttl = g.lease,
        store = g.leaseStore,
        kind = g.kind,
        rkey = rkey,
        rec = rec,
        fence = nil,
        released = false,
        validUntil = now + g.lease,
        expires = now + g.lease,
        releaseSent = false,
        since = now
    }
    inflight.track(g.owner, l, a)
    captures[a.id] = {
        g = g,
        anchor = a,
        lease = l,
        fp = fp,
        status = nil,
        headers = "",
        chunks = {},
        size = 0,
        tooLarge = false,
        complete = false
    }
end
local function access(g)
    if not shared.decides(g.name) then
        return
    end
    if inflight.holds(g.owner) then
        return
    end
    local method = ngx.req.get_method()
    if not (g.methods[method] ~= nil) then
        return
    end
    local raw, kerr = keys.value(g.key)
    if raw == nil then
        if kerr ~= nil then
            keyFailure(g, kerr)
            return
        end
        stats.incr(g.dict, g.name, "missing_key")
        keys.note(g.name, g.key, false, g.missingWhat)
        if g.onMissing == "reject" then
            problem(
                g,
                400,
                "missing-key",
                "Idempotency-Key missing",
                "this endpoint requires an Idempotency-Key header"
            )
        end
        return
    end
    keys.note(g.name, g.key, true, g.missingWhat)
    local k = ____exports.parseKey(raw)
    if k == nil then
        stats.incr(g.dict, g.name, "missing_key")
        problem(
            g,
            400,
            "invalid-key",
            "Idempotency-Key invalid",
            ("the key must be a quoted string or a token of 1 to " .. tostring(MAX_KEY)) .. " printable ASCII characters"
        )
        return
    end
    local b, berr = body(g.maxRequestBody)
    if b == nil then
        if berr == "large" then
            problem(
                g,
                413,
                "request-too-large",
                "Request body too large for an idempotent request",
                ("requests with an Idempotency-Key may have bodies of up to " .. tostring(g.maxRequestBody)) .. " bytes"
            )
        end
        ngx.log(ngx.ERR, "dlock: guard ", g.name, ": cannot read the request body back from its temp file")
        problem(
            g,
            500,
            "unreadable",
            "Request body unreadable",
            "the request body could not be read"
        )
        return
    end
    local fp = fingerprint(method, b)
    if stats.breakerOpen(g.dict, g.name) then
        stats.incr(g.dict, g.name, "short_circuited")
        onRedisFailure(g, nil)
        return
    end
    local scoped = k
    if g.scope ~= nil then
        local sv, serr = keys.value(g.scope)
        if sv == nil then
            if serr ~= nil then
                keyFailure(g, "scope: " .. serr)
                return
            end
            stats.incr(g.dict, g.name, "missing_key")
            if g.onMissing == "reject" then
                problem(
                    g,
                    400,
                    "missing-scope",
                    "Idempotency-Key without a client identity",
                    "this endpoint keeps idempotency keys per client, and this request does not say which client it is"
                )
            end
            return
        end
        scoped = ngx.sha1_bin(sv) .. k
    end
    local rkey = g.prefix .. token.hex(ngx.sha1_bin(scoped))
    local tok, terr = token.random()
    if tok == nil then
        onRedisFailure(g, terr)
        return
    end
    local what, rec, err = claim(g, rkey, tok, fp)
    if what == "record" and rec.state == "running" then
        if rec.fp ~= fp then
            answer(g, rec, fp)
        end
        stats.incr(g.dict, g.name, "waited")
        what, rec, err = waitFor(g, rkey, tok, fp)
        if what == "timeout" then
            stats.incr(g.dict, g.name, "timed_out")
            inFlight(g)
        end
    end
    if what == "claimed" then
        hold(g, rkey, tok, fp)
        return
    end
    if what == "record" then
        answer(g, rec, fp)
    end
    onRedisFailure(g, err)
end
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
function ____exports.headerFilter()
    local c = current()
    if c == nil or c.complete then
        return
    end
    c.status = ngx.status
    local hs = ngx.resp.get_headers(200)
    local lines = {}
    for name, v in pairs(hs) do
        local n = string.lower(name)
        if not (c.g.skip[n] ~= nil) then
            if type(v) == "table" then
                for ____, one in ipairs(v) do
                    lines[#lines + 1] = ((n .. ": ") .. one) .. "\n"
                end
            else
                lines[#lines + 1] = ((n .. ": ") .. tostring(v)) .. "\n"
            end
        end
    end
    table.sort(lines)
    c.headers = table.concat(lines)
end
function ____exports.bodyFilter()
    local c = current()
    if c == nil or c.complete or c.status == nil then
        return
    end
    local arg = ngx.arg
    local chunk = arg[1]
    if not c.tooLarge and type(chunk) == "string" and #chunk > 0 then
        local s = chunk
        c.size = c.size + #s
        if c.size > c.g.maxBody then
            c.tooLarge = true
            c.chunks = {}
        else
            local ____c_chunks_0 = c.chunks
            ____c_chunks_0[#____c_chunks_0 + 1] = s
        end
    end
    if arg[2] == true then
        if not (AMBIGUOUS[tostring(c.status)] ~= nil) then
            c.g.dict:set(FINISHED .. c.lease.rkey, true, c.g.lease / 1000)
        end
        schedule(c)
    end
end
--- Statuses not stored after which the backend may still be working (gateway timeout, cut connection).
AMBIGUOUS = check.set("502", "504")
--- The keeper found a request of ours that ended without log(): drop what was
-- captured of it (up to max_body of response), which no later phase will.
local function forget(rid)
    local c = captures[rid]
    if c ~= nil and not request.alive(c.anchor) then
        captures[rid] = nil
    end
end
local warnedFilters = false
--- log phase: a claim whose response never completed.
function ____exports.finish()
    local rid = request.id()
    if rid == nil then
        return
    end
    local c = captures[rid]
    if c == nil then
        return
    end
    captures[rid] = nil
    if c.complete or not request.alive(c.anchor) then
        return
    end
    local g = c.g
    stats.incr(g.dict, g.name, "not_stored")
    if c.status == nil and ngx.var.request_completion == "OK" and not warnedFilters then
        warnedFilters = true
        ngx.log(
            ngx.WARN,
            "dlock: guard ",
            g.name,
            ": a response went by unseen, so it was not stored: add ",
            "header_filter_by_lua_block { require(\"resty.dlock.gateway\").header_filter() } and ",
            "body_filter_by_lua_block { require(\"resty.dlock.gateway\").body_filter() } at http level"
        )
    end
    if ngx.var.request_completion ~= "OK" then
        stats.incr(g.dict, g.name, "aborted")
    end
end
local guardMethods = {
    access = function(self)
        access(self)
    end,
    log = function(self)
        inflight.finish(self.owner)
        ____exports.finish()
    end,
    header_filter = function(self)
        ____exports.headerFilter()
    end,
    body_filter = function(self)
        ____exports.bodyFilter()
    end
}
local guardMt = {__index = guardMethods}
local opt = shared.opt
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
--- Validate the options (already checked against gateway.new's names) and build the guard.
function ____exports.create(o, name)
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
    local conf, rerr = redis.parse(o.redis, dict)
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
        unlogged = forget
    }
    local leaseStore = {
        dict = dict,
        redis = conf,
        prefix = prefix,
        ttl = leaseMs,
        wait = 0,
        meter = meter.make(dict, name)
    }
    local g = {
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
    return setmetatable(g, guardMt), nil
end
return ____exports
