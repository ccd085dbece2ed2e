--[[ Generated with https://github.com/TypeScriptToLua/TypeScriptToLua ]]
local ____exports = {}
local check = require("resty.dlock.check")
local ledger = require("resty.dlock.ledger")
local redis = require("resty.dlock.redis")
local scripts = require("resty.dlock.scripts")
--- Longest key accepted, in bytes (before the prefix).
____exports.MAX_KEY_LEN = 512
--- Longest lease, in ms: one day. Longer jobs renew with lease:extend().
____exports.MAX_TTL = 86400000
local DEFAULT_TTL = 30000
local FIRST_BACKOFF = 2
local MAX_BACKOFF = 64
function ____exports.checkTtl(v)
    return check.integer(
        "ttl",
        v,
        1,
        ____exports.MAX_TTL,
        "a positive integer of ms"
    )
end
function ____exports.checkWait(v)
    return check.integer(
        "wait",
        v,
        0,
        ____exports.MAX_TTL,
        "a non-negative integer of ms"
    )
end
--- The options every factory takes: dict, redis, prefix, ttl, wait (from a table already checked for unknown names).
function ____exports.parseStore(o, defaultPrefix)
    local dictName, derr = check.str("dict", o.dict, 256)
    if dictName == nil then
        return nil, derr
    end
    local dict = ngx.shared[dictName]
    if dict == nil then
        return check.fail(("no lua_shared_dict named " .. dictName) .. " (declare it in nginx.conf)", dictName)
    end
    local conf, rerr = redis.parse(o.redis)
    if conf == nil then
        return nil, rerr
    end
    local prefix = defaultPrefix
    if o.prefix ~= nil then
        local p, err = check.str("prefix", o.prefix, 256)
        if p == nil then
            return nil, err
        end
        prefix = p
    end
    local ttl = DEFAULT_TTL
    if o.ttl ~= nil then
        local n, err = ____exports.checkTtl(o.ttl)
        if n == nil then
            return nil, err
        end
        ttl = n
    end
    local wait = 0
    if o.wait ~= nil then
        local n, err = ____exports.checkWait(o.wait)
        if n == nil then
            return nil, err
        end
        wait = n
    end
    return {
        dict = dict,
        redis = conf,
        prefix = prefix,
        ttl = ttl,
        wait = wait
    }, nil
end
local ACQUIRE_OPTIONS = check.set("ttl", "wait")
--- key, ttl, wait of an acquire call, with the factory's defaults.
function ____exports.parseAcquire(store, key, opts)
    local k, kerr = check.str("key", key, ____exports.MAX_KEY_LEN)
    if k == nil then
        return nil, kerr, 0
    end
    local o, oerr = check.options("acquire options", opts, ACQUIRE_OPTIONS)
    if o == nil then
        return nil, oerr, 0
    end
    local ttl = store.ttl
    if o.ttl ~= nil then
        local n, err = ____exports.checkTtl(o.ttl)
        if n == nil then
            return nil, err, 0
        end
        ttl = n
    end
    local wait = store.wait
    if o.wait ~= nil then
        local n, err = ____exports.checkWait(o.wait)
        if n == nil then
            return nil, err, 0
        end
        wait = n
    end
    return k, ttl, wait
end
--- One script round trip on a pooled connection. Returns the reply, or nil and
-- an error that names the endpoint; `lost` is true when the request may have
-- reached Redis but the reply did not come back (its outcome is unknown).
function ____exports.call(conf, s, rkey, ...)
    local red, cerr = redis.connect(conf)
    if red == nil then
        return nil, cerr, false
    end
    local res, err = scripts.run(red, s, rkey, ...)
    redis.done(red, conf, res ~= nil)
    if res == nil then
        return nil, (((("dlock: redis " .. conf.endpoint) .. ": ") .. tostring(err)) .. " during ") .. s.name, true
    end
    if res == false then
        return nil, (("dlock: redis " .. conf.endpoint) .. ": ") .. tostring(err), false
    end
    return res, nil, false
end
--- Delete a lease whose acquire reply was lost, owner-checked, from a timer.
-- Redis may be paused or unreachable right now (that is often why the reply was
-- lost), so retry with backoff until the lease would have expired anyway.
local function cleanup(premature, conf, s, rkey, tok, deadline, delay)
    if premature then
        return
    end
    local res, err = ____exports.call(conf, s, rkey, tok)
    if res ~= nil then
        if res == 1 then
            ngx.log(ngx.NOTICE, "dlock: removed ", rkey, " acquired by a request whose reply was lost")
        end
        return
    end
    if ngx.now() + delay >= deadline then
        ngx.log(
            ngx.WARN,
            "dlock: giving up cleanup of ",
            rkey,
            ", it expires on its own: ",
            err
        )
        return
    end
    ngx.timer.at(
        delay,
        cleanup,
        conf,
        s,
        rkey,
        tok,
        deadline,
        math.min(delay * 2, 5)
    )
end
local leaseMethods = {
    release = function(self)
        if self.released or ledger.superseded(self.store.dict, self.rec, self.serial) then
            self.released = true
            return nil, "not_owner"
        end
        self.released = true
        ledger.forget(self.store.dict, self.rec, self.serial)
        local res, err = ____exports.call(self.store.redis, self.kind.release, self.rkey, self.token)
        if res == nil then
            return nil, err
        end
        if res ~= 1 then
            return nil, "not_owner"
        end
        return true, nil
    end,
    extend = function(self, ttl)
        local ms = self.ttl
        if ttl ~= nil then
            local n, terr = ____exports.checkTtl(ttl)
            if n == nil then
                return nil, terr
            end
            ms = n
        end
        if self.released or ledger.superseded(self.store.dict, self.rec, self.serial) then
            return nil, "not_owner"
        end
        local res, err = ____exports.call(
            self.store.redis,
            self.kind.extend,
            self.rkey,
            self.token,
            ms
        )
        if res == nil then
            return nil, err
        end
        if res ~= 1 then
            ledger.forget(self.store.dict, self.rec, self.serial)
            return nil, "not_owner"
        end
        self.ttl = ms
        ledger.renew(
            self.store.dict,
            self.rec,
            self.serial,
            self.token,
            self.key,
            ms
        )
        return true, nil
    end
}
local leaseMt = {__index = leaseMethods}
--- Try, and while `wait` allows, try again: lease on success; nil, "busy",
-- retry_after when wait = 0; nil, "timeout", retry_after at the deadline;
-- nil, "dlock: ..." on a Redis failure. `extra` goes to the script after ttl.
function ____exports.acquire(store, kind, key, tok, ttl, wait, ...)
    local rkey = store.prefix .. key
    local deadline = ngx.now() * 1000 + wait
    local backoff = FIRST_BACKOFF
    while true do
        local res, err, lost = ____exports.call(
            store.redis,
            kind.acquire,
            rkey,
            tok,
            ttl,
            ...
        )
        if res == nil then
            if lost then
                ngx.timer.at(
                    0,
                    cleanup,
                    store.redis,
                    kind.release,
                    rkey,
                    tok,
                    ngx.now() + ttl / 1000,
                    0.1
                )
                return nil, tostring(err) .. "; acquire outcome unknown, owner-checked cleanup scheduled", nil
            end
            return nil, err, nil
        end
        if res == "OK" then
            local rec = ledger.recordKey(rkey, tok, kind.shared)
            local serial = ledger.record(
                store.dict,
                rec,
                tok,
                key,
                ttl
            )
            local lease = {
                key = key,
                token = tok,
                ttl = ttl,
                store = store,
                kind = kind,
                rkey = rkey,
                rec = rec,
                serial = serial,
                released = false
            }
            return setmetatable(lease, leaseMt), nil, nil
        end
        local retryAfter = type(res) == "number" and res >= 0 and res or nil
        if wait == 0 then
            return nil, "busy", retryAfter
        end
        ngx.update_time()
        local left = deadline - ngx.now() * 1000
        if left <= 0 then
            return nil, "timeout", retryAfter
        end
        local nap = backoff / 2 + math.random() * backoff / 2
        if retryAfter ~= nil and retryAfter + 1 < nap then
            nap = retryAfter + 1
        end
        if left < nap then
            nap = left
        end
        ngx.sleep(nap / 1000)
        backoff = math.min(backoff * 2, MAX_BACKOFF)
    end
end
local protect = pcall
--- Release, then hand on fn's results (pcall's `ok, ...`) or its error.
local function finish(lease, ...)
    lease:release()
    local ok, e = select(1, ...)
    if ok ~= true then
        return nil, (("dlock: callback failed while holding " .. lease.key) .. ": ") .. check.text(e)
    end
    return select(2, ...)
end
--- The `with` method of locks and semaphores: run fn(...) while holding key; the
-- lease is released whatever fn does. Returns fn's results, or nil, err when
-- the lease was not acquired or fn raised.
function ____exports.withLease(self, key, opts, fn, ...)
    if type(fn) ~= "function" then
        return check.fail("with needs a function", fn)
    end
    local lease, err, retryAfter = self:acquire(key, opts)
    if lease == nil then
        return nil, err, retryAfter
    end
    return finish(
        lease,
        protect(fn, ...)
    )
end
return ____exports
