-- Generated from src/resty/dlock/redis/multiscripts.ts by TypeScriptToLua: edit that file, not this one.
-- The script that takes several lock keys at once, all or nothing
-- (locks:acquire_all, core/multi.lua). The keys stay what a single lock's key
-- is: a plain string holding the token, with a PX expiry, so a set's holder
-- excludes single-key holders (and node-redlock's multi-resource locks, which
-- SET the same shape) key by key, and is released, extended and recovered key
-- by key with the single-key scripts (scripts.lua).
--
-- Keys a script touches must share a Cluster slot: the caller runs it once for
-- the whole set where they do (standalone, Sentinel, a Cluster slot by hash
-- tags), else once per key, in sorted order (core/multi.lua).
local _M = {}
local scripts = require("resty.dlock.redis.scripts")
local script = scripts.script
local CHANNEL = scripts.CHANNEL
local GRANT = scripts.GRANT
local lua_type = type
local lua_pairs = pairs
--- The script's reply when every key was taken: "OK", or { "OK", fence1, ..., fenceN } when fenced.
local function took(reply)
    return reply == "OK" or lua_type(reply) == "table" and reply[1] == "OK"
end
-- KEYS: the n lock keys, (their n fence counters,) their n waiters' queues
-- (none under Redlock, whose locks do not queue).
-- ARGV[1] token, ARGV[2] ttl ms, ARGV[3] n. A key is free for the set when it
-- is missing and nobody waits in its line, or when it already holds our token
-- (handed to us in line: core/multi.lua waits for one key at a time). A free
-- key with a live line is handed to the line's first waiter, as a single
-- lock's acquire does (scripts.lua LINE): a set never cuts in. Returns "OK"
-- (or { "OK", fences... }) with every key set, else { i, pttl } for the first
-- key that is not free, and nothing was written but that hand-over.
local BODY = "local n = tonumber(ARGV[3])\nlocal per = #KEYS / n\nlocal fenced = per == 3\nlocal qat = per > 1 and #KEYS - n\nlocal t, now\nlocal function head(Q)\n  if not now then\n    t = redis.call('TIME')\n    now = t[1] * 1000 + math.floor(t[2] / 1000)\n  end\n" .. scripts.FIRST_LIVE .. "end\nfor i = 1, n do\n  local k = KEYS[i]\n  local v = redis.pcall('GET', k)\n  if type(v) == 'table' then\n    return redis.error_reply('WRONGTYPE lock key ' .. k .. ' holds a ' .. redis.call('TYPE', k).ok .. ', not a lock')\n  end\n  if v and v ~= ARGV[1] then return { i, redis.call('PTTL', k) } end\n  local Q = qat and KEYS[qat + i]\n  if not v and Q and redis.call('EXISTS', Q) == 1 then\n    local h = head(Q)\n    if h then\n      local who = string.match(h, '^%d+ (.*)$')\n      redis.call('ZREM', Q, h)\n      if who ~= ARGV[1] then\n        redis.call('SET', k, who, 'PX', " .. tostring(GRANT) .. ")\n        redis.pcall('PUBLISH', '" .. CHANNEL .. "' .. k, 'g" .. tostring(GRANT) .. " ' .. who)\n        return { i, " .. tostring(GRANT) .. " }\n      end\n    end\n  end\nend\nlocal out = { 'OK' }\nfor i = 1, n do\n  redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2])\n  if fenced then out[i + 1] = redis.call('INCR', KEYS[n + i]) end\nend\nif fenced then return out end\nreturn 'OK'\n"
--- Scripts by key count: the source is one, Redis is told how many of the arguments are keys.
local bySize = {}
--- The acquire of n lock keys, with (fenced) or without fence counters: KEYS
-- as above, `per` keys per lock key (1: the key alone; 2: key and queue; 3:
-- key, fence, queue).
-- No `undo`: pipeline.lua takes back a gone caller's acquire by its first key
-- alone; a set whose caller left before the reply came expires by its ttl.
function _M.acquire(n, per)
    local size = n * per
    local s = bySize[size * 4 + per]
    if s == nil then
        s = script("acquire_all", BODY, size, took)
        bySize[size * 4 + per] = s
    end
    return s
