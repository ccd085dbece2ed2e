--[[ Generated with https://github.com/TypeScriptToLua/TypeScriptToLua ]]
local ____exports = {}
local label, topologyLines
local check = require("resty.dlock.check")
local eviction = require("resty.dlock.eviction")
local gateway = require("resty.dlock.gateway")
local ledger = require("resty.dlock.ledger")
local backend = require("resty.dlock.backend")
local redis = require("resty.dlock.redis")
local sentinel = require("resty.dlock.sentinel")
local stats = require("resty.dlock.stats")
function label(s)
    local escaped = string.gsub(
        s,
        "[\\\"\n]",
        function(c) return c == "\n" and "\\n" or "\\" .. c end
    )
    return escaped
end
function topologyLines(lines)
    local info = {"# HELP dlock_redis_topology_info How each Redis endpoint is reached (always 1).", "# TYPE dlock_redis_topology_info gauge"}
    local redirects = {"# HELP dlock_redis_cluster_redirects_total MOVED and ASK redirections followed (all workers).", "# TYPE dlock_redis_cluster_redirects_total counter"}
    local ages = {"# HELP dlock_redis_cluster_slot_map_age_seconds Seconds since a worker last read the cluster's slot map.", "# TYPE dlock_redis_cluster_slot_map_age_seconds gauge"}
    local failures = {"# HELP dlock_redis_redlock_node_failures_total Calls to a Redlock master that failed (all workers).", "# TYPE dlock_redis_redlock_node_failures_total counter"}
    for ep, conf in pairs(redis.endpoints()) do
        local e = label(ep)
        info[#info + 1] = ((((("dlock_redis_topology_info{endpoint=\"" .. e) .. "\",kind=\"") .. conf.topology) .. "\",tls=\"") .. (conf.ssl and "on" or "off")) .. "\"} 1"
        local kind, counts = backend.shared(conf)
        if kind == "cluster" then
            redirects[#redirects + 1] = (("dlock_redis_cluster_redirects_total{endpoint=\"" .. e) .. "\"} ") .. tostring(counts.redirects)
            local age = counts.slot_map_age
            if age ~= nil then
                ages[#ages + 1] = (("dlock_redis_cluster_slot_map_age_seconds{endpoint=\"" .. e) .. "\"} ") .. string.format("%.3f", age)
            end
        elseif kind == "redlock" then
            for node, n in pairs(counts) do
                failures[#failures + 1] = (((("dlock_redis_redlock_node_failures_total{endpoint=\"" .. e) .. "\",node=\"") .. label(node)) .. "\"} ") .. tostring(n)
            end
        end
    end
    for ____, group in ipairs({info, redirects, ages, failures}) do
        for ____, l in ipairs(group) do
            lines[#lines + 1] = l
        end
    end
end
do
    local ____version = require("resty.dlock.version")
    ____exports._VERSION = ____version.VERSION
end
--- Leases serve() and report() list unless asked for another number.
____exports.DEFAULT_LIMIT = 100
--- The most a request may ask for: listing walks the dict, a bound keeps the page cheap.
____exports.MAX_LIMIT = 10000
local cjson = require("cjson.safe")
local REPORT_OPTIONS = check.set("dicts", "limit")
local METRICS_OPTIONS = check.set("dicts")
local ADVICE = "set maxmemory-policy noeviction, or give locks a Redis of their own"
--- Dict names to report: those of the guards, plus o.dicts (default { "dlock" } when there are no guards).
local function dictNames(o)
    local names = {}
    local seen = {}
    local function add(n)
        if not (seen[n] ~= nil) then
            seen[n] = true
            names[#names + 1] = n
        end
    end
    local extra = o.dicts
    if extra ~= nil then
        if type(extra) ~= "table" then
            return check.fail("dicts must be a list of lua_shared_dict names", extra)
        end
        for ____, n in ipairs(extra) do
            if type(n) ~= "string" or ngx.shared[n] == nil then
                return check.fail("dicts must name lua_shared_dicts", n)
            end
            add(n)
        end
    end
    for ____, g in ipairs(gateway.guards()) do
        for name, d in pairs(ngx.shared) do
            if d == g.dict then
                add(name)
            end
        end
    end
    if #names == 0 and ngx.shared.dlock ~= nil then
        add("dlock")
    end
    return names, nil
end
local function checkLimit(v)
    return check.integer(
        "limit",
        v,
        0,
        ____exports.MAX_LIMIT,
        "an integer from 0 to " .. tostring(____exports.MAX_LIMIT)
    )
end
--- Append at most `max` leases of one dict to `out` (tokens left out); true when it holds more.
local function listHeld(name, dict, max, out)
    if max == 0 then
        local one = ledger.list(dict, 1)
        return #one > 0
    end
    local found, more = ledger.list(dict, max)
    for ____, l in ipairs(found) do
        out[#out + 1] = {
            dict = name,
            key = l.key,
            pid = l.pid,
            ttl = l.ttl,
            expires_at = l.expires_at
        }
    end
    return more
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
--- What serve() and metrics() both show: guards, unrecorded leases per dict, Redis eviction. No held leases.
local function counters(names)
    local dicts = {}
    local unrecorded = {}
    local shortfalls = {}
    for ____, name in ipairs(names) do
        local d = ngx.shared[name]
        dicts[#dicts + 1] = d
        unrecorded[name] = ledger.unrecorded(d)
        local n = d:get(backend.SHORTFALLS)
        shortfalls[name] = type(n) == "number" and n or 0
    end
    local ev = {}
    for ep, e in pairs(eviction.evictions(dicts)) do
        ev[ep] = evictionView(e)
    end
    local topology = {}
    for ep, conf in pairs(redis.endpoints()) do
        local v = {}
        topology[ep] = v
        v.kind = conf.topology
        v.tls = conf.ssl
        v.tls_verify = conf.ssl_verify
        v.replicas = conf.replicas
        if conf.sentinel ~= nil then
            local m = sentinel.last(conf.pool)
            v.master = m == nil and "unknown" or (m.host .. ":") .. tostring(m.port)
        end
        local more = backend.describe(conf)
        if more ~= nil then
            for k, x in pairs(more) do
                v[k] = x
            end
        end
        local kind, counts = backend.shared(conf)
        if kind == "cluster" then
            v.redirects = counts.redirects
        end
    end
    local guards = {}
    for ____, g in ipairs(gateway.guards()) do
        local row = {}
        row.mode = g.mode
        row.breaker = stats.breakerState(g.dict, g.name)
        row.in_flight = stats.gauge(g.dict, g.name, "in_flight")
        for ____, e in ipairs(stats.EVENTS) do
            row[e] = stats.count(g.dict, g.name, e)
        end
        guards[g.name] = row
    end
    return {
        dicts = names,
        held = {},
        held_listed = 0,
        held_limit = 0,
        held_truncated = false,
        unrecorded = unrecorded,
        shortfalls = shortfalls,
        redis = ev,
        topology = topology,
        guards = guards
    }
end
--- The numbers serve() shows, with at most opts.limit (default 100) held leases.
-- Tokens are left out: they are capabilities.
function ____exports.report(opts)
    local o, oerr = check.options("status options", opts, REPORT_OPTIONS)
    if o == nil then
        return nil, oerr
    end
    local limit = ____exports.DEFAULT_LIMIT
    if o.limit ~= nil then
        local n, err = checkLimit(o.limit)
        if n == nil then
            return nil, err
        end
        limit = n
    end
    local names, err = dictNames(o)
    if names == nil then
        return nil, err
    end
    local r = counters(names)
    local truncated = false
    for ____, name in ipairs(names) do
        if listHeld(name, ngx.shared[name], limit - #r.held, r.held) then
            truncated = true
        end
    end
    r.held_listed = #r.held
    r.held_limit = limit
    r.held_truncated = truncated
    return r, nil
end
--- One "name":value member of a JSON object (names are ours: plain identifiers).
local function member(name, value)
    local v = cjson.encode(value)
    if v == nil then
        return nil
    end
    return (("\"" .. name) .. "\":") .. v
end
--- The report as a JSON object, its members in a fixed order.
local function encode(r)
    local dicts = {}
    for ____, name in ipairs(r.dicts) do
        local d = {}
        d.unrecorded_leases = r.unrecorded[name]
        d.replica_shortfalls = r.shortfalls[name]
        dicts[name] = d
    end
    local parts = {#r.held > 0 and (member("held", r.held) or "") or "\"held\":[]"}
    local rest = {
        {"held_listed", r.held_listed},
        {"held_limit", r.held_limit},
        {"held_truncated", r.held_truncated},
        {"dicts", dicts},
        {"redis", r.redis},
        {"topology", r.topology},
        {"guards", r.guards}
    }
    for ____, ____value in ipairs(rest) do
        local name = ____value[1]
        local value = ____value[2]
        parts[#parts + 1] = member(name, value) or ""
    end
    for ____, p in ipairs(parts) do
        if p == "" then
            return nil, "dlock: status: cannot encode the report as JSON"
        end
    end
    return ("{" .. table.concat(parts, ",")) .. "}", nil
end
local function fail(status, err)
    ngx.status = status
    ngx.header["Content-Type"] = "application/json"
    ngx.say((cjson.encode({error = err})) or "{}")
end
--- content_by_lua: the report as JSON; ?limit=N lists up to N held leases (instead of opts.limit or 100).
function ____exports.serve(opts)
    local o = opts
    local arg = ngx.var.arg_limit
    if arg ~= nil then
        local n, lerr = checkLimit(tonumber(arg) or arg)
        if n == nil then
            fail(400, lerr)
            return
        end
        if opts == nil or type(opts) == "table" then
            local copy = {}
            if opts ~= nil then
                for k, v in pairs(opts) do
                    copy[k] = v
                end
            end
            copy.limit = n
            o = copy
        end
    end
    local r, err = ____exports.report(o)
    if r == nil then
        fail(500, err)
        return
    end
    local body, jerr = encode(r)
    if body == nil then
        fail(500, jerr)
        return
    end
    ngx.header["Content-Type"] = "application/json"
    ngx.say(body)
end
--- The metrics in the Prometheus text format (version 0.0.4), or nil and an error.
-- Reads a fixed number of dict keys per guard, dict and Redis endpoint; never the leases.
function ____exports.metrics_text(opts)
    local o, oerr = check.options("metrics options", opts, METRICS_OPTIONS)
    if o == nil then
        return nil, oerr
    end
    local names, err = dictNames(o)
    if names == nil then
        return nil, err
    end
    local r = counters(names)
    local lines = {"# HELP dlock_guard_events_total Gateway guard outcomes since this nginx started.", "# TYPE dlock_guard_events_total counter"}
    local breakers = {"# HELP dlock_guard_breaker_open 1 while the guard's Redis circuit breaker is open.", "# TYPE dlock_guard_breaker_open gauge"}
    local inFlight = {"# HELP dlock_guard_in_flight Requests the guard let through that have not ended yet.", "# TYPE dlock_guard_in_flight gauge"}
    for gname, row in pairs(r.guards) do
        local name = label(gname)
        for ____, ev in ipairs(stats.EVENTS) do
            lines[#lines + 1] = (((((("dlock_guard_events_total{guard=\"" .. name) .. "\",mode=\"") .. tostring(row.mode)) .. "\",event=\"") .. ev) .. "\"} ") .. tostring(row[ev])
        end
        breakers[#breakers + 1] = (("dlock_guard_breaker_open{guard=\"" .. name) .. "\"} ") .. tostring(row.breaker == "open" and 1 or 0)
        inFlight[#inFlight + 1] = (("dlock_guard_in_flight{guard=\"" .. name) .. "\"} ") .. tostring(row.in_flight)
    end
    for ____, l in ipairs(breakers) do
        lines[#lines + 1] = l
    end
    for ____, l in ipairs(inFlight) do
        lines[#lines + 1] = l
    end
    lines[#lines + 1] = "# HELP dlock_unrecorded_leases_total Leases this nginx could not record in the shared dict (it was full)."
    lines[#lines + 1] = "# TYPE dlock_unrecorded_leases_total counter"
    for ____, name in ipairs(r.dicts) do
        lines[#lines + 1] = (("dlock_unrecorded_leases_total{dict=\"" .. label(name)) .. "\"} ") .. tostring(r.unrecorded[name])
    end
    lines[#lines + 1] = "# HELP dlock_replica_shortfalls_total Writes that fewer replicas than redis.replicas acknowledged in time."
    lines[#lines + 1] = "# TYPE dlock_replica_shortfalls_total counter"
    for ____, name in ipairs(r.dicts) do
        lines[#lines + 1] = (("dlock_replica_shortfalls_total{dict=\"" .. label(name)) .. "\"} ") .. tostring(r.shortfalls[name])
    end
    lines[#lines + 1] = "# HELP dlock_redis_can_evict_locks 1 when the Redis has maxmemory set and a policy that evicts keys " .. "with a ttl (lock keys); endpoints whose settings could not be read are left out."
    lines[#lines + 1] = "# TYPE dlock_redis_can_evict_locks gauge"
    for ep, v in pairs(r.redis) do
        if v.checked == true then
            lines[#lines + 1] = (((("dlock_redis_can_evict_locks{endpoint=\"" .. label(ep)) .. "\",policy=\"") .. label(v.maxmemory_policy)) .. "\"} ") .. tostring(v.can_evict_locks == true and 1 or 0)
        end
    end
    topologyLines(lines)
    return table.concat(lines, "\n"), nil
end
--- content_by_lua: metrics_text() as the response.
function ____exports.metrics(opts)
    local text, err = ____exports.metrics_text(opts)
    if text == nil then
        ngx.status = 500
        ngx.say("# ", err)
        return
    end
    ngx.header["Content-Type"] = "text/plain; version=0.0.4"
    ngx.say(text)
end
return ____exports
