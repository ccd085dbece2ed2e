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
local MAX_LOCAL_BACKOFF = 8
local semaphore = require("ngx.semaphore")
local waiting = {}
--- Sleep up to `ms`, or less if a release of rkey in this worker wakes us.
local function pause(rkey, ms)
    local w = waiting[rkey]
    if w == nil then
        local sem = semaphore.new(0)
        if sem == nil then
            ngx.sleep(ms / 1000)
            return
        end
        w = {sem = sem, count = 0}
        waiting[rkey] = w
    end
    w.count = w.count + 1
    w.sem:wait(ms / 1000)
    w.count = w.count - 1
    if w.count == 0 and waiting[rkey] == w then
        waiting[rkey] = nil
    end
end
local function wake(rkey)
    local w = waiting[rkey]
    if w ~= nil and w.count > 0 then
        w.sem:post(1)
    end
end
--- Suffix of the fence counter's key (next to the lock key).
____exports.FENCE_SUFFIX = ":fence"
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
local COSOCKET_PHASES = check.set(
    "rewrite",
    "server_rewrite",
    "access",
    "content",
    "timer",
    "ssl_cert",
    "ssl_session_fetch",
    "ssl_client_hello",
    "preread"
)
local function phaseError(op)
    local phase = ngx.get_phase()
    if COSOCKET_PHASES[phase] ~= nil then
        return nil
    end
    return ((("dlock: " .. op) .. " needs cosockets, which nginx does not allow in the ") .. phase) .. " phase (use it in access/content, or from ngx.timer.at)"
end
--- key, ttl, wait of an acquire call, with the factory's defaults.
function ____exports.parseAcquire(store, key, opts)
    local perr = phaseError("acquire")
    if perr ~= nil then
        return nil, perr, 0
    end
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
local TRANSIENT = check.set(
    "LOADING",
    "BUSY",
    "TRYAGAIN",
    "MASTERDOWN",
    "CLUSTERDOWN"
)
--- One script round trip on a pooled connection. Returns the reply, or nil, an
-- error that names the endpoint, and the kind of fault.
function ____exports.call(conf, s, rkey, ...)
    local red, cerr = redis.connect(conf)
    if red == nil then
        return nil, cerr, "failed"
    end
    local res, err = scripts.run(red, s, rkey, ...)
    redis.done(red, conf, res ~= nil)
    if res == nil then
        return nil, (((("dlock: redis " .. conf.endpoint) .. ": ") .. tostring(err)) .. " during ") .. s.name, "lost"
    end
    if res == false then
        local code = string.match(
            tostring(err),
            "^(%u+)"
        )
        local fault = code ~= nil and TRANSIENT[code] ~= nil and "transient" or "failed"
        return nil, (("dlock: redis " .. conf.endpoint) .. ": ") .. tostring(err), fault
    end
    return res, nil, nil
