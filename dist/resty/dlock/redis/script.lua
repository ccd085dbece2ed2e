-- Generated from src/resty/dlock/redis/script.ts by TypeScriptToLua: edit that file, not this one.
-- What a Redis script of lua-resty-dlock is (its SHA1 computed locally, its
-- keys, what its reply says about a write), where the keys built on a lock
-- key live, and how a per-target script is called. The scripts themselves:
-- scripts.lua (locks, semaphores) and records.lua (idempotency records).
local _M = {}
local check = require("resty.dlock.core.check")
local tokens = require("resty.dlock.core.token")
local sha1_bin = ngx.sha1_bin
local lua_type = type
local str_find = string.find
local str_sub = string.sub
-- Every script declares itself to Redis 7 (a shebang line with flags), so that
-- Redis decides before the script runs, not at its first write:
--   WRITES   takes memory (a lock, a permit, a ticket, a record). Refused whole
--            when Redis is out of memory (maxmemory with noeviction: "OOM
--            command not allowed") or read-only (a replica: READONLY), so no
--            mode can write part of its work. Without flags Redis only refuses
--            a script's first write: the semaphore's prune counted as one, and
--            its ZADD then granted permits past maxmemory.
--   FREES    gives back (release, drop) or only moves an expiry (extend): runs
--            out of memory too (allow-oom), or a full Redis would keep every
--            held key until its ttl.
-- Scripts touch only the keys they are given (KEYS), all in one Cluster slot,
-- as Redis 7 requires of scripts with flags. Redis 6 does not know the shebang
-- (it answers a compile error): see the README.
local WRITES = "#!lua\n"
_M.FREES = "#!lua flags=allow-oom\n"
function _M.script(name, body, keys, written, alone, flags)
    if keys == nil then
        keys = 1
    end
    if flags == nil then
        flags = WRITES
    end
    local src = flags .. body
    return {
        name = name,
        src = src,
        sha = tokens.hex(sha1_bin(src)),
        keys = keys,
        written = written,
        alone = alone,
        undo = nil
    }
end
function _M.isOk(reply)
    return reply == "OK"
end
function _M.isOkFenced(reply)
    return lua_type(reply) == "table" and reply[1] == "OK"
end
function _M.isOne(reply)
    return reply == 1
end
--- The part of a key Redis Cluster hashes: the inside of the first non-empty {...}, else the whole key.
local function hashed(key)
    local open = str_find(key, "{", 1, true)
    if open ~= nil then
        local close = str_find(key, "}", open + 1, true)
        if close ~= nil and close > open + 1 then
            local inside = str_sub(key, open + 1, close - 1)
            return inside
        end
    end
    return key
end
--- Does the key carry a hash tag of its own (then keys built on it share its slot)?
local function tagged(key)
    return hashed(key) ~= key
end
--- The Redis key of lock key k (rkey: prefix .. k). On a Cluster its queue,
-- fence and readers (below) must share its slot: a "}" in a key with no hash
-- tag would end their "{" .. rkey .. "}" tag early, so such a key is
-- "{prefix}key", in the prefix's slot (refused with no prefix, or a braced one).
local function lockKey(prefix, k, rkey, slotted)
    if not slotted or (str_find(rkey, "}", 1, true)) == nil or tagged(rkey) then
        return rkey, nil
    end
    if prefix == "" or (str_find(prefix, "[{}]")) ~= nil then
        return check.fail("key must not hold \"}\" outside a {hash tag} on a Redis Cluster with a prefix that is empty or " .. "holds braces (its queue could not share its slot)", k)
    end
    return "{" .. prefix .. "}" .. k, nil
end
--- The waiters' queue of lock key rkey. Under Cluster it must share the lock
-- key's slot: a hash tag of the whole key, unless it has one (then the suffix
-- keeps it). Elsewhere it starts with the lock key, so ACL key patterns that
-- let a user at the locks (~dlock:*) let it at their queues.
local function queueKey(rkey, slotted)
    return slotted and not tagged(rkey) and "{" .. rkey .. "}:queue" or rkey .. ":queue"
end
--- The readers of lock key rkey (shared locks, rwscripts.lua): a sorted set
-- placed as queueKey places the queue, in the lock key's slot.
local function readersKey(rkey, slotted)
    return slotted and not tagged(rkey) and "{" .. rkey .. "}:readers" or rkey .. ":readers"
end
--- Run a per-target script (release, extend, drop) for one target through a
-- backend's call, with the keys and arguments batches send: KEYS[1] the key
-- (and KEYS[2] its waiters' queue for two-key scripts; its readers and then
-- its queue for three-key ones), ARGV[1] the token (and ARGV[2] ms, when given).
function _M.forTarget(call, conf, s, rkey, token, ms)
    if s.keys == 3 then
        -- Readers' scripts: the lock key, its readers, its queue.
        local q = queueKey(rkey, conf.slotted)
        local r = readersKey(rkey, conf.slotted)
        if ms == nil then
            return call(conf, s, rkey, r, q, token)
        end
        return call(conf, s, rkey, r, q, token, ms)
    end
    if s.keys == 2 then
        local q = queueKey(rkey, conf.slotted)
        if ms == nil then
            return call(conf, s, rkey, q, token)
        end
        return call(conf, s, rkey, q, token, ms)
    end
    if ms == nil then
        return call(conf, s, rkey, token)
    end
    return call(conf, s, rkey, token, ms)
end
-- Exported by name: this module's own uses of them are locals, not lookups in its exports table.
_M.tagged = tagged
_M.lockKey = lockKey
_M.queueKey = queueKey
_M.readersKey = readersKey
_M.hashed = hashed
return _M
