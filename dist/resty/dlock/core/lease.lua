--[[ Generated with https://github.com/TypeScriptToLua/TypeScriptToLua ]]
local ____exports = {}
local check = require("resty.dlock.core.check")
local ledger = require("resty.dlock.core.ledger")
local meter = require("resty.dlock.core.meter")
local backend = require("resty.dlock.redis.backend")
local redis = require("resty.dlock.redis.client")
local settle = require("resty.dlock.core.settle")
local ngx_get_phase = ngx.get_phase
local ngx_now = ngx.now
local lua_setmetatable = setmetatable
local nowMs = settle.nowMs
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
    local conf, rerr = redis.parse(o.redis, dict)
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
function ____exports.phaseError(op)
    local phase = ngx_get_phase()
    if COSOCKET_PHASES[phase] ~= nil then
        return nil
    end
    return ((("dlock: " .. op) .. " needs cosockets, which nginx does not allow in the ") .. phase) .. " phase (use it in access/content, or from ngx.timer.at)"
end
--- key, ttl, wait, renew, on_lost of an acquire call, with the factory's
-- defaults; nil and the error (in place of ttl) when the input is bad.
function ____exports.parseAcquire(store, key, opts)
    local perr = ____exports.phaseError("acquire")
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
--- lease:valid(): may the holder still act on it? No round trip: false once it
-- is released or lost, or when its ttl has run out by the local clock since
-- the acquire or the last renewal Redis confirmed.
local function valid(self)
    return not self._released and not self._lost and nowMs() < self._validUntil
end
local leaseMethods = {
    release = function(self)
        local perr = ____exports.phaseError("release")
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
        local perr = ____exports.phaseError("extend")
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
        if self._released then
            return nil, "not_owner"
        end
        local sent = ngx_now() * 1000
        local res, err, fault = backend.own(
            self._store.redis,
            self._kind.extend,
            self._rkey,
            self.token,
            ms
        )
        if res == nil then
            settle.unconfirmed(self, fault, false)
            return nil, err
        end
        return settle.extended(self, res, ms, sent)
    end
}
local leaseMt = {__index = leaseMethods}
--- A lease just taken: sent is when its acquire was sent (epoch ms), fence its fence (fenced kinds).
function ____exports.make(store, kind, key, rkey, tok, ttl, sent, fence)
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
        fence = fence,
        _store = store,
        _kind = kind,
        _rkey = rkey,
        _rec = rec,
        _released = false,
        _validUntil = sent + backend.validity(store.redis, ttl),
        _expires = now + ttl,
        _releaseSent = false,
        _releasing = false,
        _lost = false,
        _since = now
    }
    local l = lua_setmetatable(lease, leaseMt)
    return l
end
return ____exports
