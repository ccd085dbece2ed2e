-- Generated from src/resty/dlock/core/schema/values.ts by TypeScriptToLua: edit that file, not this one.
-- The kinds of option a schema declares (../schema.lua), and the check of one value against its
-- declaration, with the message a user reads when it fails.
local _M = {}
local check = require("resty.dlock.core.check")
local hosts = require("resty.dlock.core.schema.hosts")
local lua_type = type
local str_find = string.find
local lua_ipairs = ipairs
local str_sub = string.sub
local str_format = string.format
local lua_tostring = tostring
local lua_pairs = pairs
local concat = table.concat
local node = hosts.node
local hostLike = hosts.hostLike
local refuse = hosts.refuse
--- "a", "a or b", "a, b or c".
local function listed(names, last)
    local n = #names
    if n == 1 then
        return names[1]
    end
    local head = {}
    for i = 1, n - 1 do
        head[#head + 1] = names[i]
    end
    return concat(head, ", ") .. " " .. last .. " " .. names[n]
end
function _M.option(spec, label)
    local unit = ""
    if spec.kind == "enum" then
        local quoted = {}
        for _, v in lua_ipairs(spec.values) do
            quoted[#quoted + 1] = "\"" .. v .. "\""
        end
        unit = spec.unit or listed(quoted, "or")
    end
    return {spec = spec, label = label, default = spec.default, unit = unit}
end
--- What an absent option table validates as: read, never written.
_M.NONE = {}
--- A misspelt name is an error, never a silently ignored option: the name of the first unknown key, if any.
function _M.stranger(given, byName, elsewhere)
    for k in lua_pairs(given) do
        if lua_type(k) ~= "string" or byName[k] == nil and (elsewhere == nil or elsewhere[k] == nil) then
            return true, k
        end
    end
    return false, nil
end
local function nodes(o, spec, list)
    if lua_type(list) ~= "table" or #list == 0 or not check.isList(list) then
        return check.fail(o.label .. " must be a list of \"host:port\" strings", list)
    end
    local out = {}
    local given = list
    for i = 1, #given do
        local n, err = node(o.label, given[i])
        if n == nil then
            return nil, err
        end
        out[#out + 1] = n
    end
    if spec.min ~= nil and #out < spec.min then
        return check.fail(
            o.label .. " needs at least " .. lua_tostring(spec.min) .. " " .. (spec.unit or "nodes"),
            #out
        )
    end
    return out, nil
end
local function str(o, spec, v)
    if lua_type(v) ~= "string" then
        return refuse(o.label .. " must be a string", v, spec.secret == true)
    end
    if spec.maxLen == nil or v == "" and spec.empty == true then
        return v, nil
    end
    -- Past the type check its messages show nothing of a secret but its length.
    local s, err = check.str(o.label, v, spec.maxLen)
    if s == nil then
        return nil, err
    end
    if spec.prefix ~= nil and str_sub(s, 1, #spec.prefix) ~= spec.prefix then
        return refuse(
            o.label .. " must start with " .. str_format("%q", spec.prefix),
            s,
            spec.secret == true
        )
    end
    if spec.prefix ~= nil and #s == #spec.prefix then
        return refuse(
            o.label .. " names nothing after " .. str_format("%q", spec.prefix),
            s,
            spec.secret == true
        )
    end
    if spec.host == true and not hostLike(s) then
        -- A URL with credentials is not shown.
        return refuse(o.label .. " must be a host name or an IP address (no port, scheme or credentials)", s, (str_find(s, "@", 1, true)) ~= nil)
    end
    return s, nil
end
--- One value (the given one, or the default of a check), checked against its spec; `out`: the options checked before it.
function _M.value(o, v, out)
    local spec = o.spec
    if spec.kind == "integer" then
        return check.integer(o.label, v, spec.min, spec.max, spec.unit)
    elseif spec.kind == "string" then
        return str(o, spec, v)
    elseif spec.kind == "boolean" then
        return check.bool(o.label, v)
    elseif spec.kind == "enum" then
        if lua_type(v) == "string" then
            for i = 1, #spec.values do
                if spec.values[i] == v then
                    return v, nil
                end
            end
        end
        return check.fail(o.label .. " must be " .. o.unit, v)
    elseif spec.kind == "function" then
        if lua_type(v) ~= "function" then
            return check.fail(o.label .. " must be a function", v)
        end
        return v, nil
    elseif spec.kind == "nodes" then
        return nodes(o, spec, v)
    elseif spec.kind == "check" then
        return spec.check(v, out)
    end
    return spec.table(v)
end
-- Exported by name: this module's own uses of them are locals, not lookups in its exports table.
_M.listed = listed
_M.refuse = refuse
return _M
