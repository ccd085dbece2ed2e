-- Generated from src/resty/dlock/core/ledger.ts by TypeScriptToLua: edit that file, not this one.
-- Local bookkeeping of the leases this nginx instance holds, in a lua_shared_dict
-- so every worker (and the status endpoint) sees them. One record per lock key,
-- one per permit for semaphores (several holders share a key):
--   "l:" .. keyspace .. redis key [.. " " .. token]  ->  "<pid> <expires_ms> <token> <key>"
-- (keyspace: RedisConf.keyspace, "<8 hex>|": one dict may keep the leases of
-- several Redis servers or dbs whose keys have the same names)
-- The record expires with the lease, so a crashed worker leaves nothing behind.
-- Records only serve held(), status pages and local waiting; exclusion never
-- depends on them (the token in Redis decides), so a full dict loses records,
-- not safety.
local _M = {}
local clock = require("resty.dlock.core.clock")
local quiet = require("resty.dlock.core.quiet")
local dictcount = require("resty.dlock.core.dictcount")
local clock_now = clock.now
local quiet_due = quiet.due
local worker_pid = ngx.worker.pid
local ngx_log = ngx.log
local WARN = ngx.WARN
local math_floor = math.floor
local math_max = math.max
local math_min = math.min
local str_format = string.format
local str_sub = string.sub
local str_find = string.find
local str_match = string.match
local lua_type = type
local lua_tonumber = tonumber
local RECORD = "l:"
--- Tickets of waiters in a key's queue in Redis: "w:" .. keyspace .. redis key .. " " .. token, valued as leases.
local WAITING = "w:"
--- Dict key counting leases whose record the dict could not take (it was full).
_M.UNRECORDED = "c:ledger:unrecorded"
--- How many leases this nginx could not record since it started (the dict was full).
function _M.unrecorded(dict)
    local v = dict:get(_M.UNRECORDED)
    return lua_type(v) == "number" and v or 0
end
--- Get a dict ready for records: create the UNRECORDED counter now, while there
-- is room, so that counting works once the dict is full (an incr of an
-- existing number needs no memory).
function _M.prepare(dict)
    dict:safe_add(_M.UNRECORDED, 0)
end
--- The dict key of a lease's record.
function _M.recordKey(space, rkey, token, shared)
    -- One format, not a chain of concatenations (each makes a string of its own).
    return shared and str_format("%s%s%s %s", RECORD, space, rkey, token) or RECORD .. space .. rkey
end
local function encode(token, key, expires)
    -- One format, not a chain of concatenations (one CAT each); not a tail call (see lease.make).
    local v = str_format("%d %d %s %s", worker_pid(), expires, token, key)
    return v
end
-- A full dict fails every acquire: one warning per worker and interval,
-- saying how many leases went unrecorded since the previous one.
local full = quiet.make()
local function unrecordable(dict, key, err)
    dictcount.count(dict, _M.UNRECORDED, 1)
    local missed = quiet_due(full)
    if missed > 0 then
        ngx_log(
            WARN,
            "dlock: shared dict full: ",
            missed,
            " lease(s) not recorded since the last warning (latest ",
            key,
            ": ",
            err,
            "); held(), status and local waiting miss them, exclusion is unaffected"
        )
    end
end
--- Record a new lease: when its record expires (epoch ms) and the record as
-- written (drop and move take it back), or nil when the dict could not take it
-- (counted in UNRECORDED).
function _M.record(dict, rec, token, key, ttl)
    local expires = math_floor(clock_now() * 1000) + ttl
    local v = encode(token, key, expires)
    local ok, err = dict:safe_set(rec, v, ttl / 1000)
    if not ok then
        unrecordable(dict, key, err)
        return nil, nil
    end
    return expires, v
end
--- Record a waiter's ticket in its key's queue, for as long as it waits: if its
-- worker dies, crash recovery takes the ticket back. The record's dict key, or
-- nil when the dict is full (then the ticket is skipped at its deadline).
function _M.waiting(dict, space, rkey, token, key, ms)
    local rec = str_format("%s%s%s %s", WAITING, space, rkey, token)
    local ok = dict:safe_set(rec, encode(token, key, math_floor(clock_now() * 1000) + ms), ms / 1000)
    return ok and rec or nil
end
--- The token of the record, and when it expires (epoch ms).
local function tokenOf(dict, rec)
    local v = dict:get(rec)
    if lua_type(v) ~= "string" then
        return nil, 0
    end
    local e, t = str_match(v, "^%d+ (%d+) (%S+) ")
    return t, lua_tonumber(e) or 0
end
--- The pid and expiry (epoch ms) of the holder recorded under `rec`, or nil when none in this nginx.
function _M.holder(dict, rec)
    local v = dict:get(rec)
    if lua_type(v) ~= "string" then
        return nil, 0
    end
    local pid, expires = str_match(v, "^(%d+) (%d+) ")
    if pid == nil then
        return nil, 0
    end
    return lua_tonumber(pid), lua_tonumber(expires) or 0
