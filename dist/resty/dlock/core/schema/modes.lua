-- Generated from src/resty/dlock/core/schema/modes.ts by TypeScriptToLua: edit that file, not this one.
-- Tables whose options depend on a mode (a gateway guard's `mode`): one
-- schema per mode, made of the options that apply to it, in which those of
-- the other modes are refused by name, with why.
local _M = {}
local check = require("resty.dlock.core.check")
local schema = require("resty.dlock.core.schema")
local values = require("resty.dlock.core.schema.values")
local lua_type = type
local lua_ipairs = ipairs
local lua_error = error
local lua_pairs = pairs
--- Whether `spec` applies to mode `mode`.
local function applies(spec, mode)
    if spec.notFor ~= nil and spec.notFor[mode] ~= nil then
        return false
    end
    if spec.modes == nil then
        return true
    end
    for _, m in lua_ipairs(spec.modes) do
        if m == mode then
            return true
        end
    end
    return false
end
--- Why `name`, an option of other modes, is refused in `mode`.
local function refusal(name, mode, list, specs)
    if mode.apart == true then
        return name .. " does not apply to mode " .. mode.name
    end
    for _, s in lua_ipairs(specs) do
        local why = s.notFor and s.notFor[mode.name]
        if s.name == name and why ~= nil then
            return name .. " does not apply to mode " .. mode.name .. " (" .. why .. ")"
        end
    end
    local taking = {}
    local apart = {}
    for _, m in lua_ipairs(list) do
        for _, s in lua_ipairs(specs) do
            if s.name == name and applies(s, m.name) then
                local into = m.apart == true and apart or taking
                into[#into + 1] = m.name
                break
            end
        end
    end
    local named = #taking > 0 and taking or apart
    return name .. " applies to mode" .. (#named > 1 and "s " or " ") .. values.listed(named, "and") .. " only, not " .. mode.name
end
--- One validator for a table whose option `option` picks one of `list`: each
-- mode is a schema of the specs that apply to it (`modes`, `notFor`), in
-- which the options of the other modes are refused by name. A new mode is a
-- line in `list`, and `modes` entries on the options it takes.
function _M.modes(path, option, list, specs)
    local all = {}
    local picker
    for _, s in lua_ipairs(specs) do
        all[s.name] = true
        if s.name == option then
            picker = s
        end
    end
    if picker == nil then
        lua_error("dlock: schema " .. path .. ": no option " .. option .. " picks the mode")
    end
    local byMode = {}
    for _, m in lua_ipairs(list) do
        local mine = {}
        local names = {}
        for _, s in lua_ipairs(specs) do
            if applies(s, m.name) then
                mine[#mine + 1] = s
                names[s.name] = true
            end
        end
        local elsewhere = {}
        for _, s in lua_ipairs(specs) do
            if names[s.name] == nil then
                names[s.name] = true
                elsewhere[#elsewhere + 1] = {name = s.name, why = refusal(s.name, m, list, specs)}
            end
        end
        byMode[m.name] = schema.compile(path, mine, {labels = "", elsewhere = elsewhere})
    end
    local pick = values.option(picker, option)
    local out = {}
    return function(v)
        if lua_type(v) == "table" then
            local which = byMode[v[option]]
            if which ~= nil then
                return which(v)
            end
        elseif v ~= nil then
            return check.fail(path .. " must be a table", v)
        end
        -- No mode to go by: a misspelt name is still the first thing to say, then the mode.
        local given = v == nil and values.NONE or v
        local odd, k = values.stranger(given, all, nil)
        if odd then
            return check.fail("unknown option in " .. path, k)
        end
        return values.value(pick, given[option], out)
    end
end
--- `spec` (shared with another table) for some modes only: a copy, made at load time.
function _M.only(spec, list)
    local copy = {}
    for k, v in lua_pairs(spec) do
        copy[k] = v
    end
    copy.modes = list
    return copy
end
-- Exported by name: this module's own uses of them are locals, not lookups in its exports table.
_M.applies = applies
return _M
