--[[ Generated with https://github.com/TypeScriptToLua/TypeScriptToLua ]]
local ____exports = {}
local RECORD = "l:"
local SERIAL = "serial"
--- The dict key of a lease's record.
function ____exports.recordKey(rkey, token, shared)
    return shared and ((RECORD .. rkey) .. " ") .. token or RECORD .. rkey
end
local function encode(serial, token, key, ttl)
    local expires = math.floor(ngx.now() * 1000) + ttl
    return (((((((tostring(serial) .. " ") .. tostring(ngx.worker.pid())) .. " ") .. tostring(expires)) .. " ") .. token) .. " ") .. key
end
--- Record a new lease; returns its serial (0 when the dict could not take it).
function ____exports.record(dict, rec, token, key, ttl)
    local serial, ierr = dict:incr(SERIAL, 1, 0)
    if serial == nil then
        ngx.log(ngx.WARN, "dlock: shared dict: cannot count leases: ", ierr)
        return 0
    end
    local ok, err = dict:safe_set(
        rec,
        encode(serial, token, key, ttl),
        ttl / 1000
    )
    if not ok then
        ngx.log(
            ngx.WARN,
            "dlock: shared dict: cannot record lease of ",
            key,
            ": ",
            err
        )
    end
    return serial
end
local function serialOf(dict, rec)
    local v = dict:get(rec)
    if type(v) ~= "string" then
        return nil
    end
    local s = string.match(v, "^(%d+) ")
    if s == nil then
        return nil
    end
    return tonumber(s)
end
--- The pid and expiry (epoch ms) of the holder recorded under `rec`, or nil when none in this nginx.
function ____exports.holder(dict, rec)
    local v = dict:get(rec)
    if type(v) ~= "string" then
        return nil, 0
    end
    local pid, expires = string.match(v, "^%d+ (%d+) (%d+) ")
    if pid == nil then
        return nil, 0
    end
    return tonumber(pid), tonumber(expires) or 0
end
--- True when this nginx records a different, newer lease on the same key.
function ____exports.superseded(dict, rec, serial)
    local current = serialOf(dict, rec)
    return current ~= nil and current ~= serial
end
--- Move the record's expiry after a successful extend.
function ____exports.renew(dict, rec, serial, token, key, ttl)
    if serialOf(dict, rec) == serial then
        dict:safe_set(
            rec,
            encode(serial, token, key, ttl),
            ttl / 1000
        )
    end
end
--- Drop the record if it is still this lease's; false when a newer lease of this
-- nginx owns the key (then this one must not touch it). Called before the Redis release:
-- while we still hold the key in Redis nobody can write a newer record, so the
-- get-then-delete cannot remove a successor's record.
function ____exports.forget(dict, rec, serial)
    local current = serialOf(dict, rec)
    if current == serial then
        dict:delete(rec)
    end
    return current == nil or current == serial
end
--- Every lease recorded now. Walks the dict's keys: meant for status pages, not hot paths.
function ____exports.held(dict)
    local out = {}
    local nowMs = ngx.now() * 1000
    local keys = dict:get_keys(0)
    for i = 1, #keys do
        local k = keys[i]
        if string.sub(k, 1, 2) == RECORD then
            local v = dict:get(k)
            if type(v) == "string" then
                local ____, pid, expires, token, key = string.match(v, "^(%d+) (%d+) (%d+) (%S+) (.*)$")
                if key ~= nil then
                    local exp = tonumber(expires) or 0
                    out[#out + 1] = {
                        key = key,
                        token = token,
                        pid = tonumber(pid) or 0,
                        expires_at = exp / 1000,
                        ttl = math.max(0, exp - nowMs)
                    }
                end
            end
        end
    end
    return out
end
--- Dict key counting leases whose record the dict could not take (it was full).
____exports.UNRECORDED = "c:ledger:unrecorded"
--- How many leases this nginx could not record since it started (the dict was full).
function ____exports.unrecorded(dict)
    local v = dict:get(____exports.UNRECORDED)
    return type(v) == "number" and v or 0
end
return ____exports
