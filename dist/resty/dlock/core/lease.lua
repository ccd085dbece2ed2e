-- Generated from src/resty/dlock/core/lease.ts by TypeScriptToLua: edit that file, not this one.
-- Leases: what resty.dlock locks and resty.dlock.semaphore permits have in
-- common (their options: options.lua): the lease object, made by an acquire (acquire.lua), released and extended
-- owner-checked (what Redis's answers do to it is settle.lua's; many leases in
-- one round trip, batch.lua; `with`, with.lua).
local _M = {}
local check = require("resty.dlock.core.check")
local ledger = require("resty.dlock.core.ledger")
local meter = require("resty.dlock.core.meter")
local options = require("resty.dlock.core.options")
local backend = require("resty.dlock.redis.backend")
local settle = require("resty.dlock.core.settle")
local watchdog = require("resty.dlock.core.watchdog")
local clock = require("resty.dlock.core.clock")
local ngx_get_phase = ngx.get_phase
local clock_now = clock.now
local clock_sleep = clock.sleep
local lua_setmetatable = setmetatable
local nowMs = settle.nowMs
local extendScript = settle.extendScript
local notSelf = check.notSelf
-- Where ngx_lua allows cosockets. Elsewhere (init, set, header/body filter, log,
-- balancer) a Redis call would raise; say so as an error instead.
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
    local phase = ngx_get_phase()
    if COSOCKET_PHASES[phase] ~= nil then
        return nil
    end
    return "dlock: " .. op .. " needs cosockets, which nginx does not allow in the " .. phase .. " phase (use it in access/content, or from ngx.timer.at)"
end
--- Until a renewal of l on its way is back (bounded by its call's timeouts): an extend() must reach Redis after it.
local function quiesce(l)
    if not l._renewing then
        return
    end
    local conf = l._store.redis
    local deadline = clock_now() + (conf.connect_timeout + conf.read_timeout) / 1000
    while l._renewing and clock_now() < deadline do
        clock_sleep(0.002)
    end
end
--- The leases' metatable (its __index, the methods, is set once they are).
local leaseMt = {}
--- lease:valid(): may the holder still act on it? No round trip: false once it
-- is released or lost, or when its ttl has run out by the local clock since
-- the acquire or the last renewal Redis confirmed.
local function valid(self)
    if notSelf(self, leaseMt, "lease:valid()") ~= nil then
        return false
    end
    return not self._released and not self._lost and nowMs() < self._validUntil
end
local leaseMethods = {
    release = function(self)
        local bad = notSelf(self, leaseMt, "lease:release()")
        if bad ~= nil then
            return nil, bad
        end
        local perr = phaseError("release")
        if perr ~= nil then
            return nil, perr
        end
        if self._released then
            return nil, "not_owner"
        end
        self._releasing = true
        local res, err, fault = backend.own(self._store.redis, self._kind.release, self._rkey, self.token)
        if res == nil then
            settle.unconfirmed(self, fault, true)
            return nil, err
        end
        return settle.released(self, res)
    end,
    valid = valid,
    extend = function(self, ttl)
        local bad = notSelf(self, leaseMt, "lease:extend()")
        if bad ~= nil then
            return nil, bad
        end
        local perr = phaseError("extend")
        if perr ~= nil then
            return nil, perr
        end
        local ms, terr = options.extendTtl(ttl, self.ttl)
        if ms == nil then
            return nil, terr
        end
        local watched = watchdog.watches(self)
        local rerr = options.renewable(watched, ms)
        if rerr ~= nil then
            return nil, rerr
        end
        if self._released then
            return nil, "not_owner"
        end
        -- Only the watchdog's renewals can cross an extend() (_extendingMs).
        if watched then
            quiesce(self)
            self._extendingMs = ms
        end
        local sent = clock_now() * 1000
        local res, err, fault = backend.own(self._store.redis, extendScript(self, nowMs()), self._rkey, self.token, ms)
        self._extendingMs = nil
        if res == nil then
            settle.unconfirmed(self, fault, false)
            return nil, err
        end
        local ok, xerr = settle.extended(self, res, ms, sent)
        -- A renewed lease at a shorter ttl: the watchdog's sweep must come sooner.
        if ok ~= nil then
            watchdog.extended(self)
        end
        return ok, xerr
    end
}
leaseMt.__index = leaseMethods
--- A lease just taken: sent is when its acquire was sent (epoch ms), fence its fence (fenced kinds).
function _M.make(store, kind, key, rkey, tok, ttl, sent, fence)
    local rec = ledger.recordKey(store.redis.keyspace, rkey, tok, kind.shared)
    local recorded, recv = ledger.record(store.dict, rec, tok, key, ttl)
    if recorded ~= nil then
        meter.recorded(store.meter, recorded)
    end
    local now = nowMs()
    -- The flags (_released, _releaseSent, _releasing, _lost) start nil: 14
    -- fields, 15 with _onLost, keep the table within 16 hash slots; at 17 LuaJIT
    -- gives it 32, 384 bytes more per lease.
    local lease = {
        key = key,
        token = tok,
        ttl = ttl,
        fence = fence,
        shared = kind.reader == true,
        _store = store,
        _kind = kind,
        _rkey = rkey,
        _rec = rec,
        _recv = recv,
        _recAt = recorded or 0,
        _validUntil = sent + backend.validity(store.redis, ttl),
        _expires = now + ttl,
        _since = now
    }
    -- Not a tail call: LuaJIT gives up a trace that tail-calls a builtin on its
    -- way out ("leaving loop in root trace"), and leaves the function interpreted.
    local l = lua_setmetatable(lease, leaseMt)
    return l
end
--- Release l without waiting for Redis, from any phase (the gateway's log
-- phase has no cosockets): its release rides the next pipeline to its server
-- (backend.postOwn), and the sender reports the answered call to the job's
-- `post` (set by the caller), for posted() to settle. nil when it cannot go
-- that way (no auto-pipelining, Redlock, a Cluster map being read): then
-- release() it from a timer.
function _M.post(l)
    if l._released then
        return nil
    end
    local j = backend.postOwn(l._store.redis, l._kind.release, l._rkey, l.token)
    if j ~= nil then
        l._releasing = true
    end
    return j
end
--- What a posted release came to, as release() would say it.
function _M.posted(l, j)
    if j.res == nil then
        settle.unconfirmed(l, j.fault, true)
        return nil, j.err
    end
    return settle.released(l, j.res)
end
-- Exported by name: this module's own uses of them are locals, not lookups in its exports table.
_M.phaseError = phaseError
_M.quiesce = quiesce
return _M
