-- Generated from src/resty/dlock/gateway/rate.ts by TypeScriptToLua: edit that file, not this one.
-- Gateway mode "rate": `rate` requests per `period` ms per key, `burst` at
-- once, across every nginx sharing the Redis (core/rate.lua: GCRA on Redis'
-- clock, one script call per request, several limits decided together).
-- A refused request gets reject_status (429) with Retry-After; every answer
-- the guard decides carries the IETF httpapi RateLimit fields
-- (draft-ietf-httpapi-ratelimit-headers-11):
--   RateLimit-Policy: "10-per-1s";q=10;w=1, "1000-per-1h";q=1000;w=3600
--   RateLimit: "10-per-1s";r=4;t=1, "1000-per-1h";r=990;t=4
-- q the quota (rate) per window w (period, whole seconds only: the draft has no
-- finer unit, so w is left out otherwise), r what remains now under the
-- policy, t the effective window: the seconds until the next unit comes back,
-- within which no more than r can be used (ratefields.lua). A burst other than
-- the rate is said as dlock-burst (the draft asks for vendor-prefixed parameters).
--
-- on_error = "local" with `fleet`: while Redis cannot decide, each nginx
-- enforces its share of the limits from its shared dict (rate_local.lua).
--
-- A rate guard holds nothing while the request runs: nothing to release in
-- log(). Its options are checked here, not in gateway.lua.
local _M = {}
local check = require("resty.dlock.core.check")
local core = require("resty.dlock.core.rate")
local backend = require("resty.dlock.redis.backend")
local shared = require("resty.dlock.gateway.common")
local digest = require("resty.dlock.gateway.digest")
local fallback = require("resty.dlock.gateway.rate_local")
local ratefields = require("resty.dlock.gateway.ratefields")
local giveback = require("resty.dlock.gateway.giveback")
local request = require("resty.dlock.core.request")
local stats = require("resty.dlock.gateway.stats")
local breaker = require("resty.dlock.gateway.breaker")
local seen = require("resty.dlock.gateway.seen")
local decide = core.decide
local str_format = string.format
local hashed = digest.key
local str_sub = string.sub
local lua_setmetatable = setmetatable
local incr = stats.incr
local request_anchor = request.anchor
local seen_find = seen.find
local seen_put = seen.put
local function onRedisFailure(g, k, an)
    if g._shares ~= nil then
        fallback.degraded(g)
        local reply = fallback.decide(g._dict, k, g._shares, g._cost)
        if g._policy ~= nil then
            ratefields.fields(g, reply, g._shareIv, g._shareCap)
        end
        if reply[1] == 0 then
            incr(g._dict, g.name, "local_rejected")
            -- Refused without Redis: earlier guards keep what they took (common.refuseDown).
            shared.refuseDown(g._headers, g._rejectStatus, reply[2])
        end
        incr(g._dict, g.name, "local_admitted")
        if an ~= nil then
            an.chargedHere = k
        end
        return
    end
    if not breaker.failedOpen(g) then
        shared.refuseDown(g._headers, g._errorStatus, nil)
    end
