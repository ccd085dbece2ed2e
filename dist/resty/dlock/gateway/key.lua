-- Generated from src/resty/dlock/gateway/key.ts by TypeScriptToLua: edit that file, not this one.
-- Key templates of the gateway guards: "$http_idempotency_key",
-- "tenant:$remote_addr:$uri" (nginx variables and literals), or a Lua function.
-- A key that cannot be computed is never taken for a missing one (that would let
-- the request through unguarded): value() tells the two apart, and what goes
-- wrong is logged per guard and worker at most once an interval, never per request.
local _M = {}
local check = require("resty.dlock.core.check")
local vars = require("resty.dlock.gateway.vars")
local clock = require("resty.dlock.core.clock")
local quiet = require("resty.dlock.core.quiet")
local ngx_log = ngx.log
local ERR = ngx.ERR
local WARN = ngx.WARN
local clock_now = clock.now
local quiet_make = quiet.make
local quiet_due = quiet.due
local var_get = vars.get
local math_floor = math.floor
local str_find = string.find
local str_sub = string.sub
local lua_type = type
local lua_tostring = tostring
local lua_pcall = pcall
--- Seconds between two log lines of one guard about its keys (per worker). Settable for tests.
local settings = {interval = 60}
--- Split "$remote_addr:$uri" into { "", "remote_addr", ":", "uri" }: literal,
-- var, literal, var... As nginx reads its own templates: "${arg_org}-x" where a
-- name runs into what follows, and a "$" that starts no name is an error.
local function split(name, tpl)
    local parts = {}
    local pos = 1
    local n = 0
    while true do
        local s = str_find(tpl, "$", pos, true)
        if s == nil then
            break
        end
        local _, e, v = str_find(tpl, "^([%a_][%w_]*)", s + 1)
        if v == nil then
            _, e, v = str_find(tpl, "^{([%a_][%w_]*)}", s + 1)
        end
        if v == nil then
            return check.fail(name .. ": a \"$\" must start a variable name ($name or ${name})", tpl)
        end
        parts[n + 1] = str_sub(tpl, pos, s - 1)
        parts[n + 2] = v
        n = n + 2
        pos = e + 1
    end
    if n == 0 then
        return check.fail(name .. " must name at least one nginx variable ($http_x, $arg_x, $remote_addr...) or be a function", tpl)
    end
    parts[n + 1] = str_sub(tpl, pos)
    return parts, nil
end
--- Compile option `name` (a template string or a function).
function _M.compile(name, v)
    if lua_type(v) == "function" then
        return {parts = nil, keyFn = v, only = nil, source = "a function"}, nil
    end
    if lua_type(v) == "string" then
        local p, err = split(name, v)
        if p == nil then
            return nil, err
        end
        local only = #p == 3 and p[1] == "" and p[3] == "" and p[2] or nil
        return {parts = p, keyFn = nil, only = only, source = v}, nil
    end
    return check.fail(name .. " must be a string of nginx variables (\"$http_idempotency_key\") or a function", v)
end
--- The request's value of t: the key; or nil when it is missing (a variable
-- missing or empty, the function returned nil or ""); or nil and what went
-- wrong when it cannot be computed (the function raised or returned a non-string).
function _M.value(t)
    if t.keyFn ~= nil then
        local ok, v = lua_pcall(t.keyFn)
        if not ok then
            return nil, "the key function raised: " .. lua_tostring(v)
        end
        if v == nil or v == "" then
            return nil, nil
        end
        if lua_type(v) ~= "string" then
            return nil, "the key function returned a " .. lua_type(v) .. ", not a string"
        end
        return v, nil
    end
    local only = t.only
    if only ~= nil then
        -- The variable's own string, without a loop and a concatenation that makes it again.
        local v = var_get(only)
        if v == nil or v == "" then
            return nil, nil
        end
        return v, nil
    end
    local parts = t.parts
    local out = parts[1]
    for i = 2, #parts, 2 do
        local v = var_get(parts[i])
        if v == nil or v == "" then
            return nil, nil
        end
        out = out .. v .. parts[i + 1]
    end
    return out, nil
end
local seen = {}
local function state(guard)
    local s = seen[guard]
    if s == nil then
        s = {since = clock_now(), present = 0, missing = 0, failed = quiet_make()}
        seen[guard] = s
    end
    return s
end
--- Count a request with (present) or without its key. Once an interval, a guard
-- that saw its key on none of its requests says so: a misspelt variable would
-- otherwise leave every request unguarded without a word. At warn when such
-- requests pass (on_missing = "pass": clients that send no optional header are
-- normal operation), at error when every one of them was refused.
function _M.note(g, t, present)
    local guard = g.name
    local s = state(guard)
    local now = clock_now()
    if now - s.since >= settings.interval then
        if s.present == 0 and s.missing > 0 then
            ngx_log(
                g._onMissing == "reject" and ERR or WARN,
                "dlock: guard ",
                guard,
                ": the key (",
                t.source,
                ") was missing on all ",
                s.missing,
                " requests of the last ",
                math_floor(now - s.since),
                " s in this worker; they were ",
                g._missingWhat
            )
        end
        s.since = now
        s.present = 0
        s.missing = 0
    end
    if present then
        s.present = s.present + 1
    else
        s.missing = s.missing + 1
    end
end
--- A key that could not be computed: logged at once, then at most once an interval with the count.
function _M.failed(guard, problem, what)
    local n = quiet_due(state(guard).failed, settings.interval)
    if n == 0 then
        return
    end
    ngx_log(
        ERR,
        "dlock: guard ",
        guard,
        ": no key: ",
        problem,
        " (",
        n,
        n == 1 and " request" or " requests",
        " since the last such line in this worker; ",
        what,
        ")"
    )
end
-- Exported by name: this module's own uses of them are locals, not lookups in its exports table.
_M.settings = settings
return _M
