-- Generated from src/resty/dlock/core/check.ts by TypeScriptToLua: edit that file, not this one.
-- Input validation shared by every public entry point. Each checker returns
-- `value, nil` or `nil, "dlock: <what is wrong>, got <value>"`, so callers can
-- hand the error straight back to the Lua user.
local _M = {}
local lua_type = type
local lua_pcall = pcall
local lua_tostring = tostring
local lua_pairs = pairs
local lua_require = require
local lua_getmetatable = getmetatable
local str_sub = string.sub
local str_format = string.format
local str_find = string.find
local str_gsub = string.gsub
local math_floor = math.floor
local shared = ngx.shared
--- tostring that cannot raise: a __tostring that fails or returns no string gives the type.
local function text(v)
    local ok, s = lua_pcall(lua_tostring, v)
    return ok and lua_type(s) == "string" and s or "a " .. lua_type(v)
end
--- An error of ours without its "dlock: " prefix, for a log line that already
-- starts with one ("dlock: guard jobs: redis ...", not "dlock: guard jobs: dlock: redis ...").
function _M.reason(err)
    local s = text(err)
    return str_sub(s, 1, 7) == "dlock: " and str_sub(s, 8) or s
end
--- Render any Lua value for an error message, bounded and printable.
local function show(v)
    local t = lua_type(v)
    if t == "string" then
        local s = v
        local cut = #s > 40 and str_sub(s, 1, 40) .. "..." or s
        -- %q writes a newline as a backslash and a real newline: an error message stays on one line.
        return (str_gsub(str_format("%q", cut), "\\\n", "\\n"))
    end
    if t == "number" and v ~= v then
        return "nan"
    end
    if t == "table" or t == "userdata" or t == "function" or t == "thread" then
        return "a " .. t
    end
    return text(v)
end
local function fail(what, v)
    return nil, "dlock: " .. what .. ", got " .. show(v)
end
--- nil when obj, a method's self, is an object of metatable mt; else why the
-- method was called without its object (a "." where ":" was meant), for its
-- nil, err. Never raises, whatever obj is (getmetatable of nil, a number or a string).
function _M.notSelf(obj, mt, call)
    if lua_getmetatable(obj) == mt then
        return nil
    end
    return "dlock: " .. call .. " was called without its object (with \".\" where \":\" was meant), got " .. show(obj)
end
--- Is t a list: 1..n and nothing else? A value under another key (or past a
-- hole) would go unread, without a word.
function _M.isList(t)
    local n = 0
    for _ in lua_pairs(t) do
        n = n + 1
    end
    for i = 1, n do
        if t[i] == nil then
            return false
        end
    end
    return true
end
--- fail() for a secret: its type, never its value, not even a mistyped one.
function _M.hidden(what, v)
    return nil, "dlock: " .. what .. ", got a " .. lua_type(v)
end
--- Integer in [min, max]; `unit` finishes the sentence ("a positive integer of ms").
function _M.integer(name, v, min, max, unit)
    if lua_type(v) ~= "number" then
        return fail(name .. " must be " .. unit, v)
    end
    local n = v
    -- NaN fails every comparison, +/-inf fails the floor test or the bounds.
    if n ~= n or n ~= math_floor(n) or n < min then
        return fail(name .. " must be " .. unit, v)
    end
    if n > max then
        return fail(name .. " must be at most " .. lua_tostring(max), v)
    end
    return n, nil
end
local function str(name, v, maxLen)
    if lua_type(v) ~= "string" then
        return fail(name .. " must be a string", v)
    end
    local s = v
    if #s == 0 then
        return fail(name .. " must not be empty", v)
    end
    if #s > maxLen then
        return nil, "dlock: " .. name .. " must be at most " .. lua_tostring(maxLen) .. " bytes, got " .. lua_tostring(#s) .. " bytes"
    end
    return s, nil
end
--- A lua_shared_dict by name (the `dict` option of every factory).
function _M.sharedDict(v)
    local name, err = str("dict", v, 256)
    if name == nil then
        return nil, err
    end
    local dict = shared[name]
    if dict == nil then
        return fail("no lua_shared_dict named " .. name .. " (declare it in nginx.conf)", name)
    end
    return dict, nil
end
function _M.bool(name, v)
    if lua_type(v) ~= "boolean" then
        return fail(name .. " must be a boolean", v)
    end
    return v, nil
end
--- An options table: nil is an empty table; anything else must be a table whose
-- keys are all in `allowed`, so a typo ("ttl_ms", "wiat") is an error, never ignored.
function _M.options(name, v, allowed)
    if v == nil then
        return {}, nil
    end
    if lua_type(v) ~= "table" then
        return fail(name .. " must be a table", v)
    end
    local t = v
    for k in lua_pairs(t) do
        if lua_type(k) ~= "string" or allowed[k] == nil then
            return fail("unknown option in " .. name, k)
        end
    end
    return t, nil
end
local function loadNkeys()
    local ok, f = lua_pcall(lua_require, "table.nkeys")
    return ok and lua_type(f) == "function" and f or nil
end
-- OpenResty's LuaJIT counts a table's entries without a loop (and compiles the
-- call): how a hot path checks that a table holds the options it read by name
-- and nothing else (core/options.lua acquire).
_M.nkeys = loadNkeys()
--- Whether the Lua pattern matches somewhere in s.
function _M.found(s, pattern)
    local at = str_find(s, pattern)
    return at ~= nil
end
function _M.set(...)
    local names = {...}
    local s = {}
    for i = 1, #names do
        s[names[i]] = true
    end
    return s
end
-- Exported by name: this module's own uses of them are locals, not lookups in its exports table.
_M.fail = fail
_M.show = show
_M.str = str
_M.text = text
return _M
