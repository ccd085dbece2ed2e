-- Generated from src/resty/dlock/core/schema.ts by TypeScriptToLua: edit that file, not this one.
-- Declarative option tables. A schema lists each option once (its kind, bounds,
-- default, what it excludes or needs, the modes it applies to) and is compiled
-- at module load; the validator it gives checks a user's table in one pass and
-- hands back a fresh table with the defaults filled in, or nil and
-- "dlock: <message naming the option>". Messages are built only when something
-- is wrong, so a valid table costs its result and nothing else. The kinds of
-- option, and the checking of one value, are in schema/values.lua.
local _M = {}
local check = require("resty.dlock.core.check")
local values = require("resty.dlock.core.schema.values")
local hosts = require("resty.dlock.core.schema.hosts")
_M.node = hosts.node
_M.literal = hosts.literal
_M.named = hosts.named
local lua_type = type
local str_find = string.find
local lua_ipairs = ipairs
local lua_error = error
local concat = table.concat
local value = values.value
local refuse = values.refuse
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
    return lua_type(other) == "number" and other > 0
end
local function validate(s, v)
    local given = values.NONE
    if v ~= nil then
        if lua_type(v) ~= "table" then
            -- redis = "redis://:secret@host": the string is not shown.
            if lua_type(v) == "string" and (str_find(v, "@", 1, true)) ~= nil then
                return check.hidden(s.path .. " must be a table", v)
            end
            return check.fail(s.path .. " must be a table", v)
        end
        given = v
    end
    local odd, k = values.stranger(given, s.byName, s.foreign)
    if odd then
        return check.fail("unknown option in " .. s.path, k)
    end
    local options = s.options
    local n = #options
    -- Options of other modes next: "hold applies to mode dedup only" says more than hold's value would.
    for i = 1, #s.elsewhere do
        local e = s.elsewhere[i]
        local theirs = given[e.name]
        if theirs ~= nil then
            return check.fail(e.why, theirs)
        end
    end
    -- Exclusions first: a value is not worth checking beside one that rules it out.
    for i = 1, n do
        local o = options[i]
        local mine = given[o.spec.name]
        if mine ~= nil then
            for j = 1, #o.excludes do
                local x = o.excludes[j]
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
    for i = 1, n do
        local o = options[i]
        local x = given[o.spec.name]
        -- A check of its own sees every value, the default too: it may turn either into what the caller uses.
        if x == nil and o.spec.required ~= true and o.spec.kind ~= "check" then
            out[o.spec.name] = o.opt.default
        else
            local raw = x
            if raw == nil then
                raw = o.opt.default
            end
            local y, err = value(o.opt, raw, out)
            if err ~= nil then
                return nil, err
            end
            out[o.spec.name] = y
        end
    end
    -- Rules last, on checked values: "replicas > 0" is a number by now. A default never trips one.
    for i = 1, n do
        local o = options[i]
        local x = out[o.spec.name]
        if given[o.spec.name] ~= nil and x ~= o.spec.idle then
            for j = 1, #o.requires do
                local r = o.requires[j]
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
        lua_error("dlock: schema " .. path .. ": " .. name .. " refers to no option " .. other)
    end
    return spec
end
local function requirement(path, labels, specs, spec, rule)
    known(path, specs, spec.name, rule.option)
    local label = labels .. spec.name
    local other = labels .. rule.option
    if rule.must == "unset" then
        local why = rule.why ~= nil and " (" .. rule.why .. ")" or ""
        return {rule = rule, message = label .. " is refused with " .. other .. why, show = true}
    end
    local subject = label .. " needs "
    if rule.shared ~= nil then
        local names = {}
        for _, n in lua_ipairs(rule.shared) do
            known(path, specs, spec.name, n)
            names[#names + 1] = labels .. n
        end
        subject = concat(names, " and ") .. " need "
    end
    -- The value is fine in itself here (it is the other option that is missing or off),
    -- except beside a number the other one must exceed.
    if rule.must == "set" then
        return {rule = rule, message = subject .. other, show = false}
    end
    if rule.must == "true" then
        return {rule = rule, message = subject .. other .. " = true", show = false}
    end
    return {rule = rule, message = subject .. other .. " > 0", show = true}
end
local function exclusions(path, labels, specs, spec)
    local list = {}
    if spec.excludes == nil then
        return list
    end
    local label = labels .. spec.name
    local names = {}
    for _, n in lua_ipairs(spec.excludes) do
        names[#names + 1] = labels .. n
    end
    local together = label .. " excludes " .. concat(names, " and ")
    local asOne = spec.excludesAsOne == true
    for _, n in lua_ipairs(spec.excludes) do
        local other = known(path, specs, spec.name, n)
        local message = asOne and together or label .. " excludes " .. labels .. n
        list[#list + 1] = {option = n, message = message, own = asOne, secret = other.secret == true}
    end
    return list
end
--- A validator for the option table named `path` ("redis", "redis.cluster",
-- "dlock.new options"). Options are checked, and their errors reported, in
-- the order given. A spec that names an option the schema lacks raises here,
-- at module load.
function _M.compile(path, specs, how)
    local labels = how and how.labels or path .. "."
    local byName = {}
    for _, spec in lua_ipairs(specs) do
        if byName[spec.name] ~= nil then
            lua_error("dlock: schema " .. path .. ": " .. spec.name .. " is declared twice")
        end
        byName[spec.name] = spec
    end
    local options = {}
    local index = {}
    for _, spec in lua_ipairs(specs) do
        local requires = {}
        if spec.requires ~= nil then
            for _, r in lua_ipairs(spec.requires) do
                requires[#requires + 1] = requirement(path, labels, byName, spec, r)
            end
        end
        local o = {
            opt = values.option(spec, labels .. spec.name),
            spec = spec,
            excludes = exclusions(path, labels, byName, spec),
            requires = requires
        }
        options[#options + 1] = o
        index[spec.name] = o
    end
    local elsewhere = how and how.elsewhere or ({})
    local foreign
    for _, e in lua_ipairs(elsewhere) do
        if foreign == nil then
            foreign = {}
        end
        foreign[e.name] = e.why
    end
    local s = {
        path = path,
        options = options,
        byName = index,
        elsewhere = elsewhere,
        foreign = foreign
    }
    return function(v) return validate(s, v) end
end
--- The check of one option alone, for a hot path that reads its options by name (acquire, extend).
function _M.one(spec, label)
    local o = values.option(spec, label or spec.name)
    local out = {}
    return function(v) return value(o, v, out) end
end
return _M
