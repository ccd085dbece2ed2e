-- Generated from src/resty/dlock/status/json.ts by TypeScriptToLua: edit that file, not this one.
-- The status page: GET /dlock/status answers JSON (?limit=N lists up to N
-- leases, at most MAX_LIMIT). See ../status.lua for its members.
local _M = {}
local check = require("resty.dlock.core.check")
local ledger = require("resty.dlock.core.ledger")
local meters = require("resty.dlock.status.meters")
local common = require("resty.dlock.status.common")
--- Leases serve() and report() list unless asked for another number.
_M.DEFAULT_LIMIT = 100
--- The most a request may ask for: listing walks the dict, a bound keeps the page cheap.
_M.MAX_LIMIT = 10000
local cjson = require("cjson.safe")
local lua_tostring = tostring
local lua_pairs = pairs
local lua_ipairs = ipairs
local ngx_var = ngx.var
local ngx_header = ngx.header
local ngx_say = ngx.say
local ngx_shared = ngx.shared
local ngx = ngx
local table_concat = table.concat
local lua_type = type
local lua_tonumber = tonumber
local str_byte = string.byte
local str_char = string.char
local str_find = string.find
local str_sub = string.sub
local str_gsub = string.gsub
--- A byte of a multi-byte UTF-8 sequence, or U+FFFD; built from bytes (the source is UTF-8 text).
local HIGH = "[" .. str_char(128) .. "-" .. str_char(255) .. "]"
local REPLACEMENT = str_char(239, 191, 189)
local REPORT_OPTIONS = check.set("dicts", "limit")
local function checkLimit(v)
    return check.integer("limit", v, 0, _M.MAX_LIMIT, "an integer from 0 to " .. lua_tostring(_M.MAX_LIMIT))
end
--- The length of the well-formed UTF-8 sequence at byte i of s (RFC 3629), or 0.
local function sequence(s, i)
    local c = str_byte(s, i)
    local len
    local lo = 128
    local hi = 191
    if c < 128 then
        return 1
    end
    if c >= 194 and c <= 223 then
        len = 2
    elseif c >= 224 and c <= 239 then
        len = 3
    elseif c >= 240 and c <= 244 then
        len = 4
    else
        return 0
    end
    -- No overlong forms, no surrogates, nothing past U+10FFFF.
    if c == 224 then
        lo = 160
    elseif c == 237 then
        hi = 159
    elseif c == 240 then
        lo = 144
    elseif c == 244 then
        hi = 143
    end
    for j = 1, len - 1 do
        local b = str_byte(s, i + j)
        if b == nil or b < lo or b > hi then
            return 0
        end
        lo = 128
        hi = 191
    end
    return len
