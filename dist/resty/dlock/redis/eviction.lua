-- Generated from src/resty/dlock/redis/eviction.ts by TypeScriptToLua: edit that file, not this one.
-- Can a Redis evict lock keys? With maxmemory set and any policy but noeviction, Redis deletes keys
-- that have a ttl when it runs out of memory, and every lock key has one: an
-- evicted lock lets a second holder in, silently. Each worker asks each pool's
-- Redis once, on the pool's first fresh connection (a pool is an endpoint, db
-- and credentials: another user may not be allowed to ask), and logs what it
-- found once per endpoint. The finding is also kept in the factory's shared
-- dict (the "dlock" dict for a conf parsed without one), so the status page of
-- any worker shows it:
--   "redis:ep:<endpoint>"  "1 <checked_at_ms> <maxmemory> <policy>"  or  "0 <checked_at_ms> <why not>"
--   "redis:n"              how many endpoints are recorded
--   "redis:i:<n>"          the n-th endpoint (status reads these, it never walks the dict)
-- A Redis whose policy changes is checked again after an nginx reload.
local _M = {}
local hints = require("resty.dlock.redis.hints")
local clock = require("resty.dlock.core.clock")
local late = require("resty.dlock.core.late")
local dictcount = require("resty.dlock.core.dictcount")
local lua_pairs = pairs
local turned_away = hints.turnedAway
local ERR = ngx.ERR
local NOTICE = ngx.NOTICE
local WARN = ngx.WARN
local lua_tonumber = tonumber
local lua_tostring = tostring
local lua_type = type
local math_floor = math.floor
local ngx_log = ngx.log
local clock_now = clock.now
local on_its_way = late.onItsWay
local ngx_shared = ngx.shared
local str_match = string.match
local EVICTION_KEY = "redis:ep:"
local EVICTION_COUNT = "redis:n"
local EVICTION_INDEX = "redis:i:"
--- Pools this worker has checked.
local checkedPools = {}
--- Pools a request of this worker is checking, and since when. A check whose
-- caller went away in the middle (a client abort, a killed thread: never
-- resumed) counts only as long as its two round trips can take: then the next
-- fresh connection checks.
local checking = {}
--- This worker's findings, per endpoint.
local findings = {}
--- "<endpoint> <kind>" this worker has logged.
local logged = {}
--- Per shared dict: the finding (per endpoint) this worker last put there.
local sharedTo = {}
local function finding(checked, policy, maxmemory, why, checkedAt)
    local policyEvicts = checked and policy ~= "noeviction"
    return {
        checked = checked,
        policy = policy,
        maxmemory = maxmemory,
        policyEvicts = policyEvicts,
        canEvict = policyEvicts and maxmemory > 0,
        why = why,
        checkedAt = checkedAt
    }
end
--- Keep the finding for this worker; log it once per endpoint and worker.
local function remember(conf, e)
    local ep = conf.endpoint
    local old = findings[ep]
    -- Another pool of the same server may not be allowed to ask: never let that hide an answer.
    if e.checked or old == nil or not old.checked then
        findings[ep] = e
    end
    local kind = "ok"
    if not e.checked then
        kind = "unknown"
    elseif e.canEvict then
        kind = "evicts"
    elseif e.policyEvicts then
        kind = "dormant"
    end
    if kind ~= "ok" and logged[ep .. " " .. kind] == nil then
        logged[ep .. " " .. kind] = true
        if kind == "evicts" then
            ngx_log(
                ERR,
                "dlock: redis ",
                ep,
                " can evict lock keys (maxmemory-policy ",
                e.policy,
                ", maxmemory ",
                e.maxmemory,
                "): an evicted lock lets a second holder in; set maxmemory-policy noeviction, or give locks a Redis of their own"
            )
        elseif kind == "dormant" then
            ngx_log(
                WARN,
                "dlock: redis ",
                ep,
                " has maxmemory-policy ",
                e.policy,
                " but no maxmemory: lock keys cannot be ",
                "evicted yet, they can as soon as maxmemory is set; set maxmemory-policy noeviction, or give locks a Redis of their own"
            )
        else
            ngx_log(
                NOTICE,
                "dlock: redis ",
                ep,
                ": could not check whether it can evict lock keys (",
                e.why,
                "); make sure its maxmemory-policy is noeviction"
            )
        end
    end
