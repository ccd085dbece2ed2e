-- Generated from src/resty/dlock/redis/majority.ts by TypeScriptToLua: edit that file, not this one.
-- What a Redlock quorum decides from the answers of its masters (quorum.lua
-- collects them): an acquire counts when a majority took the key within its
-- validity time, a release once a majority answered, an extend on a majority.
local _M = {}
local pipeline = require("resty.dlock.redis.pipeline")
local scripts = require("resty.dlock.redis.scripts")
local clock = require("resty.dlock.core.clock")
local pipelined = pipeline.call
local clock_now = clock.now
local update_time = ngx.update_time
local lua_type = type
local lua_tostring = tostring
local math_floor = math.floor
local str_format = string.format
local tbl_concat = table.concat
local tbl_sort = table.sort
--- The allowance for clock drift between masters over a ttl, in ms (redis.io: 1 % plus 2 ms).
local function drift(ttl)
    return math_floor(ttl * 0.01) + 2
end
local function majority(conf)
    return math_floor(#conf.nodes / 2) + 1
end
local function nowMs()
    update_time()
    return clock_now() * 1000
end
local function errorsOf(conf, v)
    local list = {}
    for i = 1, #conf.nodes do
        local e = v.errors[i]
        if e ~= nil then
            list[#list + 1] = e
        end
    end
    return tbl_concat(list, "; ")
end
--- The fault of a decision that failed for want of answers: "lost" when any master may have acted.
local function faultOf(conf, v)
    for i = 1, #conf.nodes do
        if v.faults[i] == "lost" then
            return "lost"
        end
    end
    return "failed"
end
local function count(conf, v, want)
    local yes = 0
    local answered = 0
    for i = 1, #conf.nodes do
        local r = v.replies[i]
        if r ~= nil then
            answered = answered + 1
            if r == want then
                yes = yes + 1
            end
        end
    end
    return yes, answered
end
--- Release (1: deleted somewhere, 0: not ours anywhere) once a majority answered.
function _M.decideRelease(conf, v)
    local deleted, answered = count(conf, v, 1)
    if answered >= majority(conf) then
        return deleted > 0 and 1 or 0, nil, nil
    end
    return nil, "dlock: redis " .. conf.endpoint .. ": only " .. lua_tostring(answered) .. " of " .. lua_tostring(#conf.nodes) .. " masters answered the release (" .. errorsOf(conf, v) .. ")", faultOf(conf, v)
end
--- Extend: 1 on a majority within the time; 0 when a majority can no longer say yes.
function _M.decideExtend(conf, v, ttl, started)
    local extended, answered = count(conf, v, 1)
    local n = #conf.nodes
    local elapsed = nowMs() - started
    if extended >= majority(conf) and elapsed + drift(ttl) < ttl then
        return 1, nil, nil
    end
    if answered - extended > n - majority(conf) then
        return 0, nil, nil
    end
    if extended >= majority(conf) then
        -- A majority said yes, too late: the keys of the first to say it may have expired meanwhile.
        return nil, str_format("dlock: redis %s: extended on a majority, but only after %d ms of a %d ms ttl", conf.endpoint, elapsed, ttl), "transient"
    end
    return nil, "dlock: redis " .. conf.endpoint .. ": extended on " .. lua_tostring(extended) .. " of " .. lua_tostring(n) .. " masters, a majority is " .. lua_tostring(majority(conf)) .. " (" .. errorsOf(conf, v) .. ")", faultOf(conf, v)
end
--- Acquire: "OK" when a majority took the key in time. Otherwise the masters
-- that took it give it back, and the answer is "busy" when a master that
-- answered holds the key for someone else (the ms until enough of those keys
-- expire that the masters that answered could make a majority); with fault
-- "lost" when a master that did not answer may hold our key, or one that took
-- it could not give it back (the caller has it cleaned up, owner-checked,
-- everywhere). Else an error: "lost" as just said, "transient" when too few
-- masters could be reached or it took too long (a waiting acquire tries again).
function _M.decideAcquire(conf, v, rkey, tok, ttl, started)
    local n = #conf.nodes
    local need = majority(conf)
    local took = count(conf, v, "OK")
    local elapsed = nowMs() - started
    if took >= need and elapsed + drift(ttl) < ttl then
        return "OK", nil, nil
    end
    local undone = true
    local unknown = false
    for i = 1, n do
        if v.replies[i] == "OK" then
            local r = pipelined(conf.nodes[i], scripts.RELEASE, rkey, tok)
            if r == nil then
                undone = false
            end
        elseif v.faults[i] == "lost" then
            unknown = true
        end
    end
    local pttls = {}
    for i = 1, n do
        local r = v.replies[i]
        if lua_type(r) == "number" then
            pttls[#pttls + 1] = r
        end
    end
    if #pttls > 0 and took < need then
        -- Someone else holds the key where masters answered, and no majority said
        -- yes: busy, whatever the silent masters did (a key one of them took for
        -- us is a minority's, never a lease, and is cleaned up). Telling "lost"
        -- here ended a contended acquire at once (a waiter's too) while one master
        -- was paused, and a dedup guard with on_error = allow let the duplicate in.
        tbl_sort(pttls)
        local expire = need - took
        if expire > #pttls then
            expire = #pttls
        end
        local after = pttls[expire]
        if not undone or unknown then
            return after, nil, "lost"
        end
        return after, nil, nil
    end
    if not undone or unknown then
        return nil, "dlock: redis " .. conf.endpoint .. ": took the key on " .. lua_tostring(took) .. " of " .. lua_tostring(n) .. " masters, and some may still hold it (" .. errorsOf(conf, v) .. ")", "lost"
    end
    if took >= need then
        return nil, str_format("dlock: redis %s: took the key on a majority, but only after %d ms of a %d ms ttl", conf.endpoint, elapsed, ttl), "transient"
    end
    return nil, "dlock: redis " .. conf.endpoint .. ": took the key on " .. lua_tostring(took) .. " of " .. lua_tostring(n) .. " masters, a majority is " .. lua_tostring(need) .. " (" .. errorsOf(conf, v) .. ")", "transient"
end
--- The Redlock extend of a valid lease (KEYS[1] lock key, ARGV[1] token,
-- ARGV[2] ttl ms): 1 when our key was re-expired, or put back where it is
-- gone (a master restarted without persistence, or its clock ran ahead); 0
-- when someone else's key is there. Re-expiring alone, restarts of different
-- masters added up over a lease's life until a second holder got a majority.
-- Sent only while the lease is valid (core/settle.lua extendScript): a majority
-- holds our key then, so nobody else can hold it where it is gone. allow-oom
-- (FREES): a full master must not refuse to renew the keys it holds; the one
-- it puts back is a small string.
local EXTEND_RESTORING = scripts.script(
    "redlock extend",
    "\nlocal v = redis.call('GET', KEYS[1])\nif v == ARGV[1] then\n  return redis.call('PEXPIRE', KEYS[1], ARGV[2])\nend\nif v then\n  return 0\nend\nif redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then\n  return 1\nend\nreturn 0\n",
    1,
    scripts.isOne,
    nil,
    scripts.FREES
)
-- Exported by name: this module's own uses of them are locals, not lookups in its exports table.
_M.drift = drift
_M.majority = majority
_M.nowMs = nowMs
_M.EXTEND_RESTORING = EXTEND_RESTORING
return _M