end
local CLEANUP_FOR = 600
local MAX_SWEEP_DELAY = 0.5
local orphans = {}
local sweeping = false
local function sweepOrphans(premature, delay)
    local batch = orphans
    orphans = {}
    local down = {}
    for ____, o in ipairs(batch) do
        if down[o.conf.pool] ~= nil then
            orphans[#orphans + 1] = o
        elseif ngx.now() > o.deadline then
            ngx.log(
                ngx.WARN,
                "dlock: giving up cleanup of ",
                o.rkey,
                " after ",
                CLEANUP_FOR,
                " s, it expires on its own"
            )
        else
            local res, ____, fault = ____exports.call(o.conf, o.release, o.rkey, o.token)
            if res == 1 then
                ngx.log(ngx.NOTICE, "dlock: removed ", o.rkey, ", acquired by a request whose reply was lost")
            elseif res == nil then
                orphans[#orphans + 1] = o
                if fault ~= "transient" then
                    down[o.conf.pool] = true
                end
            end
        end
    end
    if #orphans == 0 or premature then
        sweeping = false
        return
    end
    local later = math.min(delay * 2, MAX_SWEEP_DELAY)
    local ok = ngx.timer.at(later, sweepOrphans, later)
    if not ok then
        sweeping = false
    end
end
local function adopt(conf, release, rkey, token)
    orphans[#orphans + 1] = {
        conf = conf,
        release = release,
        rkey = rkey,
        token = token,
        deadline = ngx.now() + CLEANUP_FOR
    }
    if not sweeping then
        local ok = ngx.timer.at(0, sweepOrphans, 0.05)
        sweeping = ok ~= nil
    end
end
local leaseMethods = {
    release = function(self)
        local perr = phaseError("release")
        if perr ~= nil then
            return nil, perr
        end
        if self.released then
            return nil, "not_owner"
        end
        self.released = true
        if not ledger.forget(self.store.dict, self.rec, self.serial) then
            return nil, "not_owner"
        end
        local res, err = ____exports.call(self.store.redis, self.kind.release, self.rkey, self.token)
        wake(self.rkey)
        if res == nil then
            return nil, err
        end
        if res ~= 1 then
            return nil, "not_owner"
        end
        return true, nil
    end,
    extend = function(self, ttl)
        local perr = phaseError("extend")
        if perr ~= nil then
            return nil, perr
        end
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
--- Release many leases that share one Redis endpoint in one round trip (a
-- pipeline of the owner-checked release script): how queued releases of a busy
-- gateway keep up. Returns how many could not be confirmed and the last error.
function ____exports.releaseAll(list)
    local todo = {}
    for ____, l in ipairs(list) do
        if not l.released then
            l.released = true
            if ledger.forget(l.store.dict, l.rec, l.serial) then
                todo[#todo + 1] = l
            end
        end
    end
    local first = todo[1]
    if first == nil then
        return 0, nil
    end
    local conf = first.store.redis
    local red, cerr = redis.connect(conf)
    if red == nil then
        return #todo, cerr
    end
    red:init_pipeline(#todo)
    for ____, l in ipairs(todo) do
        red:evalsha(l.kind.release.sha, 1, l.rkey, l.token)
    end
    local replies, perr = red:commit_pipeline()
    redis.done(red, conf, replies ~= nil)
    local failed = 0
    local lastErr
    if replies == nil then
        failed = #todo
        lastErr = ((("dlock: redis " .. conf.endpoint) .. ": ") .. tostring(perr)) .. " during release"
    end
    for i = 1, #todo do
        local l = todo[i]
        local r = replies ~= nil and replies[i] or nil
        if type(r) == "table" then
            local res, err = ____exports.call(conf, l.kind.release, l.rkey, l.token)
            if res == nil then
                failed = failed + 1
                lastErr = err
            end
        end
        wake(l.rkey)
    end
    return failed, lastErr
end
--- While a worker of this nginx holds the key, wait without polling Redis: a
-- holder in this worker wakes one waiter when it releases (waiters queue on a
-- semaphore, first come first served); a holder in another worker drops its
-- shared-dict record, which costs nothing to watch. "none": no holder here;
-- "free": try Redis now; "timeout": the deadline passed, and then the ms until
-- the holder's lease ends (retry_after).
local function awaitLocalHolder(dict, rkey, deadline)
    local rec = ledger.recordKey(rkey, "", false)
    local step = 1
    local seen = false
    while true do
        local pid, expires = ledger.holder(dict, rec)
        if pid == nil then
            return seen and "free" or "none", nil
        end
        seen = true
        ngx.update_time()
        local now = ngx.now() * 1000
        if now >= deadline then
            return "timeout", math.max(
                0,
                math.floor(expires - now)
            )
        end
        if pid == ngx.worker.pid() then
            pause(
                rkey,
                math.min(
                    deadline - now,
                    math.max(1, expires - now + 1)
                )
            )
            return "free", nil
        end
        pause(
            rkey,
            math.min(
                deadline - now,
                step / 2 + math.random() * step / 2
            )
        )
        step = math.min(step * 2, MAX_LOCAL_BACKOFF)
    end
end
--- Try, and while `wait` allows, try again: lease on success; nil, "busy",
-- retry_after when wait = 0; nil, "timeout", retry_after at the deadline;
-- nil, "dlock: ..." on a Redis failure. `extra` goes to the script after ttl.
function ____exports.acquire(store, kind, key, tok, ttl, wait, ...)
    local rkey = store.prefix .. key
    local deadline = ngx.now() * 1000 + wait
    local backoff = FIRST_BACKOFF
    local retryAfter
    if wait > 0 and not kind.shared then
        local state, left = awaitLocalHolder(store.dict, rkey, deadline)
        if state == "timeout" then
            return nil, "timeout", left
        end
    end
    while true do
        local res
        local err
        local fault
        local fence
        if kind.fenced then
            res, err, fault = ____exports.call(
                store.redis,
                kind.acquire,
                rkey,
                rkey .. ____exports.FENCE_SUFFIX,
                tok,
                ttl
            )
        else
            res, err, fault = ____exports.call(
                store.redis,
                kind.acquire,
                rkey,
                tok,
                ttl,
                ...
            )
        end
        if type(res) == "table" then
            local reply = res
            fence = reply[2]
            res = reply[1]
        end
        if res == nil then
            if fault == "lost" then
                adopt(store.redis, kind.release, rkey, tok)
                return nil, tostring(err) .. "; acquire outcome unknown, owner-checked cleanup scheduled", nil
            end
            if fault ~= "transient" or wait == 0 or deadline - ngx.now() * 1000 <= 0 then
                return nil, err, nil
            end
        elseif res == "OK" then
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
                fence = fence,
                released = false
            }
            return setmetatable(lease, leaseMt), nil, nil
        else
            retryAfter = type(res) == "number" and res >= 0 and res or nil
            if wait == 0 then
                return nil, "busy", retryAfter
            end
        end
        ngx.update_time()
        local left = deadline - ngx.now() * 1000
        if left <= 0 then
            if res == nil then
                return nil, err, nil
            end
            return nil, "timeout", retryAfter
        end
        local here = "none"
        if not kind.shared then
            local holderLeft
            here, holderLeft = awaitLocalHolder(store.dict, rkey, deadline)
            if here == "timeout" then
                return nil, "timeout", holderLeft
            end
        end
        if here == "none" then
            local nap = backoff / 2 + math.random() * backoff / 2
            if retryAfter ~= nil and retryAfter + 1 < nap then
                nap = retryAfter + 1
            end
            if left < nap then
                nap = left
            end
            pause(rkey, nap)
            backoff = math.min(backoff * 2, MAX_BACKOFF)
        end
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