end
--- Put this worker's finding about conf's endpoint into conf's shared dict, when
-- that dict does not have it yet. Runs on fresh connections only: the check of a
-- pool runs once, but another factory (another dict) may share its pool.
local function share(conf)
    local ep = conf.endpoint
    local e = findings[ep]
    -- A factory passes its dict along with its `redis` option (core/options.lua); "dlock" is the default dict of status and the gateway.
    local dict = conf.dict or ngx_shared.dlock
    if e == nil or dict == nil then
        return
    end
    local done = sharedTo[dict]
    if done == nil then
        done = {}
        sharedTo[dict] = done
    end
    if done[ep] == e then
        return
    end
    local at = math_floor(e.checkedAt * 1000)
    local v = "0 " .. lua_tostring(at) .. " " .. e.why
    if e.checked then
        v = "1 " .. lua_tostring(at) .. " " .. lua_tostring(e.maxmemory) .. " " .. e.policy
    end
    -- safe_*: a full dict must not evict lease records for this (and then the next fresh connection tries again).
    local added, err = dict:safe_add(EVICTION_KEY .. ep, v)
    local stored = added == true
    if added then
        local n = dictcount.count(dict, EVICTION_COUNT, 1)
        if n ~= nil then
            dict:safe_set(EVICTION_INDEX .. lua_tostring(n), ep)
        end
    elseif err == "exists" then
        -- An answer replaces what is there (an older answer, or another worker's "could not check");
        -- "could not check" never replaces anything.
        stored = not e.checked or (dict:safe_set(EVICTION_KEY .. ep, v)) == true
    end
    if stored then
        done[ep] = e
    end
end
--- Ask Redis for maxmemory and maxmemory-policy, log and record the finding.
-- Returns an error only when the connection failed (then the next fresh connection asks again).
local function ask(red, conf)
    -- Marked before the round trip: other requests of this worker opening fresh connections meanwhile skip it.
    checking[conf.pool] = clock_now()
    local policy
    local maxmemory
    local info, ierr = red:info("memory")
    if info == nil then
        checking[conf.pool] = nil
        return "dlock: redis " .. conf.endpoint .. ": " .. lua_tostring(ierr) .. " during the eviction check"
    end
    if lua_type(info) == "string" then
        local p = str_match(info, "[\r\n]maxmemory_policy:([%w%-]+)")
        local m = str_match(info, "[\r\n]maxmemory:(%d+)")
        policy = p
        maxmemory = lua_tonumber(m)
    end
    local why = ""
    if info == false then
        -- Not refused to this user: the server turned the connection away, and closes it.
        local away = turned_away(conf.endpoint, ierr)
        if away ~= nil then
            checking[conf.pool] = nil
            return away
        end
    end
    if policy == nil or maxmemory == nil then
        -- INFO refused (ACL) or without the fields: CONFIG GET, unless renamed or refused too.
        why = "INFO memory: " .. (info == false and lua_tostring(ierr) or "no maxmemory fields")
        local cfg, cerr = red:config("get", "maxmemory*")
        if cfg == nil then
            checking[conf.pool] = nil
            return "dlock: redis " .. conf.endpoint .. ": " .. lua_tostring(cerr) .. " during the eviction check"
        end
        if lua_type(cfg) == "table" then
            local t = cfg
            for i = 1, #t - 1, 2 do
                if t[i] == "maxmemory-policy" then
                    policy = lua_tostring(t[i + 1])
                end
                if t[i] == "maxmemory" then
                    maxmemory = lua_tonumber(t[i + 1])
                end
            end
        end
        if policy == nil or maxmemory == nil then
            why = why .. "; CONFIG GET: " .. (cfg == false and lua_tostring(cerr) or "no maxmemory fields")
        end
    end
    if policy ~= nil and maxmemory ~= nil then
        remember(conf, finding(true, policy, maxmemory, "", clock_now()))
    else
        remember(conf, finding(false, "", 0, why, clock_now()))
    end
    checkedPools[conf.pool] = true
    checking[conf.pool] = nil
    return nil
end
local function decode(v)
    if lua_type(v) ~= "string" then
        return nil
    end
    local at, maxmemory, policy = str_match(v, "^1 (%d+) (%d+) (%S+)$")
    if policy ~= nil then
        return finding(true, policy, lua_tonumber(maxmemory) or 0, "", (lua_tonumber(at) or 0) / 1000)
    end
    local uat, why = str_match(v, "^0 (%d+) (.*)$")
    if why ~= nil then
        return finding(false, "", 0, why, (lua_tonumber(uat) or 0) / 1000)
    end
    return nil
end
--- Prefer an answer over "could not check", then the newest.
local function better(a, b)
    if b == nil then
        return true
    end
    if a.checked ~= b.checked then
        return a.checked
    end
    return a.checkedAt > b.checkedAt
end
--- Eviction findings per endpoint: this worker's and those other workers shared
-- in `dicts`. Reads a few keys per endpoint, never walks a dict.
function _M.evictions(dicts)
    local out = {}
    for ep, e in lua_pairs(findings) do
        out[ep] = e
    end
    for k = 1, #dicts do
        local dict = dicts[k]
        local n = dict:get(EVICTION_COUNT)
        if lua_type(n) == "number" then
            for i = 1, n do
                local ep = dict:get(EVICTION_INDEX .. lua_tostring(i))
                if lua_type(ep) == "string" then
                    local e = decode((dict:get(EVICTION_KEY .. ep)))
                    if e ~= nil and better(e, out[ep]) then
                        out[ep] = e
                    end
                end
            end
        end
    end
    return out
end
--- On a fresh connection: ask its Redis, unless this worker has asked for the
-- pool already, and share the finding with conf's dict. An error only when the
-- connection failed meanwhile (then the next fresh connection asks again).
function _M.check(red, conf)
    local since = checking[conf.pool]
    -- INFO, then perhaps CONFIG GET, each within read_timeout; and a second more.
    if checkedPools[conf.pool] == nil and not on_its_way(since, clock_now(), 2 * conf.read_timeout / 1000) then
        local err = ask(red, conf)
        if err ~= nil then
            return err
        end
    end
    share(conf)
    return nil
end
return _M