end
--- s as valid UTF-8, as RFC 8259 asks of JSON (cjson passes bytes through): a
-- byte that starts no well-formed sequence becomes U+FFFD. A key is whatever
-- bytes a client or the application used.
local function utf8(s)
    if (str_find(s, HIGH)) == nil then
        return s
    end
    local out = {}
    local i = 1
    while i <= #s do
        local len = sequence(s, i)
        if len > 0 then
            out[#out + 1] = str_sub(s, i, i + len - 1)
            i = i + len
        else
            out[#out + 1] = REPLACEMENT
            i = i + 1
        end
    end
    return table_concat(out)
end
--- Append at most `max` leases of one dict to `out` (tokens left out); true when it holds more.
local function listHeld(name, dict, max, out)
    if max == 0 then
        -- Nothing to list, but say whether anything is held.
        local one, more = ledger.list(dict, 1, meters.keys(dict))
        return #one > 0 or more
    end
    -- Factories' instruments share the dict with the records: look past them too.
    local found, more = ledger.list(dict, max, meters.keys(dict))
    for _, l in lua_ipairs(found) do
        out[#out + 1] = {dict = name, key = l.key, pid = l.pid, ttl = l.ttl, expires_at = l.expires_at}
    end
    return more
end
--- What the counters say, in the shape the README documents: per dict and factory, only the published readings.
local function shown(r)
    local dicts = {}
    for _, name in lua_ipairs(r.dicts) do
        local d = {}
        d.unrecorded_leases = r.unrecorded[name]
        d.replica_shortfalls = r.shortfalls[name]
        dicts[name] = d
    end
    local factories = {}
    for name, f in lua_pairs(r.factories) do
        local row = {}
        row.held = f.held
        row.acquired = f.acquired
        row.busy = f.busy
        row.timeout = f.timeout
        row.error = f.error
        row.lost = f.lost
        factories[name] = row
    end
    return {
        held = r.held,
        held_listed = r.held_listed,
        held_limit = r.held_limit,
        held_truncated = r.held_truncated,
        held_total = r.held_total,
        dicts = dicts,
        redis = r.redis,
        topology = r.topology,
        guards = r.guards,
        factories = factories
    }
end
--- The numbers serve() shows, with at most opts.limit (default 100) held leases.
-- Tokens are left out: they are capabilities.
local function report(opts)
    local o, oerr = check.options("status options", opts, REPORT_OPTIONS)
    if o == nil then
        return nil, oerr
    end
    local limit = _M.DEFAULT_LIMIT
    if o.limit ~= nil then
        local n, err = checkLimit(o.limit)
        if n == nil then
            return nil, err
        end
        limit = n
    end
    local names, err = common.dictNames(o)
    if names == nil then
        return nil, err
    end
    local r = common.counters(names)
    local truncated = false
    for _, name in lua_ipairs(names) do
        if listHeld(name, ngx_shared[name], limit - #r.held, r.held) then
            truncated = true
        end
    end
    r.held_listed = #r.held
    r.held_limit = limit
    r.held_truncated = truncated
    return shown(r), nil
end
--- One "name":value member of a JSON object (names are ours: plain identifiers).
local function member(name, value)
    local v = cjson.encode(value)
    if v == nil then
        return nil
    end
    return "\"" .. name .. "\":" .. v
end
--- The report as a JSON object, its members in a fixed order.
local function encode(r)
    -- Written by hand when empty: Debian's lua-cjson has no empty_array, and an
    -- empty table would become {} (or the member would be dropped). "held" is always a list.
    local held = {}
    for _, l in lua_ipairs(r.held) do
        held[#held + 1] = {
            dict = l.dict,
            key = utf8(l.key),
            pid = l.pid,
            ttl = l.ttl,
            expires_at = l.expires_at
        }
    end
    local parts = {#held > 0 and (member("held", held) or "") or "\"held\":[]"}
    local rest = {
        {"held_listed", r.held_listed},
        {"held_limit", r.held_limit},
        {"held_truncated", r.held_truncated},
        {"held_total", r.held_total},
        {"dicts", r.dicts},
        {"redis", r.redis},
        {"topology", r.topology},
        {"guards", r.guards},
        {"factories", r.factories}
    }
    for _, pair in lua_ipairs(rest) do
        local name = pair[1]
        local value = pair[2]
        local p = member(name, value) or ""
        -- The same for a Cluster's masters before its slot map is read: a list, empty.
        if name == "topology" then
            p = (str_gsub(p, "\"masters\":{}", "\"masters\":[]"))
        end
        parts[#parts + 1] = p
    end
    for _, p in lua_ipairs(parts) do
        if p == "" then
            return nil, "dlock: status: cannot encode the report as JSON"
        end
    end
    return "{" .. table_concat(parts, ",") .. "}", nil
end
local function fail(status, err)
    ngx.status = status
    ngx_header["Content-Type"] = "application/json"
    ngx_say((cjson.encode({error = err})) or "{}")
end
--- content_by_lua: the report as JSON; ?limit=N lists up to N held leases
-- (instead of opts.limit or 100). Outside a request: nil, err.
function _M.serve(opts)
    local perr = common.phaseError("serve")
    if perr ~= nil then
        return nil, perr
    end
    local o = opts
    local arg = ngx_var.arg_limit
    if arg ~= nil then
        local n, lerr = checkLimit(lua_tonumber(arg) or arg)
        if n == nil then
            fail(400, lerr)
            return true, nil
        end
        if opts == nil or lua_type(opts) == "table" then
            -- A copy: opts is the caller's table, shared by every request.
            local copy = {}
            if opts ~= nil then
                for k, v in lua_pairs(opts) do
                    copy[k] = v
                end
            end
            copy.limit = n
            o = copy
        end
    end
    local r, err = report(o)
    if r == nil then
        fail(500, err)
        return true, nil
    end
    local body, jerr = encode(r)
    if body == nil then
        fail(500, jerr)
        return true, nil
    end
    ngx_header["Content-Type"] = "application/json"
    ngx_say(body)
    return true, nil
end
-- Exported by name: this module's own uses of them are locals, not lookups in its exports table.
_M.report = report
return _M
