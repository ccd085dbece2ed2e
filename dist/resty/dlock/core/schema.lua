--[[ Generated with https://github.com/TypeScriptToLua/TypeScriptToLua ]]
local ____exports = {}
local check = require("resty.dlock.core.check")
--- What an absent option table validates as: read, never written.
local NONE = {}
--- "dlock: <what>, got <v>", or only v's type when v is a secret.
local function refuse(what, v, secret)
    if secret then
        return check.hidden(what, v)
    end
    return check.fail(what, v)
end
--- The port whose digits run from `at` to the end of s: read in place, a substring would be garbage.
local function port(s, at)
    local p = 0
    for i = at, #s do
        p = p * 10 + string.byte(s, i) - 48
        if p > 65535 then
            return nil
        end
    end
    return p >= 1 and p or nil
end
--- "host:port" or "[v6]:port"; `label` names the list it came from.
function ____exports.node(label, v)
    if type(v) ~= "string" then
        return check.fail(label .. " must be \"host:port\" strings", v)
    end
    local host, at = string.match(v, "^%[([%x:%.]+)%]:()%d+$")
    if host == nil then
        host, at = string.match(v, "^([%w%.%-_]+):()%d+$")
    end
    if host == nil then
        return check.fail(label .. " must be \"host:port\" strings", v)
    end
    local p = port(v, at)
    if p == nil then
        return check.fail(label .. " must be \"host:port\" strings", v)
    end
    return {host = host, port = p}, nil
end
local function nodes(o, spec, list)
    if type(list) ~= "table" or #list == 0 then
        return check.fail(o.label .. " must be a list of \"host:port\" strings", list)
    end
    local out = {}
    for ____, v in ipairs(list) do
        local n, err = ____exports.node(o.label, v)
        if n == nil then
            return nil, err
        end
        out[#out + 1] = n
    end
    if spec.min ~= nil and #out < spec.min then
        return check.fail(
            (((o.label .. " needs at least ") .. tostring(spec.min)) .. " ") .. (spec.unit or "nodes"),
            #out
        )
    end
    return out, nil
end
--- One given value (or nil for a required option), checked against its spec.
local function value(o, v)
    local spec = o.spec
    if spec.kind == "integer" then
        return check.integer(
            o.label,
            v,
            spec.min,
            spec.max,
            spec.unit
        )
    elseif spec.kind == "string" then
        if type(v) ~= "string" then
            return refuse(o.label .. " must be a string", v, spec.secret == true)
        end
        if spec.maxLen == nil then
            return v, nil
        end
        local s, err = check.str(o.label, v, spec.maxLen)
        if s == nil then
            return nil, err
        end
        if spec.prefix ~= nil and string.sub(s, 1, #spec.prefix) ~= spec.prefix then
            return refuse(
                (o.label .. " must start with ") .. string.format("%q", spec.prefix),
                s,
                spec.secret == true
            )
        end
        return s, nil
    elseif spec.kind == "boolean" then
        return check.bool(o.label, v)
    elseif spec.kind == "nodes" then
        return nodes(o, spec, v)
    end
    return spec.table(v)
end
--- Whether `other` (validated, defaults filled) is what `rule` needs of it.
local function met(rule, other)
    if rule.must == "set" then
        return other ~= nil
    end
    if rule.must == "unset" then
        return other == nil
    end
    if rule.must == "true" then
        return other == true
    end
    return type(other) == "number" and other > 0
end
local function validate(s, v)
    local given = NONE
    if v ~= nil then
        if type(v) ~= "table" then
            return check.fail(s.path .. " must be a table", v)
        end
        given = v
    end
    for k in pairs(given) do
        if type(k) ~= "string" or not (s.byName[k] ~= nil) then
            return check.fail("unknown option in " .. s.path, k)
        end
    end
    for ____, o in ipairs(s.options) do
        local mine = given[o.spec.name]
        if mine ~= nil then
            for ____, x in ipairs(o.excludes) do
                local theirs = given[x.option]
                if theirs ~= nil then
                    if x.own then
                        return refuse(x.message, mine, o.spec.secret == true)
                    end
                    return refuse(x.message, theirs, x.secret)
                end
            end
        end
    end
    local out = {}
    for ____, o in ipairs(s.options) do
        local v = given[o.spec.name]
        if v == nil and o.spec.required ~= true then
            out[o.spec.name] = o.default
        else
            local x, err = value(o, v)
            if err ~= nil then
                return nil, err
            end
            out[o.spec.name] = x
        end
    end
    for ____, o in ipairs(s.options) do
        local x = out[o.spec.name]
        if given[o.spec.name] ~= nil and x ~= o.spec.idle then
            for ____, r in ipairs(o.requires) do
                if not met(r.rule, out[r.rule.option]) then
                    if r.show then
                        return refuse(r.message, x, o.spec.secret == true)
                    end
                    return nil, "dlock: " .. r.message
                end
            end
        end
    end
    return out, nil
end
--- The spec of `other`, which `name` refers to: a typo in a schema raises at module load.
local function known(path, specs, name, other)
    local spec = specs[other]
    if spec == nil then
        error((((("dlock: schema " .. path) .. ": ") .. name) .. " refers to no option ") .. other)
    end
    return spec
end
local function requirement(path, specs, spec, rule)
    known(path, specs, spec.name, rule.option)
    local label = (path .. ".") .. spec.name
    local other = (path .. ".") .. rule.option
    if rule.must == "unset" then
        local why = rule.why ~= nil and (" (" .. rule.why) .. ")" or ""
        return {rule = rule, message = ((label .. " is refused with ") .. other) .. why, show = true}
    end
    local subject = label .. " needs "
    if rule.shared ~= nil then
        local names = {}
        for ____, n in ipairs(rule.shared) do
            known(path, specs, spec.name, n)
            names[#names + 1] = (path .. ".") .. n
        end
        subject = table.concat(names, " and ") .. " need "
    end
    if rule.must == "set" then
        return {rule = rule, message = subject .. other, show = false}
    end
    if rule.must == "true" then
        return {rule = rule, message = (subject .. other) .. " = true", show = false}
    end
    return {rule = rule, message = (subject .. other) .. " > 0", show = true}
end
local function exclusions(path, specs, spec)
    local list = {}
    if spec.excludes == nil then
        return list
    end
    local label = (path .. ".") .. spec.name
    local labels = {}
    for ____, n in ipairs(spec.excludes) do
        labels[#labels + 1] = (path .. ".") .. n
    end
    local together = (label .. " excludes ") .. table.concat(labels, " and ")
    local asOne = spec.excludesAsOne == true
    for ____, n in ipairs(spec.excludes) do
        local other = known(path, specs, spec.name, n)
        local message = asOne and together or (((label .. " excludes ") .. path) .. ".") .. n
        list[#list + 1] = {option = n, message = message, own = asOne, secret = other.secret == true}
    end
    return list
end
--- A validator for the option table named `path` ("redis", "redis.cluster").
-- Options are checked, and their errors reported, in the order given.
-- A spec that names an option the schema lacks raises here, at module load.
function ____exports.compile(path, specs)
    local byName = {}
    for ____, spec in ipairs(specs) do
        byName[spec.name] = spec
    end
    local options = {}
    local index = {}
    for ____, spec in ipairs(specs) do
        local requires = {}
        if spec.requires ~= nil then
            for ____, r in ipairs(spec.requires) do
                requires[#requires + 1] = requirement(path, byName, spec, r)
            end
        end
        local o = {
            spec = spec,
            label = (path .. ".") .. spec.name,
            default = spec.default,
            excludes = exclusions(path, byName, spec),
            requires = requires
        }
        options[#options + 1] = o
        index[spec.name] = o
    end
    local s = {path = path, options = options, byName = index}
    return function(v) return validate(s, v) end
end
return ____exports
