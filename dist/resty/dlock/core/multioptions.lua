-- Generated from src/resty/dlock/core/multioptions.ts by TypeScriptToLua: edit that file, not this one.
-- The arguments of locks:acquire_all(keys, opts), read: the list of keys and
-- their Redis keys (the prefix in front: lockKey), and the options of the set,
-- checked by the ACQUIRE_ALL schema (core/options.lua) with the factory's defaults.
local _M = {}
local check = require("resty.dlock.core.check")
local options = require("resty.dlock.core.options")
local script = require("resty.dlock.redis.script")
local schema = require("resty.dlock.core.schema")
local lua_type = type
local lua_pairs = pairs
local lua_tostring = tostring
local math_floor = math.floor
local check_str = check.str
local lockKey = script.lockKey
local MAX_KEY = options.MAX_KEY_LEN
local renewable = options.renewable
local allOptions = schema.compile("acquire_all options", options.ACQUIRE_ALL, {labels = ""})
--- Most keys one acquire_all takes: one script call carries them all (and their queues and fences).
_M.MAX_KEYS = 64
--- The keys of an acquire_all: a list of 1 to MAX_KEYS distinct valid keys, in
-- the caller's order; nil and the error naming the bad value otherwise.
local function keyList(keys)
    if lua_type(keys) ~= "table" then
        return check.fail("acquire_all needs a list of keys", keys)
    end
    local t = keys
    local n = #t
    if n == 0 then
        return check.fail("acquire_all needs at least one key", keys)
    end
    if n > _M.MAX_KEYS then
        return check.fail("acquire_all takes at most " .. lua_tostring(_M.MAX_KEYS) .. " keys", n)
    end
    local count = 0
    for k in lua_pairs(t) do
        if lua_type(k) ~= "number" or k < 1 or k > n or math_floor(k) ~= k then
            return check.fail("acquire_all's keys must be a list (1..n), with no other fields", k)
        end
        count = count + 1
    end
    if count ~= n then
        return check.fail("acquire_all's keys must be a list with no holes", keys)
    end
    local out = {}
    local seen = {}
    for i = 1, n do
        local k, kerr = check_str("keys[" .. lua_tostring(i) .. "]", t[i], MAX_KEY)
        if k == nil then
            return nil, kerr
        end
        if seen[k] ~= nil then
            return check.fail(
                "acquire_all's keys must be distinct: keys[" .. lua_tostring(i) .. "] repeats an earlier key",
                k
            )
        end
        seen[k] = true
        out[#out + 1] = k
    end
    return out, nil
end
--- An acquire_all's arguments read: nil, then the keys, their Redis keys (the
-- prefix in front: lockKey), ttl, wait, renew and on_lost, with the factory's defaults;
-- or the error naming the bad value, alone.
function _M.acquireAll(store, keys, opts)
    local list, lerr = keyList(keys)
    if list == nil then
        return lerr
    end
    local ttl = store.ttl
    local wait = store.wait
    local renew = false
    local onLost
    if opts ~= nil then
        local v, err = allOptions(opts)
        if v == nil then
            return err
        end
        ttl = v.ttl or ttl
        wait = v.wait or wait
        renew = v.renew
        onLost = v.on_lost
        local rerr = renewable(renew, ttl)
        if rerr ~= nil then
            return rerr
        end
    end
    local rkeys = {}
    for i = 1, #list do
        local lk, kerr = lockKey(store.prefix, list[i], store.prefix .. list[i], store.redis.slotted)
        if lk == nil then
            return kerr
        end
        rkeys[i] = lk
    end
    return nil, list, rkeys, ttl, wait, renew, onLost
end
return _M
