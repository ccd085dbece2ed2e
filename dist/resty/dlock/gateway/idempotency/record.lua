-- Generated from src/resty/dlock/gateway/idempotency/record.ts by TypeScriptToLua: edit that file, not this one.
-- The store of a complete response: the claim of a request becomes the
-- stored record. Filters and the log phase have no cosockets: the store rides
-- the worker's next pipeline (backend.post) and its reply is seen to by
-- answered(); a timer stores it when it cannot go that way or Redis did not
-- answer (until the claim would run out), and drops the claim of a response
-- not to store.
local _M = {}
local backend = require("resty.dlock.redis.backend")
local check = require("resty.dlock.core.check")
local settle = require("resty.dlock.core.settle")
local records = require("resty.dlock.redis.records")
local stats = require("resty.dlock.gateway.stats")
local claims = require("resty.dlock.gateway.idempotency.claim")
local clock = require("resty.dlock.core.clock")
local quiet = require("resty.dlock.core.quiet")
local ngx_log = ngx.log
local ERR = ngx.ERR
local WARN = ngx.WARN
local clock_now = clock.now
local ngx_update_time = ngx.update_time
local clock_sleep = clock.sleep
local timer_at = ngx.timer.at
local math_min = math.min
local table_concat = table.concat
local lua_tostring = tostring
local quiet_due_for = quiet.dueFor
local quiet_more = quiet.more
local FINISHED = claims.FINISHED
-- Per guard, its lines about what Redis did not take while it failed: an
-- outage would otherwise log one per request (counted in not_stored).
local undropped = {}
local unstored = {}
local unconfirmed = {}
--- The store of c's response, sent through `send` (backend.call, or backend.post).
local function completing(send, c)
    local l = c.lease
    return send(
        c.g._conf,
        records.IDEM_COMPLETE,
        l._rkey,
        l.token,
        c.g._ttl,
        c.state,
        c.status,
        c.headers,
        c.body
    )
end
--- Statuses not stored after which the backend may still be working (gateway timeout, cut connection).
local AMBIGUOUS = check.set("502", "504")
--- What Redis answered to the store of c, seen to; false when it did not answer.
local function stored(c, res)
    local g = c.g
    local l = c.lease
    if res == nil then
        return false
    end
    g._dict:delete(FINISHED .. l._rkey)
    if res == 1 then
        stats.incr(g._dict, g.name, c.tooLarge and "not_stored" or "stored")
        settle.forget(l)
        claims.notify(l._rkey, {state = c.state, fp = c.fp, status = c.status, headers = c.headers, body = c.body})
        return true
    end
    stats.incr(g._dict, g.name, "not_stored")
    stats.incr(g._dict, g.name, "lost")
    ngx_log(
        ERR,
        "dlock: guard ",
        g.name,
        ": the claim on ",
        l._rkey,
        " ran out before its response could be stored"
    )
    return true
end
local function store(premature, c)
    local g = c.g
    local l = c.lease
    local status = c.status
    if c.refused or g._store[status] ~= true then
        stats.incr(g._dict, g.name, "not_stored")
        g._dict:delete(FINISHED .. l._rkey)
        if not c.refused and AMBIGUOUS[lua_tostring(status)] ~= nil then
            -- The operation may have run, or may still be running: no retry before the claim runs out.
            return
        end
        -- The application said it did not do it (409, 429, 503...): retries may run it.
        local res, err = backend.call(g._conf, records.IDEM_RELEASE, l._rkey, l.token)
        if res == nil then
            local n = quiet_due_for(undropped, g.name)
            if n > 0 then
                ngx_log(
                    WARN,
                    "dlock: guard ",
                    g.name,
                    ": dropping a claim: ",
                    check.reason(err),
                    " (it runs out after the lease)",
                    quiet_more(n)
                )
            end
        end
        settle.forget(l)
        claims.notify(l._rkey, nil)
        return
    end
    -- Until the claim would run out: Redis may come back meanwhile.
    ngx_update_time()
    local deadline = clock_now() + g._lease / 1000
    local pause = 0.05
    local said = false
    while true do
        local res, err = completing(backend.call, c)
        if stored(c, res) then
            return
        end
        stats.incr(g._dict, g.name, "redis_errors")
        if not said then
            -- Said at the first failure, as a release Redis did not confirm is: retries meanwhile wait, then get 409.
            said = true
            local n = quiet_due_for(unconfirmed, g.name)
            if n > 0 then
                ngx_log(
                    WARN,
                    "dlock: guard ",
                    g.name,
                    ": storing a response: ",
                    check.reason(err),
                    " (retried until Redis takes it or the claim runs out)",
                    quiet_more(n)
                )
            end
        end
        ngx_update_time()
        if clock_now() + pause >= deadline then
            g._dict:delete(FINISHED .. l._rkey)
            stats.incr(g._dict, g.name, "not_stored")
            local n = quiet_due_for(unstored, g.name)
            if n > 0 then
                ngx_log(
                    ERR,
                    "dlock: guard ",
                    g.name,
                    ": response not stored, the claim runs out: ",
                    check.reason(err),
                    quiet_more(n)
                )
            end
            return
        end
        clock_sleep(pause)
        pause = math_min(pause * 2, 1)
    end
end
--- Store c from a timer.
local function later(c)
    local ok, err = timer_at(0, store, c)
    if not ok then
        c.g._dict:delete(FINISHED .. c.lease._rkey)
        stats.incr(c.g._dict, c.g.name, "not_stored")
        ngx_log(
            ERR,
            "dlock: guard ",
            c.g.name,
            ": cannot store the response (the key stays claimed until its lease ",
            "runs out): ",
            err
        )
    end
end
--- A store that rode a pipeline was answered (in the sender's timer: nothing here may wait); a timer tries again when Redis did not answer.
local function answered(j)
    local c = j.post
    if stored(c, j.res) then
        return
    end
    stats.incr(c.g._dict, c.g.name, "redis_errors")
    later(c)
end
--- The response is complete: store it (or drop the claim of one not to store).
local function schedule(c)
    c.complete = true
    local g = c.g
    local status = c.status
    if not c.refused and g._store[status] == true then
        c.state = c.tooLarge and "unreplayable" or "done"
        c.body = c.tooLarge and "" or table_concat(c.chunks)
        c.chunks = {}
        local j = completing(backend.post, c)
        if j ~= nil then
            j.post = c
            return
        end
    end
    later(c)
end
-- Exported by name: this module's own uses of them are locals, not lookups in its exports table.
_M.schedule = schedule
_M.answered = answered
_M.AMBIGUOUS = AMBIGUOUS
return _M
