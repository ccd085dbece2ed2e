-- Generated from src/resty/dlock/status/exposition.ts by TypeScriptToLua: edit that file, not this one.
-- GET /dlock/metrics: the Prometheus text format (version 0.0.4). A scrape reads
-- a fixed number of dict keys per guard, factory, dict and Redis endpoint; it
-- never walks the held leases.
local _M = {}
local backend = require("resty.dlock.redis.backend")
local check = require("resty.dlock.core.check")
local meter = require("resty.dlock.core.meter")
local redis = require("resty.dlock.redis.client")
local stats = require("resty.dlock.gateway.stats")
local common = require("resty.dlock.status.common")
local lua_pairs = pairs
local lua_ipairs = ipairs
local ngx_header = ngx.header
local ngx_say = ngx.say
local ngx = ngx
local str_gsub = string.gsub
local str_format = string.format
local table_concat = table.concat
local lua_tostring = tostring
local METRICS_OPTIONS = check.set("dicts")
local function label(s)
    local escaped = str_gsub(
        s,
        "[\\\"\n]",
        function(c) return c == "\n" and "\\n" or "\\" .. c end
    )
    return escaped
end
local function header(lines, name, kind, help)
    lines[#lines + 1] = "# HELP " .. name .. " " .. help
    lines[#lines + 1] = "# TYPE " .. name .. " " .. kind
end
--- A histogram's series: cumulative buckets (stored apart), then _sum and _count.
local function histogram(lines, name, labels, bounds, counts, sum)
    local total = 0
    for i = 1, #counts do
        total = total + counts[i]
        local le = i <= #bounds and lua_tostring(bounds[i]) or "+Inf"
        lines[#lines + 1] = name .. "_bucket{" .. labels .. ",le=\"" .. le .. "\"} " .. lua_tostring(total)
    end
    lines[#lines + 1] = name .. "_sum{" .. labels .. "} " .. str_format("%.6f", sum)
    lines[#lines + 1] = name .. "_count{" .. labels .. "} " .. lua_tostring(total)
end
--- The core API per factory name (guards' factories carry the guard's name).
local function factoryLines(lines, r)
    header(lines, "dlock_acquires_total", "counter", "Acquire calls of locks and semaphores by outcome (acquired, busy, timeout, error) since this nginx started.")
    for _, name in lua_ipairs(r.factoryNames) do
        local f = r.factories[name]
        local l = "dlock_acquires_total{factory=\"" .. label(name) .. "\",outcome=\""
        lines[#lines + 1] = l .. "acquired\"} " .. lua_tostring(f.acquired)
        lines[#lines + 1] = l .. "busy\"} " .. lua_tostring(f.busy)
        lines[#lines + 1] = l .. "timeout\"} " .. lua_tostring(f.timeout)
        lines[#lines + 1] = l .. "error\"} " .. lua_tostring(f.error)
    end
    header(lines, "dlock_leases_lost_total", "counter", "Leases found gone before their holder released them (renewal failed, or the release found the key not ours).")
    for _, name in lua_ipairs(r.factoryNames) do
        lines[#lines + 1] = "dlock_leases_lost_total{factory=\"" .. label(name) .. "\"} " .. lua_tostring(r.factories[name].lost)
    end
    header(lines, "dlock_held_leases", "gauge", "Leases this nginx holds now (all workers).")
    for _, name in lua_ipairs(r.factoryNames) do
        lines[#lines + 1] = "dlock_held_leases{factory=\"" .. label(name) .. "\"} " .. lua_tostring(r.factories[name].held)
    end
    header(lines, "dlock_acquire_wait_seconds", "histogram", "Time from an acquire call to its lease, for acquires that got one.")
    for _, name in lua_ipairs(r.factoryNames) do
        local f = r.factories[name]
        histogram(
            lines,
            "dlock_acquire_wait_seconds",
            "factory=\"" .. label(name) .. "\"",
            meter.WAIT_BOUNDS,
            f.wait,
            f.waitSum
        )
    end
    header(lines, "dlock_lease_hold_seconds", "histogram", "Time from taking a lease to its confirmed release.")
    for _, name in lua_ipairs(r.factoryNames) do
        local f = r.factories[name]
        histogram(
            lines,
            "dlock_lease_hold_seconds",
            "factory=\"" .. label(name) .. "\"",
            meter.HOLD_BOUNDS,
            f.hold,
            f.holdSum
        )
    end
end
--- Per Redis endpoint: how it is reached; Cluster redirects and slot map age; Redlock failures per master.
local function topologyLines(lines)
    local info = {}
    header(info, "dlock_redis_topology_info", "gauge", "How each Redis endpoint is reached (always 1).")
    local redirects = {}
    header(redirects, "dlock_redis_cluster_redirects_total", "counter", "MOVED and ASK redirections followed (all workers).")
    local ages = {}
    header(ages, "dlock_redis_cluster_slot_map_age_seconds", "gauge", "Seconds since a worker last read the cluster's slot map.")
    local failures = {}
    header(failures, "dlock_redis_redlock_node_failures_total", "counter", "Calls to a Redlock master that failed (all workers).")
    for ep, conf in lua_pairs(redis.endpoints()) do
        local e = label(ep)
        info[#info + 1] = "dlock_redis_topology_info{endpoint=\"" .. e .. "\",kind=\"" .. conf.topology .. "\",tls=\"" .. (conf.ssl and "on" or "off") .. "\"} 1"
        local kind, counts = backend.shared(conf)
        if kind == "cluster" then
            redirects[#redirects + 1] = "dlock_redis_cluster_redirects_total{endpoint=\"" .. e .. "\"} " .. lua_tostring(counts.redirects)
            local age = counts.slot_map_age
            if age ~= nil then
                ages[#ages + 1] = "dlock_redis_cluster_slot_map_age_seconds{endpoint=\"" .. e .. "\"} " .. str_format("%.3f", age)
            end
        elseif kind == "redlock" then
            for node, n in lua_pairs(counts) do
                failures[#failures + 1] = "dlock_redis_redlock_node_failures_total{endpoint=\"" .. e .. "\",node=\"" .. label(node) .. "\"} " .. lua_tostring(n)
            end
        end
    end
    for _, group in lua_ipairs({info, redirects, ages, failures}) do
        for _, l in lua_ipairs(group) do
            lines[#lines + 1] = l
        end
    end
end
--- The metrics in the Prometheus text format (version 0.0.4), or nil and an error.
-- Reads a fixed number of dict keys per guard, factory, dict and Redis endpoint; never the leases.
local function metrics_text(opts)
    local o, oerr = check.options("metrics options", opts, METRICS_OPTIONS)
    if o == nil then
        return nil, oerr
    end
    local names, err = common.dictNames(o)
    if names == nil then
        return nil, err
    end
    local r = common.counters(names)
    local lines = {}
    header(lines, "dlock_guard_events_total", "counter", "Gateway guard outcomes since this nginx started.")
    local breakers = {}
    header(breakers, "dlock_guard_breaker_open", "gauge", "1 while the guard's Redis circuit breaker is open.")
    local degraded = {}
    header(degraded, "dlock_guard_degraded", "gauge", "1 while the guard decides on this nginx's share, Redis unreachable (on_error = \"local\").")
    local inFlight = {}
    header(inFlight, "dlock_guard_in_flight", "gauge", "Requests the guard let through that have not ended yet.")
    for gname, row in lua_pairs(r.guards) do
        local name = label(gname)
        for _, ev in lua_ipairs(stats.EVENTS) do
            lines[#lines + 1] = "dlock_guard_events_total{guard=\"" .. name .. "\",mode=\"" .. lua_tostring(row.mode) .. "\",event=\"" .. ev .. "\"} " .. lua_tostring(row[ev])
        end
        breakers[#breakers + 1] = "dlock_guard_breaker_open{guard=\"" .. name .. "\"} " .. (row.breaker == "open" and "1" or "0")
        degraded[#degraded + 1] = "dlock_guard_degraded{guard=\"" .. name .. "\"} " .. (row.degraded == true and "1" or "0")
        inFlight[#inFlight + 1] = "dlock_guard_in_flight{guard=\"" .. name .. "\"} " .. lua_tostring(row.in_flight)
    end
    for _, l in lua_ipairs(breakers) do
        lines[#lines + 1] = l
    end
    for _, l in lua_ipairs(degraded) do
        lines[#lines + 1] = l
    end
    for _, l in lua_ipairs(inFlight) do
        lines[#lines + 1] = l
    end
    factoryLines(lines, r)
    header(lines, "dlock_unrecorded_leases_total", "counter", "Leases this nginx could not record in the shared dict (it was full).")
    for _, name in lua_ipairs(r.dicts) do
        lines[#lines + 1] = "dlock_unrecorded_leases_total{dict=\"" .. label(name) .. "\"} " .. lua_tostring(r.unrecorded[name])
    end
    header(lines, "dlock_replica_shortfalls_total", "counter", "Writes that fewer replicas than redis.replicas acknowledged in time.")
    for _, name in lua_ipairs(r.dicts) do
        lines[#lines + 1] = "dlock_replica_shortfalls_total{dict=\"" .. label(name) .. "\"} " .. lua_tostring(r.shortfalls[name])
    end
    header(lines, "dlock_redis_can_evict_locks", "gauge", "1 when the Redis has maxmemory set and a policy that evicts keys " .. "with a ttl (lock keys); endpoints whose settings could not be read are left out.")
    for ep, v in lua_pairs(r.redis) do
        if v.checked == true then
            lines[#lines + 1] = "dlock_redis_can_evict_locks{endpoint=\"" .. label(ep) .. "\",policy=\"" .. label(v.maxmemory_policy) .. "\"} " .. (v.can_evict_locks == true and "1" or "0")
        end
    end
    topologyLines(lines)
    return table_concat(lines, "\n"), nil
end
--- content_by_lua: metrics_text() as the response. Outside a request: nil, err.
function _M.metrics(opts)
    local perr = common.phaseError("metrics")
    if perr ~= nil then
        return nil, perr
    end
    local text, err = metrics_text(opts)
    if text == nil then
        ngx.status = 500
        ngx_say("# ", err)
        return true, nil
    end
    ngx_header["Content-Type"] = "text/plain; version=0.0.4"
    ngx_say(text)
    return true, nil
end
-- Exported by name: this module's own uses of them are locals, not lookups in its exports table.
_M.metrics_text = metrics_text
return _M
