-- Generated from src/resty/dlock/status/common.ts by TypeScriptToLua: edit that file, not this one.
-- What the status page (JSON) and the metrics (Prometheus text) both read: the
-- dicts to report, and per dict, guard, factory and Redis endpoint a fixed
-- number of dict keys. Never the held leases themselves (json.lua lists a
-- bounded number of those), which a busy gateway has tens of thousands of.
local _M = {}
local backend = require("resty.dlock.redis.backend")
local check = require("resty.dlock.core.check")
local eviction = require("resty.dlock.redis.eviction")
local registry = require("resty.dlock.gateway.registry")
local ledger = require("resty.dlock.core.ledger")
local meter = require("resty.dlock.core.meter")
local meters = require("resty.dlock.status.meters")
local redis = require("resty.dlock.redis.client")
local sentinel = require("resty.dlock.redis.sentinel")
local stats = require("resty.dlock.gateway.stats")
local breaker = require("resty.dlock.gateway.breaker")
local lua_tostring = tostring
local lua_pairs = pairs
local lua_ipairs = ipairs
local ngx_get_phase = ngx.get_phase
local ngx_shared = ngx.shared
local lua_type = type
local ADVICE = "set maxmemory-policy noeviction, or give locks a Redis of their own"
--- Phases in which a handler may answer the request (ngx.say, ngx.var).
local ANSWERING = check.set("rewrite", "server_rewrite", "access", "content")
--- nil in a phase that can answer a request, else the error `fn` returns there.
function _M.phaseError(fn)
    local phase = ngx_get_phase()
    if ANSWERING[phase] ~= nil then
        return nil
    end
    return "dlock: status." .. fn .. " answers a request: call it from content_by_lua, not the " .. phase .. " phase"
end
--- Dict names to report: those of the guards and factories of this worker, plus o.dicts (default { "dlock" }).
function _M.dictNames(o)
    local names = {}
    local seen = {}
    local function add(n)
        if seen[n] == nil then
            seen[n] = true
            names[#names + 1] = n
        end
    end
    local extra = o.dicts
    if extra ~= nil then
        if lua_type(extra) ~= "table" then
            return check.fail("dicts must be a list of lua_shared_dict names", extra)
        end
        if not check.isList(extra) then
            return check.fail("dicts must be a list of lua_shared_dict names", extra)
        end
        for _, n in lua_ipairs(extra) do
            if lua_type(n) ~= "string" or ngx_shared[n] == nil then
                return check.fail("dicts must name lua_shared_dicts", n)
            end
            add(n)
        end
    end
    local mine = {}
    for _, g in lua_ipairs(registry.all()) do
        mine[#mine + 1] = g._dict
    end
    for _, d in lua_ipairs(meter.known()) do
        mine[#mine + 1] = d
    end
    for _, d in lua_ipairs(mine) do
        for name, sd in lua_pairs(ngx_shared) do
            if sd == d then
                add(name)
            end
        end
    end
    if #names == 0 and ngx_shared.dlock ~= nil then
        add("dlock")
    end
    return names, nil
end
local function evictionView(e)
    local v = {}
    v.checked = e.checked
    v.checked_at = e.checkedAt
    if not e.checked then
        v.reason = e.why
        return v
    end
    v.maxmemory_policy = e.policy
    v.maxmemory = e.maxmemory
    v.policy_evicts = e.policyEvicts
    v.can_evict_locks = e.canEvict
    if e.policyEvicts then
        v.advice = ADVICE
    end
    return v
end
local function addReading(into, r)
    into.held = into.held + r.held
    into.acquired = into.acquired + r.acquired
    into.busy = into.busy + r.busy
    into.timeout = into.timeout + r.timeout
    into.error = into.error + r.error
    into.lost = into.lost + r.lost
    into.waitSum = into.waitSum + r.waitSum
    into.holdSum = into.holdSum + r.holdSum
    for i = 1, #r.wait do
        into.wait[i] = into.wait[i] + r.wait[i]
    end
    for i = 1, #r.hold do
        into.hold[i] = into.hold[i] + r.hold[i]
    end
end
--- Every factory counted in the dicts (by any worker), summed by name.
local function factories(dicts)
    local byName = {}
    local order = {}
    local held = 0
    for _, d in lua_ipairs(dicts) do
        for _, name in lua_ipairs(meters.names(d)) do
            local r = meters.read(d, name)
            held = held + r.held
            local had = byName[name]
            if had == nil then
                byName[name] = r
                order[#order + 1] = name
            else
                addReading(had, r)
            end
        end
    end
    return byName, order, held
end
--- How each endpoint is reached: this worker's view (a Sentinel master is this worker's latest answer).
local function topologies()
    local topology = {}
    for ep, conf in lua_pairs(redis.endpoints()) do
        local v = {}
        topology[ep] = v
        v.kind = conf.topology
        v.tls = conf.ssl
        v.tls_verify = conf.ssl_verify
        v.replicas = conf.replicas
        if conf.sentinel ~= nil then
            local m = sentinel.last(conf.pool)
            v.master = m == nil and "unknown" or m.host .. ":" .. lua_tostring(m.port)
        end
        local more = backend.describe(conf)
        if more ~= nil then
            for k, x in lua_pairs(more) do
                v[k] = x
            end
        end
        local kind, counts = backend.shared(conf)
        if kind == "cluster" then
            -- All workers' redirects, not only this one's.
            v.redirects = counts.redirects
        end
    end
    return topology
end
--- What serve() and metrics() both show: guards, factories, unrecorded leases per dict, Redis. No held leases.
function _M.counters(names)
    -- This worker's counts are in Lua until their flush: add them before reading.
    meter.flush()
    local dicts = {}
    local unrecorded = {}
    local shortfalls = {}
    for _, name in lua_ipairs(names) do
        local d = ngx_shared[name]
        dicts[#dicts + 1] = d
        unrecorded[name] = ledger.unrecorded(d)
        local n = d:get(backend.SHORTFALLS)
        shortfalls[name] = lua_type(n) == "number" and n or 0
    end
    local ev = {}
    for ep, e in lua_pairs(eviction.evictions(dicts)) do
        ev[ep] = evictionView(e)
    end
    local guards = {}
    for _, g in lua_ipairs(registry.all()) do
        local row = {}
        row.mode = g.mode
        local state = breaker.breakerState(g._dict, g.name)
        row.breaker = state
        -- on_error = "local": deciding on this nginx's share until the breaker closes again (a half-open one waits for its probe).
        row.degraded = state ~= "closed" and g._onError == "local"
        row.in_flight = stats.gauge(g._dict, g.name, "in_flight")
        for _, e in lua_ipairs(stats.EVENTS) do
            row[e] = stats.count(g._dict, g.name, e)
        end
        guards[g.name] = row
    end
    local byName, order, heldTotal = factories(dicts)
    return {
        dicts = names,
        held = {},
        held_listed = 0,
        held_limit = 0,
        held_truncated = false,
        held_total = heldTotal,
        unrecorded = unrecorded,
        shortfalls = shortfalls,
        redis = ev,
        topology = topologies(),
        guards = guards,
        factories = byName,
        factoryNames = order
    }
end
return _M