end
--- A busy reply: the index (1-based, in the order sent) of the first key not free, and its holder's PTTL (nil: no TTL).
function _M.busy(reply)
    if lua_type(reply) ~= "table" then
        return nil, nil
    end
    local r = reply
    local i = r[1]
    local pttl = r[2]
    if lua_type(i) ~= "number" then
        return nil, nil
    end
    return i, lua_type(pttl) == "number" and pttl >= 0 and pttl or nil
end
--- The fence of key i (1-based) in a fenced "OK" reply.
function _M.fenceOf(reply, i)
    if lua_type(reply) ~= "table" then
        return nil
    end
    local f = reply[i + 1]
    return lua_type(f) == "number" and f or nil
end
local function anyOne(reply)
    if lua_type(reply) ~= "table" then
        return false
    end
    for _, v in lua_pairs(reply) do
        if v == 1 then
            return true
        end
    end
    return false
end
-- KEYS: the n lock keys of a set, their n queues; ARGV[1] token. Per key, as
-- the single lock's release (scripts.lua RELEASE_QUEUED) answers: 0 when not
-- ours; when deleted, the token of the first waiter in line, handed the key,
-- or 1 with nobody in line.
local RELEASE_BODY = "local n = #KEYS / 2\nlocal t, now\nlocal out = {}\nfor i = 1, n do\n  local k, Q = KEYS[i], KEYS[n + i]\n  if redis.call('GET', k) ~= ARGV[1] then\n    out[i] = 0\n  else\n    out[i] = 1\n    if redis.call('EXISTS', Q) == 0 then\n      redis.call('DEL', k)\n    else\n      if not now then\n        t = redis.call('TIME')\n        now = t[1] * 1000 + math.floor(t[2] / 1000)\n      end\n      local h\n      while true do\n        h = redis.call('ZRANGE', Q, 0, 0)[1]\n        if not h or tonumber(string.match(h, '^(%d+) ')) > now then break end\n        redis.call('ZREM', Q, h)\n      end\n      if h then\n        local who = string.match(h, '^%d+ (.*)$')\n        redis.call('SET', k, who, 'PX', " .. tostring(GRANT) .. ")\n        redis.call('ZREM', Q, h)\n        redis.pcall('PUBLISH', '" .. CHANNEL .. "' .. k, 'g" .. tostring(GRANT) .. " ' .. who)\n        out[i] = who\n      else\n        redis.call('DEL', k)\n        redis.pcall('PUBLISH', '" .. CHANNEL .. "' .. k, '')\n      end\n    end\n  end\nend\nreturn out\n"
-- RELEASE_BODY without the queues (KEYS the n lock keys): a Cluster slot
-- migrating (script.lua `alone`). As scripts.lua RELEASE: 1 when deleted, and
-- every waiter woken, who take turns meanwhile; 0 when not ours.
local RELEASE_ALONE_BODY = "local out = {}\nfor i = 1, #KEYS do\n  out[i] = 0\n  if redis.call('GET', KEYS[i]) == ARGV[1] then\n    redis.call('DEL', KEYS[i])\n    redis.pcall('PUBLISH', '" .. CHANNEL .. "' .. KEYS[i], '')\n    out[i] = 1\n  end\nend\nreturn out\n"
-- KEYS: the n lock keys of a set; ARGV[1] token, ARGV[2] ms. Per key 1 when
-- extended, 0 when not ours (scripts.lua EXTEND).
local EXTEND_BODY = "local out = {}\nfor i = 1, #KEYS do\n  if redis.call('GET', KEYS[i]) == ARGV[1] then\n    out[i] = redis.call('PEXPIRE', KEYS[i], ARGV[2])\n  else\n    out[i] = 0\n  end\nend\nreturn out\n"
local releases = {}
local extends_ = {}
--- The release of a set of n keys whose keys share a call: KEYS the keys then their queues, ARGV[1] the token; a reply per key.
function _M.release(n)
    local s = releases[n]
    if s == nil then
        local alone = script("release_all", RELEASE_ALONE_BODY, n, nil, nil, scripts.FREES)
        s = script("release_all", RELEASE_BODY, 2 * n, nil, alone, scripts.FREES)
        releases[n] = s
    end
    return s
end
--- The extend of a set of n keys whose keys share a call: KEYS the keys, ARGV[1] the token, ARGV[2] ms; a reply per key.
function _M.extend(n)
    local s = extends_[n]
    if s == nil then
        s = script("extend_all", EXTEND_BODY, n, anyOne, nil, scripts.FREES)
        extends_[n] = s
    end
    return s
end
return _M
