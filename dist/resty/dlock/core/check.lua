--[[ Generated with https://github.com/TypeScriptToLua/TypeScriptToLua ]]
local ____exports = {}
--- tostring that cannot raise: a __tostring that fails or returns no string gives the type.
function ____exports.text(v)
    local ok, s = pcall(tostring, v)
    return ok and type(s) == "string" and s or "a " .. type(v)
end
--- An error of ours without its "dlock: " prefix, for a log line that already
-- starts with one ("dlock: guard jobs: redis ...", not "dlock: guard jobs: dlock: redis ...").
function ____exports.reason(err)
    local s = ____exports.text(err)
    return string.sub(s, 1, 7) == "dlock: " and string.sub(s, 8) or s
end
--- Render any Lua value for an error message, bounded and printable.
function ____exports.show(v)
    local t = type(v)
    if t == "string" then
        local s = v
        local cut = #s > 40 and string.sub(s, 1, 40) .. "..." or s
        return string.format("%q", cut)
    end
    if t == "number" and v ~= v then
        return "nan"
    end
    if t == "table" or t == "userdata" or t == "function" or t == "thread" then
        return "a " .. t
    end
    return ____exports.text(v)
end
function ____exports.fail(what, v)
    return nil, (("dlock: " .. what) .. ", got ") .. ____exports.show(v)
end
--- fail() for a secret: its type, never its value, not even a mistyped one.
function ____exports.hidden(what, v)
    return nil, (("dlock: " .. what) .. ", got a ") .. type(v)
end
--- Integer in [min, max]; `unit` finishes the sentence ("a positive integer of ms").
function ____exports.integer(name, v, min, max, unit)
    if type(v) ~= "number" then
        return ____exports.fail((name .. " must be ") .. unit, v)
    end
    local n = v
    if n ~= n or n ~= math.floor(n) or n < min then
        return ____exports.fail((name .. " must be ") .. unit, v)
    end
    if n > max then
        return ____exports.fail(
            (name .. " must be at most ") .. tostring(max),
            v
        )
    end
    return n, nil
end
function ____exports.str(name, v, maxLen)
    if type(v) ~= "string" then
        return ____exports.fail(name .. " must be a string", v)
    end
    local s = v
    if #s == 0 then
        return ____exports.fail(name .. " must not be empty", v)
    end
    if #s > maxLen then
        return nil, ((((("dlock: " .. name) .. " must be at most ") .. tostring(maxLen)) .. " bytes, got ") .. tostring(#s)) .. " bytes"
    end
    return s, nil
end
--- A lua_shared_dict by name (the `dict` option of every factory).
function ____exports.sharedDict(v)
    local name, err = ____exports.str("dict", v, 256)
    if name == nil then
        return nil, err
    end
    local dict = ngx.shared[name]
    if dict == nil then
        return ____exports.fail(("no lua_shared_dict named " .. name) .. " (declare it in nginx.conf)", name)
    end
    return dict, nil
end
function ____exports.bool(name, v)
    if type(v) ~= "boolean" then
        return ____exports.fail(name .. " must be a boolean", v)
    end
    return v, nil
end
--- An options table: nil is an empty table; anything else must be a table whose
-- keys are all in `allowed`, so a typo ("ttl_ms", "wiat") is an error, never ignored.
function ____exports.options(name, v, allowed)
    if v == nil then
        return {}, nil
    end
    if type(v) ~= "table" then
        return ____exports.fail(name .. " must be a table", v)
    end
    local t = v
    for k in pairs(t) do
        if type(k) ~= "string" or not (allowed[k] ~= nil) then
            return ____exports.fail("unknown option in " .. name, k)
        end
    end
    return t, nil
end
local function loadNkeys()
    local ok, f = pcall(require, "table.nkeys")
    return ok and type(f) == "function" and f or nil
end
local nkeys = loadNkeys()
--- For a hot path that read its options by name: nil when the table t holds
-- those `found` options and nothing else, else the error options() gives.
-- Counting instead of walking the table keeps the caller loop-free: LuaJIT
-- will not compile a function whose trace runs into a loop (a root trace
-- cannot hold an inner one), and the acquire path ran interpreted for it.
function ____exports.onlyKnown(name, t, found, allowed)
    if nkeys ~= nil and nkeys(t) == found then
        return nil
    end
    local ____, err = ____exports.options(name, t, allowed)
    return err
end
--- Whether the Lua pattern matches somewhere in s.
function ____exports.found(s, pattern)
    local at = string.find(s, pattern)
    return at ~= nil
end
function ____exports.set(...)
    local names = {...}
    local s = {}
    for ____, n in ipairs(names) do
        s[n] = true
    end
    return s
end
return ____exports
