--[[ Generated with https://github.com/TypeScriptToLua/TypeScriptToLua ]]
local ____exports = {}
local check = require("resty.dlock.check")
--- Split "$remote_addr:$uri" into { "", "remote_addr", ":", "uri" }: literal, var, literal, var...
local function split(name, tpl)
    local parts = {}
    local pos = 1
    local n = 0
    while true do
        local s, e, v = string.find(tpl, "%$([%a_][%w_]*)", pos)
        if s == nil then
            break
        end
        parts[n + 1] = string.sub(tpl, pos, s - 1)
        parts[n + 2] = v
        n = n + 2
        pos = e + 1
    end
    if n == 0 then
        return check.fail(name .. " must name at least one nginx variable ($http_x, $arg_x, $remote_addr...) or be a function", tpl)
    end
    parts[n + 1] = string.sub(tpl, pos)
    return parts, nil
end
--- Compile option `name` (a template string or a function).
function ____exports.compile(name, v)
    if type(v) == "function" then
        return {parts = nil, keyFn = v}, nil
    end
    if type(v) == "string" then
        local p, err = split(name, v)
        if p == nil then
            return nil, err
        end
        return {parts = p, keyFn = nil}, nil
    end
    return check.fail(name .. " must be a string of nginx variables (\"$http_idempotency_key\") or a function", v)
end
--- The request's value of t, or nil when a variable is missing or empty (or the function fails).
function ____exports.value(guard, t)
    if t.keyFn ~= nil then
        local ok, v = pcall(t.keyFn)
        if not ok then
            ngx.log(
                ngx.ERR,
                "dlock: guard ",
                guard,
                ": key function failed: ",
                tostring(v)
            )
            return nil
        end
        return type(v) == "string" and #v > 0 and v or nil
    end
    local parts = t.parts
    local out = parts[1]
    for i = 2, #parts, 2 do
        local v = ngx.var[parts[i]]
        if v == nil or v == "" then
            return nil
        end
        out = (out .. v) .. parts[i + 1]
    end
    return out
end
return ____exports
