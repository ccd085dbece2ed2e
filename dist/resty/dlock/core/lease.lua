--[[ Generated with https://github.com/TypeScriptToLua/TypeScriptToLua ]]
local ____exports = {}
local check = require("resty.dlock.core.check")
local ledger = require("resty.dlock.core.ledger")
local meter = require("resty.dlock.core.meter")
local orphans = require("resty.dlock.core.orphans")
local backend = require("resty.dlock.redis.backend")
local waits = require("resty.dlock.core.wait")
local wakeups = require("resty.dlock.core.wakeups")
--- Longest key accepted, in bytes (before the prefix).
____exports.MAX_KEY_LEN = 512
--- Longest lease, in ms: one day. Longer jobs renew with lease:extend().
____exports.MAX_TTL = 86400000
local DEFAULT_TTL = 30000
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
--- The options every factory takes: dict, redis, prefix, ttl, wait, name (from a table already checked for unknown names).
function ____exports.parseStore(o, defaultPrefix, defaultName)
    local dict, derr = check.sharedDict(o.dict)
    if dict == nil then
        return nil, derr
    end
    local name = defaultName
    if o.name ~= nil then
        local n, err = meter.checkName(o.name)
        if n == nil then
            return nil, err
        end
        name = n
    end
    local conf, rerr = backend.parse(o.redis, dict)
    if conf == nil then
        return nil, rerr
    end
    local prefix = defaultPrefix
    if o.prefix == "" then
        prefix = ""
    elseif o.prefix ~= nil then
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
    ledger.prepare(dict)
    return {
        dict = dict,
        redis = conf,
        prefix = prefix,
        ttl = ttl,
        wait = wait,
        meter = meter.make(dict, name)
    }, nil
end
local ACQUIRE_OPTIONS = check.set("ttl", "wait", "renew", "on_lost")
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
--- key, ttl, wait, renew, on_lost of an acquire call, with the factory's
-- defaults; nil and the error (in place of ttl) when the input is bad.
function ____exports.parseAcquire(store, key, opts)
    local perr = phaseError("acquire")
    if perr ~= nil then
        return nil, perr, 0, false, nil
    end
    local k, kerr = check.str("key", key, ____exports.MAX_KEY_LEN)
    if k == nil then
        return nil, kerr, 0, false, nil
    end
    if opts == nil then
        return k, store.ttl, store.wait, false, nil
    end
    if type(opts) ~= "table" then
        local ____, err = check.fail("acquire options must be a table", opts)
        return nil, err, 0, false, nil
    end
    local o = opts
    local t = o.ttl
    local w = o.wait
    local r = o.renew
    local onLost = o.on_lost
    local found = (t ~= nil and 1 or 0) + (w ~= nil and 1 or 0) + (r ~= nil and 1 or 0) + (onLost ~= nil and 1 or 0)
    local uerr = check.onlyKnown("acquire options", o, found, ACQUIRE_OPTIONS)
    if uerr ~= nil then
        return nil, uerr, 0, false, nil
    end
    local ttl = store.ttl
    if t ~= nil then
        local n, err = ____exports.checkTtl(t)
        if n == nil then
            return nil, err, 0, false, nil
        end
        ttl = n
    end
    local wait = store.wait
    if w ~= nil then
        local n, err = ____exports.checkWait(w)
        if n == nil then
            return nil, err, 0, false, nil
        end
        wait = n
    end
    local renew = false
    if r ~= nil then
        local b, err = check.bool("renew", r)
        if b == nil then
            return nil, err, 0, false, nil
        end
        renew = b
    end
    if onLost ~= nil then
        if type(onLost) ~= "function" then
            local ____, err = check.fail("on_lost must be a function", onLost)
            return nil, err, 0, false, nil
        end
        if not renew then
            return nil, "dlock: on_lost needs renew = true", 0, false, nil
        end
    end
    return k, ttl, wait, renew, onLost
end
--- Epoch ms now, fresh (not the time cached at the start of this event loop cycle).
local function nowMs()
    ngx.update_time()
    return ngx.now() * 1000
end
--- An extend or a release of l failed: what its outcome may have changed in Redis.
local function unconfirmed(l, fault, release)
    if fault ~= "lost" then
        return
    end
    if release then
        if nowMs() < l.validUntil then
            l.releaseSent = true
        end
    else
        l.expires = math.max(
            l.expires,
            nowMs() + orphans.LOST_HORIZON * 1000
        )
    end
end
--- Its record out of the shared dict, and out of the held gauge.
local function forget(l)
    local expires = ledger.forget(l.store.dict, l.rec, l.token)
    if expires ~= nil then
        meter.forgotten(l.store.meter, expires)
    end
end
--- Redis says the key is not ours any more: counted lost, unless the watchdog did already.
local function gone(l)
    if not l.lost then
        meter.lost(l.store.meter)
    end
end
--- Redis answered the owner-checked release of l (1: deleted, else not ours):
-- the lease is over. A key found gone after a release reached Redis in time
-- was deleted by that release (or expired after it was asked to go), so that
-- still counts as released.
local function settle(l, reply)
    l.released = true
    forget(l)
    if type(reply) == "string" then
        waits.wakeToken(l.rkey, reply)
        meter.released(
            l.store.meter,
            (nowMs() - l.since) / 1000
        )
        return true, nil
    end
    if not wakeups.live(l.store.redis, l.rkey) then
        waits.wake(l.rkey)
    end
    if reply == 1 or l.releaseSent then
        meter.released(
            l.store.meter,
            (nowMs() - l.since) / 1000
        )
        return true, nil
    end
    gone(l)
    return nil, "not_owner"
end
--- Redis answered the owner-checked extend of l, sent at `sent` (epoch ms), to `ms`.
local function extended(l, reply, ms, sent)
    if reply ~= 1 then
        l.released = true
        forget(l)
        gone(l)
        return nil, "not_owner"
    end
    l.ttl = ms
    l.validUntil = sent + backend.validity(l.store.redis, ms)
    l.expires = math.max(
        l.expires,
        nowMs() + ms
    )
    local from, to = ledger.renew(
        l.store.dict,
        l.rec,
        l.token,
        l.key,
        ms
    )
    if from ~= nil then
        meter.moved(l.store.meter, from, to)
    end
    return true, nil
end
local function swept(o, reply)
    local l = o.lease
    if not l.released then
        if reply == nil then
            l.released = true
            forget(l)
        else
            settle(l, reply)
        end
    end
end
--- Hand a lease whose release Redis did not confirm to the sweep, which retries it until the key expires.
local function orphan(l)
    local o = {
        lost = "release",
        conf = l.store.redis,
        release = l.kind.release,
        rkey = l.rkey,
        token = l.token,
        deadline = l.expires / 1000,
        settle = swept,
        lease = l
    }
    orphans.adopt(o)
end
--- lease:valid(): may the holder still act on it? No round trip: false once it
-- is released or lost, or when its ttl has run out by the local clock since
-- the acquire or the last renewal Redis confirmed.
local function valid(self)
    return not self.released and not self.lost and nowMs() < self.validUntil
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
        self.releasing = true
        local res, err, fault = backend.own(self.store.redis, self.kind.release, self.rkey, self.token)
        if res == nil then
            unconfirmed(self, fault, true)
            return nil, err
        end
        return settle(self, res)
    end,
    valid = valid,
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
        if self.released then
            return nil, "not_owner"
        end
        local sent = ngx.now() * 1000
        local res, err, fault = backend.own(
            self.store.redis,
            self.kind.extend,
            self.rkey,
            self.token,
            ms
        )
        if res == nil then
            unconfirmed(self, fault, false)
            return nil, err
        end
        return extended(self, res, ms, sent)
    end
}
local leaseMt = {__index = leaseMethods}
--- Leases of the list grouped for pipelining: one group per Redis endpoint and
-- script (locks and permits run different scripts), each with the indexes of
-- its leases in the list.
local function byEndpoint(list, script)
    local groups = {}
    for i = 1, #list do
        local l = list[i]
        if not l.released then
            local g = (l.store.redis.pool .. " ") .. script(l).sha
            local idx = groups[g]
            if idx == nil then
                idx = {}
                groups[g] = idx
            end
            idx[#idx + 1] = i
        end
    end
    return groups
end
local function releaseScript(l)
    return l.kind.release
end
local function extendScript(l)
    return l.kind.extend
end
--- Release many leases in one round trip per Redis endpoint (a pipeline of the
-- owner-checked release script): how queued releases of a busy gateway keep
-- up. A release Redis did not confirm leaves its lease to a background sweep
-- that retries it until Redis answers or the key expires; the lease ends when
-- the sweep gets an answer. Returns how many were not confirmed now, and the
-- last error.
function ____exports.releaseAll(list)
    local failed = 0
    local lastErr
    for ____, idx in pairs(byEndpoint(list, releaseScript)) do
        local group = {}
        for ____, i in ipairs(idx) do
            group[#group + 1] = list[i]
        end
        local first = group[1]
        local out = backend.batch(first.store.redis, first.kind.release, group)
        for j = 1, #group do
            local l = group[j]
            local reply = out.replies[j]
            if reply == nil then
                unconfirmed(l, out.faults[j], true)
                failed = failed + 1
                lastErr = out.errors[j]
                orphan(l)
            else
                settle(l, reply)
            end
        end
    end
    return failed, lastErr
end
--- Extend many leases, each to its own ttl, in one round trip per Redis
-- endpoint: how a gateway renews the leases of its in-flight requests. Results
-- are aligned with the list: true, "not_owner" (the lease ran out; it is over,
-- as after extend()), or an error message ("dlock: redis ...").
function ____exports.extendAll(list)
    local results = {}
    for ____, _ in ipairs(list) do
        results[#results + 1] = "not_owner"
    end
    local sent = ngx.now() * 1000
    for ____, idx in pairs(byEndpoint(list, extendScript)) do
        local group = {}
        local ms = {}
        for ____, i in ipairs(idx) do
            local l = list[i]
            group[#group + 1] = l
            ms[#ms + 1] = l.ttl
        end
        local first = group[1]
        local out = backend.batch(first.store.redis, first.kind.extend, group, ms)
        for j = 1, #group do
            local l = group[j]
            local reply = out.replies[j]
            local i = idx[j]
            if reply == nil then
                unconfirmed(l, out.faults[j], false)
                results[i] = out.errors[j]
            else
                local ok, err = extended(l, reply, l.ttl, sent)
                if ok then
                    results[i] = true
                else
                    results[i] = err
                end
            end
        end
    end
    return results
end
--- A lease just taken: sent is when its acquire was sent (epoch ms), fence its fence (fenced kinds).
function ____exports.make(store, kind, key, tok, ttl, sent, fence)
    local rkey = store.prefix .. key
    local rec = ledger.recordKey(rkey, tok, kind.shared)
    local recorded = ledger.record(
        store.dict,
        rec,
        tok,
        key,
        ttl
    )
    if recorded ~= nil then
        meter.recorded(store.meter, recorded)
    end
    local now = nowMs()
    local lease = {
        key = key,
        token = tok,
        ttl = ttl,
        store = store,
        kind = kind,
        rkey = rkey,
        rec = rec,
        fence = fence,
        released = false,
        validUntil = sent + backend.validity(store.redis, ttl),
        expires = now + ttl,
        releaseSent = false,
        releasing = false,
        lost = false,
        onLost = nil,
        since = now
    }
    local l = setmetatable(lease, leaseMt)
    return l
end
local protect = pcall
--- Release, then hand on fn's results (pcall's `ok, ...`) or its error. A
-- release Redis did not confirm goes to the background sweep and, when fn
-- succeeded, is the result: the caller must not believe the key free.
local function finish(lease, ...)
    local released, rerr = lease:release()
    local stuck = released == nil and rerr ~= "not_owner"
    if stuck then
        orphan(lease)
    end
    local ok, e = select(1, ...)
    if ok ~= true then
        return nil, (("dlock: callback failed while holding " .. lease.key) .. ": ") .. check.text(e)
    end
    if stuck then
        return nil, (("dlock: could not release " .. lease.key) .. " after the callback (retried until it expires): ") .. check.reason(rerr)
    end
    return select(2, ...)
end
--- The `with` method of locks and semaphores: run fn(...) while holding key; the
-- lease is released whatever fn does. Returns fn's results, or nil, err when
-- the lease was not acquired, fn raised, or the release failed.
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
