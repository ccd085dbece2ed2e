-- Generated from src/resty/dlock/gateway/ratefields.ts by TypeScriptToLua: edit that file, not this one.
-- The IETF httpapi RateLimit fields of a rate guard's decisions
-- (draft-ietf-httpapi-ratelimit-headers-11): RateLimit-Policy names each
-- limit's quota q per window w; RateLimit says what remains r and the
-- effective window t, the seconds within which no more than r can be used.
local _M = {}
local str_format = string.format
local tbl_concat = table.concat
local math_ceil = math.ceil
local math_min = math.min
local math_max = math.max
local lua_type = type
local str_find = string.find
local ngx = ngx
--- Set a RateLimit field to this guard's items, after those another rate guard
-- of the request set already (per client and per API key: both lists go out,
-- one field each, as the draft has several policies in one field).
local function field(header, name, items)
    local before = header[name]
    header[name] = lua_type(before) == "string" and before .. ", " .. items or items
end
--- The effective window of limit i of a reply, in seconds (t): the draft's
-- "seconds within which the client can use no more than the available
-- quota", the time until the next unit comes back (GCRA: from ms ahead d
-- and r left, d + (r + 1) x interval - capacity), rounded up, never past a
-- refusal's Retry-After. iv and cap in ms: the limits', or this nginx's
-- share of them while the local fallback decides.
local function window(reply, i, iv, cap)
    local x = reply[2 + 2 * i] + (reply[1 + 2 * i] + 1) * iv[i] - cap[i]
    local t = x > 0 and math_ceil(x / 1000) or 0
    -- A refusal: no limit's window past its Retry-After (a shorter window is as true).
    if reply[1] == 0 then
        return math_min(t, math_max(1, math_ceil(reply[2] / 1000)))
    end
    return t
end
--- Is one of these quoted names in a field's value already?
local function sent(value, quoted)
    for i = 1, #quoted do
        if (str_find(value, quoted[i], 1, true)) ~= nil then
            return true
        end
    end
    return false
end
--- The RateLimit fields of a reply, its limits' intervals and capacities in ms.
function _M.fields(g, reply, iv, cap)
    local header = ngx.header
    -- A client tells policies apart by name (draft-11 3.1, 4.1): a name another guard sent already is made ours.
    local before = header["RateLimit-Policy"]
    local clash = lua_type(before) == "string" and sent(before, g._quoted)
    field(header, "RateLimit-Policy", clash and g._ownPolicy or g._policy)
    local items = clash and g._ownItems or g._items
    if #items == 1 then
        -- One limit without the loop (a loop on the request's path keeps it out of LuaJIT's traces).
        field(
            header,
            "RateLimit",
            items[1] .. str_format("%d;t=%d", reply[3], window(reply, 1, iv, cap))
        )
        return
    end
    local parts = g._parts
    for i = 1, #items do
        parts[i] = items[i] .. str_format("%d;t=%d", reply[1 + 2 * i], window(reply, i, iv, cap))
    end
    field(header, "RateLimit", tbl_concat(parts, ", "))
end
--- RateLimit-Policy for these limits, each name after `own` ("" or "<guard>:").
function _M.policyOf(ls, own)
    local out = {}
    for i = 1, #ls.list do
        local l = ls.list[i]
        local item = str_format("\"%s%s\";q=%d", own, l.name, l.rate)
        if l.period % 1000 == 0 then
            item = item .. str_format(";w=%d", l.period / 1000)
        end
        if l.burst ~= l.rate then
            item = item .. str_format(";dlock-burst=%d", l.burst)
        end
        out[i] = item
    end
    return tbl_concat(out, ", ")
end
return _M