end
--- Mark the request decided for by this guard: its mark, or false when it was
-- decided for already (an internal redirect brought it back), nil when it
-- cannot be told apart from later requests.
local function mark(g)
    -- One look at the request (its anchor: address, ngx.ctx and that table's slot), not one for
    -- the lookup and another for the record: the first pass of every request needs both.
    local an = request_anchor()
    if an == nil then
        return nil
    end
    if seen_find(g._seen, an.id) ~= nil then
        return false
    end
    if an.ref < 0 then
        return nil
    end
    seen_put(g._seen, an)
    return an
end
local function access(g)
    if not shared.decides(g.name) then
        return
    end
    local an = mark(g)
    if an == false then
        return
    end
    local raw = shared.keyOf(g, g._key)
    if raw == nil then
        return
    end
    -- Client-controlled: hashed, so any size and any bytes map to a bounded key.
    local rkey = hashed(g._prefix, raw)
    if g._shares ~= nil and (breaker.breakerOpen(g._dict, g.name) or not fallback.probe(g)) or g._shares == nil and breaker.skips(g._dict, g.name, g._probeFor) then
        incr(g._dict, g.name, "short_circuited")
        onRedisFailure(g, str_sub(rkey, #g._prefix + 1), an)
        return
    end
    local reply, err = decide(g._conf, rkey, g._limits, "1", g._cost)
    if reply == nil then
        breaker.redisFailed(g, err)
        onRedisFailure(g, str_sub(rkey, #g._prefix + 1), an)
        return
    end
    breaker.success(g._dict, g.name)
    if g._policy ~= nil then
        ratefields.fields(g, reply, g._iv, g._cap)
    end
    if reply[1] == 0 then
        incr(g._dict, g.name, "rejected")
        -- Redis refused it: earlier guards give back what they took.
        shared.refuse(g._headers, g._rejectStatus, reply[2])
        return
    end
    incr(g._dict, g.name, "acquired")
    -- Given back should a later guard refuse the request (giveback.lua).
    if an ~= nil then
        an.charged = rkey
    end
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
        return
    end
}
guardMt.__index = guardMethods
--- Validate the options (already checked against gateway.new's names) and build the guard.
function _M.create(o, name)
    local ls, lerr = core.parse(o)
    if ls == nil then
        return nil, lerr
    end
    local cost, cerr = core.costOf(o.cost == nil and 1 or o.cost, ls)
    if cost == nil then
        return nil, cerr
    end
    local onError = o.on_error
    local shares
    if onError == "local" then
        local fleet, ferr = shared.fleet(o.fleet, "limit")
        if fleet == nil then
            return nil, ferr
        end
        shares = fallback.shares(ls, fleet, name, cost)
    elseif o.fleet ~= nil then
        return check.fail("fleet applies with on_error = \"local\" only", o.fleet)
    end
    local conf = o.redis
    local refused = backend.refuses(conf, "rate")
    if refused ~= nil then
        return nil, refused
    end
    local key = o.key
    local dict = o.dict
    local prefix = o.prefix == nil and "dlock:gw:" .. name .. ":" or o.prefix
    local rejectStatus = o.reject_status == nil and 429 or o.reject_status
    local missingStatus = o.missing_status
    local onMissing = o.on_missing
    local headersOn = o.ratelimit_headers
    local items = {}
    local ownItems = {}
    local quoted = {}
    local iv = {}
    local cap = {}
    for i = 1, #ls.list do
        local l = ls.list[i]
        items[i] = str_format("\"%s\";r=", l.name)
        ownItems[i] = str_format("\"%s:%s\";r=", name, l.name)
        quoted[i] = str_format("\"%s\"", l.name)
        iv[i] = l.period / l.rate
        cap[i] = l.burst * l.period / l.rate
    end
    local shareIv
    local shareCap
    if shares ~= nil then
        shareIv = {}
        shareCap = {}
        for i = 1, #shares do
            shareIv[i] = shares[i].interval / 1000
            shareCap[i] = shares[i].cap / 1000
        end
    end
    local g = {
        name = name,
        mode = "rate",
        _dict = dict,
        _key = key,
        _conf = conf,
        _prefix = prefix,
        _limits = ls,
        _cost = cost,
        _policy = headersOn and ratefields.policyOf(ls, "") or nil,
        _items = items,
        _parts = {},
        _ownPolicy = headersOn and ratefields.policyOf(ls, name .. ":") or nil,
        _ownItems = ownItems,
        _quoted = quoted,
        _iv = iv,
        _cap = cap,
        _shareIv = shareIv,
        _shareCap = shareCap,
        _missingWhat = shared.missingWhat(onMissing, missingStatus),
        _errorWhat = shared.errorWhat(onError, o.error_status),
        _onMissing = onMissing,
        _onError = onError,
        _shares = shares,
        _probeFor = breaker.probeWindow(conf),
        _rejectStatus = rejectStatus,
        _missingStatus = missingStatus,
        _errorStatus = o.error_status,
        _headers = o.headers,
        _breakerFailures = o.breaker_failures,
        _breakerCooldown = o.breaker_cooldown,
        _seen = seen.create()
    }
    giveback.register(g)
    stats.prepare(dict, name)
    return lua_setmetatable(g, guardMt), nil
end
return _M
