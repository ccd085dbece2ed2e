--[[ Generated with https://github.com/TypeScriptToLua/TypeScriptToLua ]]
local ____exports = {}
local check = require("resty.dlock.check")
local gateway = require("resty.dlock.gateway")
local ledger = require("resty.dlock.ledger")
local stats = require("resty.dlock.stats")
____exports._VERSION = "0.1.0"
local cjson = require("cjson.safe")
local OPTIONS = check.set("dicts")
--- Dict names to report: those of the guards, plus opts.dicts (default { "dlock" } when there are no guards).
local function dictNames(opts)
    local o, err = check.options("status options", opts, OPTIONS)
    if o == nil then
        return nil, err
    end
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
--- The numbers serve() and metrics() show. Tokens are left out: they are capabilities.
function ____exports.report(opts)
    local names, err = dictNames(opts)
    if names == nil then
        return nil, err
    end
    local held = {}
    for ____, name in ipairs(names) do
        for ____, l in ipairs(ledger.held(ngx.shared[name])) do
            held[#held + 1] = {
                dict = name,
                key = l.key,
                pid = l.pid,
                ttl = l.ttl,
                expires_at = l.expires_at
            }
        end
    end
    local guards = {}
    for ____, g in ipairs(gateway.guards()) do
        local row = {}
        row.mode = g.mode
        row.breaker = stats.breakerState(g.dict, g.name)
        for ____, ev in ipairs(stats.EVENTS) do
            row[ev] = stats.count(g.dict, g.name, ev)
        end
        guards[g.name] = row
    end
    return {dicts = names, held = held, guards = guards}, nil
end
--- content_by_lua: the report as JSON.
function ____exports.serve(opts)
    local r, err = ____exports.report(opts)
    ngx.header["Content-Type"] = "application/json"
    if r == nil then
        ngx.status = 500
        ngx.say((cjson.encode({error = err})) or "{}")
        return
    end
    local body, jerr = cjson.encode({held = #r.held > 0 and r.held or cjson.empty_array, guards = r.guards})
    ngx.say(body or ("{\"error\":\"" .. tostring(jerr)) .. "\"}")
end
local function label(s)
    local escaped = string.gsub(
        s,
        "[\\\"\n]",
        function(c) return c == "\n" and "\\n" or "\\" .. c end
    )
    return escaped
end
--- content_by_lua: the report in the Prometheus text format (version 0.0.4).
function ____exports.metrics(opts)
    local r, err = ____exports.report(opts)
    if r == nil then
        ngx.status = 500
        ngx.say("# ", err)
        return
    end
    local lines = {"# HELP dlock_guard_events_total Gateway guard outcomes since this nginx started.", "# TYPE dlock_guard_events_total counter"}
    local breakers = {"# HELP dlock_guard_breaker_open 1 while the guard's Redis circuit breaker is open.", "# TYPE dlock_guard_breaker_open gauge"}
    for gname, row in pairs(r.guards) do
        local name = label(gname)
        for ____, ev in ipairs(stats.EVENTS) do
            lines[#lines + 1] = (((((("dlock_guard_events_total{guard=\"" .. name) .. "\",mode=\"") .. tostring(row.mode)) .. "\",event=\"") .. ev) .. "\"} ") .. tostring(row[ev])
        end
        breakers[#breakers + 1] = (("dlock_guard_breaker_open{guard=\"" .. name) .. "\"} ") .. tostring(row.breaker == "open" and 1 or 0)
    end
    for ____, b in ipairs(breakers) do
        lines[#lines + 1] = b
    end
    lines[#lines + 1] = "# HELP dlock_held_leases Leases this nginx instance holds now."
    lines[#lines + 1] = "# TYPE dlock_held_leases gauge"
    for ____, name in ipairs(r.dicts) do
        local n = 0
        for ____, l in ipairs(r.held) do
            if l.dict == name then
                n = n + 1
            end
        end
        lines[#lines + 1] = (("dlock_held_leases{dict=\"" .. label(name)) .. "\"} ") .. tostring(n)
    end
    ngx.header["Content-Type"] = "text/plain; version=0.0.4"
    ngx.say(table.concat(lines, "\n"))
end
return ____exports
