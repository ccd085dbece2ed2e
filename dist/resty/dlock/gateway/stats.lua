--[[ Generated with https://github.com/TypeScriptToLua/TypeScriptToLua ]]
local ____exports = {}
--- Every event a guard counts, in the order status pages list them.
____exports.EVENTS = {
    "acquired",
    "rejected",
    "waited",
    "timed_out",
    "renewed",
    "lost",
    "aborted",
    "unlogged",
    "redis_errors",
    "failed_open",
    "failed_closed",
    "short_circuited",
    "breaker_opened",
    "missing_key",
    "key_errors",
    "stored",
    "replayed",
    "conflict",
    "mismatch",
    "not_stored",
    "local_admitted",
    "local_rejected"
}
function ____exports.incr(dict, guard, event)
    dict:incr((("c:" .. guard) .. ":") .. event, 1, 0)
end
function ____exports.count(dict, guard, event)
    local v = dict:get((("c:" .. guard) .. ":") .. event)
    return type(v) == "number" and v or 0
end
function ____exports.breakerState(dict, guard)
    if (dict:get("b:open:" .. guard)) ~= nil then
        return "open"
    end
    if (dict:get("b:half:" .. guard)) ~= nil then
        return "half_open"
    end
    return "closed"
end
function ____exports.breakerOpen(dict, guard)
    return (dict:get("b:open:" .. guard)) ~= nil
end
--- Count a Redis failure; open the breaker after `threshold` in a row, or at once when half open.
function ____exports.failure(dict, guard, threshold, cooldownMs)
    local trip = (dict:get("b:half:" .. guard)) ~= nil
    if not trip then
        local n = dict:incr("b:fail:" .. guard, 1, 0)
        trip = n ~= nil and n >= threshold
    end
    if trip and (dict:get("b:open:" .. guard)) == nil then
        dict:set("b:open:" .. guard, true, cooldownMs / 1000)
        dict:set("b:half:" .. guard, true)
        dict:delete("b:fail:" .. guard)
        ____exports.incr(dict, guard, "breaker_opened")
        ngx.log(
            ngx.ERR,
            "dlock: guard ",
            guard,
            ": Redis keeps failing, not calling it for ",
            cooldownMs,
            " ms"
        )
    end
end
--- Redis answered: close the breaker and forget past failures.
function ____exports.success(dict, guard)
    if (dict:get("b:half:" .. guard)) ~= nil then
        dict:delete("b:half:" .. guard)
        ngx.log(ngx.NOTICE, "dlock: guard ", guard, ": Redis answers again, breaker closed")
    end
    if (dict:get("b:fail:" .. guard)) ~= nil then
        dict:delete("b:fail:" .. guard)
    end
end
--- Move a per-guard gauge (in_flight...) by delta; shared by the workers of this nginx.
function ____exports.adjust(dict, guard, gauge, delta)
    dict:incr((("g:" .. guard) .. ":") .. gauge, delta, 0)
end
--- A per-guard gauge's value now (0 when never moved).
function ____exports.gauge(dict, guard, name)
    local v = dict:get((("g:" .. guard) .. ":") .. name)
    return type(v) == "number" and v or 0
end
return ____exports
