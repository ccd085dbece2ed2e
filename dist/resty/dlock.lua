--[[ Generated with https://github.com/TypeScriptToLua/TypeScriptToLua ]]
local ____exports = {}
local check = require("resty.dlock.check")
local ledger = require("resty.dlock.ledger")
local redis = require("resty.dlock.redis")
local scripts = require("resty.dlock.scripts")
local token = require("resty.dlock.token")
____exports._VERSION = "0.1.0"
--- Longest key accepted, in bytes (before the prefix).
____exports.MAX_KEY_LEN = 512
--- Longest lease, in ms: one day. Longer jobs renew with lease:extend().
____exports.MAX_TTL = 86400000
local DEFAULT_TTL = 30000
local FIRST_BACKOFF = 2
local MAX_BACKOFF = 64
local NEW_OPTIONS = check.set(
    "dict",
    "redis",
    "prefix",
    "owner",
    "ttl",
    "wait"
)
local ACQUIRE_OPTIONS = check.set("ttl", "wait")
local function checkTtl(v)
    return check.integer(
        "ttl",
        v,
        1,
        ____exports.MAX_TTL,
        "a positive integer of ms"
    )
end
local function checkWait(v)
    return check.integer(
        "wait",
        v,
        0,
        ____exports.MAX_TTL,
        "a non-negative integer of ms"
    )
end
local function checkKey(v)
    return check.str("key", v, ____exports.MAX_KEY_LEN)
end
--- One owner-checked script round trip. Returns the reply, or nil and an error
-- that names the endpoint; `lost` is true when the request may have reached
-- Redis but the reply did not come back (its outcome is unknown).
local function call(conf, s, rkey, ...)
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
local function cleanup(premature, conf, rkey, tok, deadline, delay)
    if premature then
        return
    end
    local res, err = call(conf, scripts.RELEASE, rkey, tok)
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
        rkey,
        tok,
        deadline,
        math.min(delay * 2, 5)
    )
end
local leaseMethods = {
    release = function(self)
        if self.released or ledger.superseded(self.locks.dict, self.rkey, self.serial) then
            self.released = true
            return nil, "not_owner"
        end
        self.released = true
        ledger.forget(self.locks.dict, self.rkey, self.serial)
        local res, err = call(self.locks.redis, scripts.RELEASE, self.rkey, self.token)
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
            local n, terr = checkTtl(ttl)
            if n == nil then
                return nil, terr
            end
            ms = n
        end
        if self.released or ledger.superseded(self.locks.dict, self.rkey, self.serial) then
            return nil, "not_owner"
        end
        local res, err = call(
            self.locks.redis,
            scripts.EXTEND,
            self.rkey,
            self.token,
            ms
        )
        if res == nil then
            return nil, err
        end
        if res ~= 1 then
            ledger.forget(self.locks.dict, self.rkey, self.serial)
            return nil, "not_owner"
        end
        self.ttl = ms
        ledger.renew(
            self.locks.dict,
            self.rkey,
            self.serial,
            self.token,
            self.key,
            ms
        )
        return true, nil
    end
}
local leaseMt = {__index = leaseMethods}
local protect = pcall
--- Release, then hand on fn's results (pcall's `ok, ...`) or its error.
local function finish(lease, ...)
    lease:release()
    local ok, e = select(1, ...)
    if ok ~= true then
        return nil, (("dlock: callback failed while holding " .. lease.key) .. ": ") .. tostring(e)
    end
    return select(2, ...)
end
local locksMethods = {
    acquire = function(self, key, opts)
        local k, kerr = checkKey(key)
        if k == nil then
            return nil, kerr, nil
        end
        local o, oerr = check.options("acquire options", opts, ACQUIRE_OPTIONS)
        if o == nil then
            return nil, oerr, nil
        end
        local ttl = self.ttl
        if o.ttl ~= nil then
            local n, err = checkTtl(o.ttl)
            if n == nil then
                return nil, err, nil
            end
            ttl = n
        end
        local wait = self.wait
        if o.wait ~= nil then
            local n, err = checkWait(o.wait)
            if n == nil then
                return nil, err, nil
            end
            wait = n
        end
        local tok, terr = token.random()
        if self.owner == "worker" then
            tok, terr = token.worker()
        end
        if tok == nil then
            return nil, terr, nil
        end
        local rkey = self.prefix .. k
        local deadline = ngx.now() * 1000 + wait
        local backoff = FIRST_BACKOFF
        while true do
            local res, err, lost = call(
                self.redis,
                scripts.ACQUIRE,
                rkey,
                tok,
                ttl
            )
            if res == nil then
                if lost then
                    ngx.timer.at(
                        0,
                        cleanup,
                        self.redis,
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
                local serial = ledger.record(
                    self.dict,
                    rkey,
                    tok,
                    k,
                    ttl
                )
                local lease = {
                    key = k,
                    token = tok,
                    ttl = ttl,
                    locks = self,
                    rkey = rkey,
                    serial = serial,
                    released = false
                }
                return setmetatable(lease, leaseMt), nil, nil
            end
            local pttl = type(res) == "number" and res >= 0 and res or nil
            if wait == 0 then
                return nil, "busy", pttl
            end
            ngx.update_time()
            local left = deadline - ngx.now() * 1000
            if left <= 0 then
                return nil, "timeout", pttl
            end
            local nap = backoff / 2 + math.random() * backoff / 2
            if pttl ~= nil and pttl + 1 < nap then
                nap = pttl + 1
            end
            if left < nap then
                nap = left
            end
            ngx.sleep(nap / 1000)
            backoff = math.min(backoff * 2, MAX_BACKOFF)
        end
    end,
    held = function(self)
        return ledger.held(self.dict)
    end,
    with = function(self, key, opts, fn, ...)
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
}
local locksMt = {__index = locksMethods}
--- Create a lock factory. Returns locks, or nil and an error naming the bad option.
-- 
-- @customName new
function ____exports.new(opts)
    if opts == nil then
        return nil, "dlock: new needs an options table with at least dict"
    end
    local o, oerr = check.options("dlock.new options", opts, NEW_OPTIONS)
    if o == nil then
        return nil, oerr
    end
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
    local prefix = "dlock:"
    if o.prefix ~= nil then
        local p, err = check.str("prefix", o.prefix, 256)
        if p == nil then
            return nil, err
        end
        prefix = p
    end
    local owner = "random"
    local ov = o.owner
    if ov ~= nil then
        if ov ~= "random" and ov ~= "worker" then
            return check.fail("owner must be \"random\" or \"worker\"", ov)
        end
        owner = ov
    end
    local ttl = DEFAULT_TTL
    if o.ttl ~= nil then
        local n, err = checkTtl(o.ttl)
        if n == nil then
            return nil, err
        end
        ttl = n
    end
    local wait = 0
    if o.wait ~= nil then
        local n, err = checkWait(o.wait)
        if n == nil then
            return nil, err
        end
        wait = n
    end
    local locks = {
        dict = dict,
        redis = conf,
        prefix = prefix,
        owner = owner,
        ttl = ttl,
        wait = wait
    }
    return setmetatable(locks, locksMt), nil
end
return ____exports