end
--- Drop the record if it is still this lease's (a newer lease of the key, in any
-- worker, has a token of its own). The get and the delete are two dict calls:
-- a successor in another worker that records in between loses its record,
-- which costs bookkeeping, never exclusion. Returns when the deleted record
-- would have expired (epoch ms), or nil when there was none of this lease.
-- For the records of other workers' leases (crash recovery) and of waiters;
-- a lease's own record goes with drop.
function _M.forget(dict, rec, token)
    local t, expires = tokenOf(dict, rec)
    if t ~= token then
        return nil
    end
    dict:delete(rec)
    return expires
end
--- Drop a lease's own record, `v` as record() or move() wrote it, if the dict
-- still holds it: a newer lease of the key, in any worker, wrote a record of
-- its own (tokens are unique per lease), which stays. As forget, without
-- reading the record apart: the strings compare as one. True when deleted.
function _M.drop(dict, rec, v)
    local now = dict:get(rec)
    if now ~= v then
        return false
    end
    dict:delete(rec)
    return true
end
--- Drop a lease's own record once Redis confirmed that the lease still held
-- its key when the release deleted it (backend.confirmsOwner): no newer lease of
-- the key can have been taken before that, so the record under `rec` is this
-- lease's, or one a lease before it left (its release read it apart and kept
-- it), or none. One dict call where drop makes two; drop for every other ending.
function _M.dropOwned(dict, rec)
    dict:delete(rec)
end
--- A lease's own record `v` moved to expire ttl ms from now, after a successful
-- extend: the record as written and its expiry (epoch ms), or nil when the dict
-- no longer holds v (a newer lease's record) or could not take the new one.
function _M.move(dict, rec, v, token, key, ttl)
    local now = dict:get(rec)
    if now ~= v then
        return nil, 0
    end
    local expires = math_floor(clock_now() * 1000) + ttl
    local nv = encode(token, key, expires)
    if not (dict:safe_set(rec, nv, ttl / 1000)) then
        return nil, 0
    end
    return nv, expires
end
--- The lease a record stands for, or nil when `v` is not a record.
local function parse(v, nowMs)
    if lua_type(v) ~= "string" then
        return nil
    end
    local pid, expires, token, key = str_match(v, "^(%d+) (%d+) (%S+) (.*)$")
    if key == nil then
        return nil
    end
    local exp = lua_tonumber(expires) or 0
    return {
        key = key,
        token = token,
        pid = lua_tonumber(pid) or 0,
        expires_at = exp / 1000,
        ttl = math_max(0, exp - nowMs)
    }
end
--- Every record now, with its Redis key, and the dict keys that start with
-- `other` (two characters: crash recovery's marks). Walks the whole dict:
-- once per worker start, never per request.
function _M.records(dict, other)
    local out = {}
    local others = {}
    local keys = dict:get_keys(0)
    local nowMs = clock_now() * 1000
    for i = 1, #keys do
        local k = keys[i]
        local what = str_sub(k, 1, 2)
        if what == RECORD or what == WAITING then
            local l = parse((dict:get(k)), nowMs)
            if l ~= nil then
                local tail = " " .. l.token
                local tokened = str_sub(k, -#tail) == tail
                local rkey = tokened and str_sub(k, 3, -#tail - 1) or str_sub(k, 3)
                local space = ""
                if (str_find(rkey, "^%x%x%x%x%x%x%x%x|")) ~= nil then
                    space = str_sub(rkey, 1, 9)
                    rkey = str_sub(rkey, 10)
                end
                local waiting = what == WAITING
                out[#out + 1] = {
                    rec = k,
                    space = space,
                    rkey = rkey,
                    key = l.key,
                    token = l.token,
                    pid = l.pid,
                    shared = tokened and not waiting,
                    waiting = waiting
                }
            end
        elseif what == other then
            others[#others + 1] = k
        end
    end
    return out, others
end
--- At most `max` leases recorded now (0: all, walking the whole dict), and
-- whether there are (or may be) more. get_keys(n) returns the first n keys of
-- the whole dict, counters and other data included, and locks the dict while
-- it copies them: ask for some more than needed and double while that is not
-- enough, looking at 4 * max + 1024 keys at most (plus `others`: keys the
-- caller knows the dict holds besides records), so a status page stays cheap
-- however many leases are held.
local function list(dict, max, others)
    if others == nil then
        others = 0
    end
    local bound = max == 0 and 0 or max * 4 + 1024 + others
    local nowMs = clock_now() * 1000
    local n = max == 0 and 0 or math_min(max + 64, bound)
    while true do
        local keys = dict:get_keys(n)
        local found = {}
        local more = false
        for i = 1, #keys do
            local k = keys[i]
            if str_sub(k, 1, 2) == RECORD then
                local l = parse((dict:get(k)), nowMs)
                if l ~= nil then
                    if max > 0 and #found == max then
                        more = true
                        break
                    end
                    found[#found + 1] = l
                end
            end
        end
        -- Done with one lease too many, when every key was seen, or at the bound.
        if n == 0 or more or #keys < n or n >= bound then
            return found, more or n > 0 and #keys >= n
        end
        n = math_min(n * 2, bound)
    end
end
--- Every lease recorded now. Walks the dict's keys: meant for held(), not hot paths nor scrapes.
function _M.held(dict)
    local all = list(dict, 0)
    return all
end
-- Exported by name: this module's own uses of them are locals, not lookups in its exports table.
_M.list = list
return _M
