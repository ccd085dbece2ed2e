-- Generated from src/resty/dlock/gateway/idempotency/capture.ts by TypeScriptToLua: edit that file, not this one.
-- A request that holds a claim: the keeper renews the claim while it runs, the
-- header and body filters note its response (up to max_body), and at the end
-- of the body the claim becomes the stored record (record.lua). The captures
-- table (requests of this worker holding a claim) lives here alone.
local _M = {}
local inflight = require("resty.dlock.gateway.inflight")
local backend = require("resty.dlock.redis.backend")
local records = require("resty.dlock.redis.records")
local ledger = require("resty.dlock.core.ledger")
local meter = require("resty.dlock.core.meter")
local request = require("resty.dlock.core.request")
local stats = require("resty.dlock.gateway.stats")
local claims = require("resty.dlock.gateway.idempotency.claim")
local record = require("resty.dlock.gateway.idempotency.record")
local clock = require("resty.dlock.core.clock")
local lua_pairs = pairs
local lua_ipairs = ipairs
local ngx_log = ngx.log
local WARN = ngx.WARN
local clock_now = clock.now
local ngx_var = ngx.var
local ngx = ngx
local str_lower = string.lower
local table_sort = table.sort
local table_concat = table.concat
local lua_type = type
local lua_tostring = tostring
local req_get_method = ngx.req.get_method
-- ngx.arg is one table whose fields read the current body_filter call's arguments.
local ngx_arg = ngx.arg
local resp_get_headers = ngx.resp.get_headers
local FINISHED = claims.FINISHED
local AMBIGUOUS = record.AMBIGUOUS
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
        -- A request that is gone had this address before: it ended unseen.
        captures[rid] = nil
        return nil
    end
    return c
end
--- We hold the claim: renew it while the request runs, capture the response.
-- False when it cannot be renewed (no timer for the watchdog): the claim is dropped.
function _M.hold(g, rkey, tok, fp)
    stats.incr(g._dict, g.name, "acquired")
    if request.id() == nil then
        return true
    end
    local rec = ledger.recordKey(g._leaseStore.redis.keyspace, rkey, tok, true)
    local recorded, recv = ledger.record(g._dict, rec, tok, rkey, g._lease)
    if recorded ~= nil then
        meter.recorded(g._leaseStore.meter, recorded)
    end
    local now = clock_now() * 1000
    -- Shaped as a lease of the lock, so the keeper renews it with the others (one pipeline per guard).
    local l = {
        key = rkey,
        token = tok,
        ttl = g._lease,
        fence = nil,
        _store = g._leaseStore,
        _kind = g._kind,
        _rkey = rkey,
        _rec = rec,
        _recv = recv,
        _recAt = recorded or 0,
        _validUntil = now + g._lease,
        _expires = now + g._lease,
        _since = now
    }
    local a = inflight.track(g._owner, l)
    if a == false then
        ledger.dropOwned(g._dict, rec)
        backend.call(g._conf, records.IDEM_RELEASE, rkey, tok)
        return false
    end
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
        complete = false,
        state = "",
        body = "",
        answered = record.answered,
        refused = false
    }
    return true
end
--- "name: value\n". Not a value that is empty: a replay sets headers through
-- ngx.header, where an empty value removes the header (README, stored headers).
local function addLine(lines, n, v)
    if v ~= "" then
        lines[#lines + 1] = n .. ": " .. v .. "\n"
    end
end
--- The whole response went by: store it.
local function complete(c)
    if not c.refused and AMBIGUOUS[lua_tostring(c.status)] == nil then
        -- Before its last bytes leave: a retry reaching this nginx waits for the store, not 409.
        -- Only into free memory: a full dict never loses a lease's record for it (a retry then gets 409, not the wait).
        c.g._dict:safe_set(FINISHED .. c.lease._rkey, true, c.g._lease / 1000)
    end
    record.schedule(c)
end
function _M.headerFilter()
    local c = current()
    if c == nil or c.complete then
        return
    end
    c.status = ngx.status
    -- Raw: the names as the backend wrote them, which the replay sends again.
    local hs = resp_get_headers(200, true)
    -- A response to HEAD is its header: no body filter call ends it, and its
    -- Content-Length (the GET body's) is kept for the replay.
    local head = req_get_method() == "HEAD"
    -- Names in a stable order (the same response stores the same bytes); the
    -- values of a repeated name in the order they were sent (RFC 9110 5.3).
    local names = {}
    for name in lua_pairs(hs) do
        local n = str_lower(name)
        if c.g._skip[n] == nil or head and n == "content-length" then
            names[#names + 1] = name
        end
    end
    table_sort(names)
    local lines = {}
    for _, name in lua_ipairs(names) do
        local v = hs[name]
        if lua_type(v) == "table" then
            for _, one in lua_ipairs(v) do
                addLine(lines, name, one)
            end
        else
            addLine(lines, name, lua_tostring(v))
        end
    end
    c.headers = table_concat(lines)
    if head then
        complete(c)
    end
end
function _M.bodyFilter()
    local c = current()
    if c == nil or c.complete or c.status == nil then
        return
    end
    local arg = ngx_arg
    local chunk = arg[1]
    if not c.tooLarge and lua_type(chunk) == "string" and #chunk > 0 then
        local s = chunk
        c.size = c.size + #s
        if c.size > c.g._maxBody then
            -- Not silently: the record says the operation completed, retries are told it is not replayable.
            c.tooLarge = true
            c.chunks = {}
        else
            c.chunks[#c.chunks + 1] = s
        end
    end
    if arg[2] == true then
        complete(c)
    end
end
--- The keeper found a request of ours that ended without log(): drop what was
-- captured of it (up to max_body of response), which no later phase will.
function _M.forget(rid)
    local c = captures[rid]
    if c ~= nil and not request.alive(c.anchor) then
        captures[rid] = nil
    end
end
--- A later guard refused request rid in the pass that claimed its key (ctx,
-- giveback.lua): the refusal is no answer of the application's, so it is not
-- stored; the claim is dropped once the refusal is sent, as for a 409.
function _M.refused(rid, ctx)
    local c = captures[rid]
    if c ~= nil and c.anchor.ctx == ctx and request.alive(c.anchor) then
        c.refused = true
    end
end
local warnedFilters = false
--- log phase: a claim whose response never completed.
function _M.finish()
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
    stats.incr(g._dict, g.name, "not_stored")
    if c.status == nil and ngx_var.request_completion == "OK" and not warnedFilters then
        warnedFilters = true
        ngx_log(
            WARN,
            "dlock: guard ",
            g.name,
            ": a response went by unseen, so it was not stored: add ",
            "header_filter_by_lua_block { require(\"resty.dlock.gateway\").header_filter() } and ",
            "body_filter_by_lua_block { require(\"resty.dlock.gateway\").body_filter() } at http level"
        )
    end
    if ngx_var.request_completion ~= "OK" then
        stats.incr(g._dict, g.name, "aborted")
    end
end
return _M
