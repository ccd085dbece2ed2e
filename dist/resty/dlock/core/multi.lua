-- Generated from src/resty/dlock/core/multi.ts by TypeScriptToLua: edit that file, not this one.
-- Several keys, all or nothing: locks:acquire_all({ "a", "b" }, opts) returns one lease holding
-- every key, or nothing. Each key is a single lock's key (the token, PX ttl), so a set excludes
-- single-key holders key by key, and each is recorded, released, renewed and recovered as a single
-- lease is: the set's lease is its keys' leases (`_parts`, one per key, in the caller's order)
-- behind one face.
--
-- Taking them:
--   together   one script for all the keys (redis/multiscripts.lua) where they
--              can share a script call: standalone, Sentinel, and Cluster when
--              every key hashes to one slot (the same hash tag).
--   in order   otherwise (Cluster, keys of different slots): key by key in
--              sorted order, the keys taken given back at the first busy one.
--   majority   Redlock: the one script on every master, the majority decides
--              (redis/multiquorum.lua).
-- Either way nothing is held when an attempt fails. Waiting (wait > 0), once an attempt found a key
-- busy: the keys are taken one at a time in one global order (sorted by Redis key), each waiting in
-- its key's line (first come, first served) as a single acquire of it does, holding the keys before
-- it in that order. Every waiting caller takes keys in the same order, and a caller taking a set in
-- one go never waits holding anything, so no cycle of waits can form: no deadlock, whatever order
-- callers name the keys in, and each line serves its waiters in turn (no starvation). Once every
-- key is held, all are renewed to the full ttl at once, owner-checked; a key that ran out meanwhile
-- sends the set back to waiting, holding nothing.
local _M = {}
local acquire = require("resty.dlock.core.acquire")
local backend = require("resty.dlock.redis.backend")
local batch = require("resty.dlock.core.batch")
local lease = require("resty.dlock.core.lease")
local keyorder = require("resty.dlock.core.keyorder")
local meter = require("resty.dlock.core.meter")
local multilease = require("resty.dlock.core.multilease")
local multiquorum = require("resty.dlock.redis.multiquorum")
local multiscripts = require("resty.dlock.redis.multiscripts")
local multioptions = require("resty.dlock.core.multioptions")
local orphans = require("resty.dlock.core.orphans")
local retry = require("resty.dlock.core.retry")
local scripts = require("resty.dlock.redis.scripts")
local settle = require("resty.dlock.core.settle")
local clock = require("resty.dlock.core.clock")
local clock_sleep = clock.sleep
local clock_now = clock.now
local ngx_update_time = ngx.update_time
local lua_pairs = pairs
local lua_ipairs = ipairs
local lua_tostring = tostring
local lua_unpack = unpack
local math_min = math.min
local queueKey = scripts.queueKey
local fenceKey = backend.fenceKey
local REENTRANT = "dlock: acquire_all is refused by reentrant factories (reentrant = true): a set is never nested, " .. "and a key of it the caller already held would wait for itself"
--- Run the acquire script for the keys at `idx` (indexes into p.keys), making their leases when taken.
local function take(p, idx)
    local conf = p.store.redis
    local n = #idx
    local fenced = p.kind.fenced
    -- Redlock locks do not queue (dlock.lua): their keys alone.
    local quorum = not backend.queues(conf)
    local args = {}
    for j = 2, n do
        args[#args + 1] = p.rkeys[idx[j]]
    end
    if fenced then
        for j = 1, n do
            args[#args + 1] = fenceKey(conf, p.rkeys[idx[j]])
        end
    end
    if not quorum then
        for j = 1, n do
            args[#args + 1] = queueKey(p.rkeys[idx[j]], conf.slotted)
        end
    end
    args[#args + 1] = p.tok
    args[#args + 1] = p.ttl
    args[#args + 1] = n
    local s = multiscripts.acquire(n, quorum and 1 or (fenced and 3 or 2))
    local rkey = p.rkeys[idx[1]]
    local sent = clock_now() * 1000
    local res
    local err
    local fault
    if quorum then
        local rkeys = {}
        for j = 1, n do
            rkeys[j] = p.rkeys[idx[j]]
        end
        res, err, fault = multiquorum.call(conf, s, rkey, args, rkeys, p.tok, p.ttl)
    else
        res, err, fault = backend.call(conf, s, rkey, lua_unpack(args))
    end
    if res == nil then
        if fault == "lost" or fault == "replicas" then
            -- The keys may be (replicas: are) ours on the master: give them back, owner-checked, in the background.
            local cleanup = p.kind.drop or p.kind.release
            for j = 1, n do
                orphans.adoptAcquire(conf, cleanup, p.rkeys[idx[j]], p.tok)
            end
            local what = fault == "lost" and "; acquire outcome unknown, owner-checked cleanup scheduled" or "; released"
            return lua_tostring(err) .. what, 0, nil, "failed"
        end
        return err or "dlock: redis failed", 0, nil, fault or "failed"
    end
    local at, pttl = multiscripts.busy(res)
    if at ~= nil and fault == "lost" then
        p.stray = true
    end
    if at ~= nil then
        return "busy", idx[at], pttl, nil
    end
    for j = 1, n do
        local i = idx[j]
        local fence
        if fenced then
            fence = multiscripts.fenceOf(res, j)
        end
        if fence ~= nil then
            p.fences[i] = fence
        end
        if p.parts[i] == nil then
            p.parts[i] = lease.make(p.store, p.kind, p.keys[i], p.rkeys[i], p.tok, p.ttl, sent, fence)
        end
    end
    return "OK", 0, nil, nil
end
--- Try the whole set once: together, or key by key in order (a key already ours is skipped).
local function attempt(p)
    local order = p.order
    if order == nil then
        local all = {}
        for i = 1, #p.keys do
            all[i] = i
        end
        return take(p, all)
    end
    for k = 1, #order do
        local i = order[k]
        local held = p.parts[i]
        if held ~= nil then
            if held.fence ~= nil then
                p.fences[i] = held.fence
            end
        else
            local what, at, pttl, fault = take(p, {i})
            if what ~= "OK" then
                return what, at, pttl, fault
            end
        end
    end
    return "OK", 0, nil, nil
end
--- Give back every key the plan holds (owner-checked; unconfirmed ones go to the background sweep).
local function giveBack(p)
    local list = {}
    for _, l in lua_pairs(p.parts) do
        list[#list + 1] = l
    end
    p.parts = {}
    p.fences = {}
    if #list > 0 then
        batch.releaseAll(list, true)
    end
end
--- The set's lease, from the plan's parts.
local function leaseOf(p)
    local parts = {}
    local fences = {}
    for i = 1, #p.keys do
        parts[i] = p.parts[i]
        if p.kind.fenced then
            fences[i] = p.fences[i]
        end
    end
    return multilease.make(
        p.keys,
        parts,
        p.tok,
        p.ttl,
        p.kind.fenced and fences or nil,
        p.order == nil and p.store.redis.topology ~= "redlock"
    )
end
--- Wait for the keys one at a time in the global order, each in its key's
-- line, holding those before it: true once all are held; false, why
-- (timeout, an error) and retry_after otherwise (what is held stays in the plan).
local function inOrder(p, deadline)
    local order = p.order or keyorder.sorted(p.rkeys)
    for k = 1, #order do
        local i = order[k]
        ngx_update_time()
        local left = deadline - clock_now() * 1000
        if left <= 0 then
            return false, "timeout", nil
        end
        local l, err, retryAfter = acquire.acquire(p.store, p.kind, p.keys[i], p.rkeys[i], p.tok, p.ttl, left)
        if l == nil then
            return false, err, retryAfter
        end
        p.parts[i] = l
        if l.fence ~= nil then
            p.fences[i] = l.fence
        end
    end
    return true, nil, nil
end
--- Every key held after waiting: renewed to the full ttl at once, owner-checked
-- (the first keys were taken a while ago). false when one was lost meanwhile
-- (its ttl ran out while we waited for another), or Redis did not answer.
local function confirm(p)
    local list = {}
    local targets = {}
    local mss = {}
    for i = 1, #p.keys do
        local l = p.parts[i]
        list[i] = l
        targets[i] = {rkey = l._rkey, token = p.tok}
        mss[i] = p.ttl
    end
    local sent = clock_now() * 1000
    local out = backend.batch(p.store.redis, p.kind.extend, targets, mss)
    local all = true
    for i = 1, #list do
        local reply = out.replies[i]
        if reply == 1 then
            settle.extended(list[i], reply, p.ttl, sent)
        elseif reply ~= nil then
            settle.ranOut(list[i])
        end
        if reply ~= 1 then
            all = false
        end
    end
    return all
end
--- Take the set: in one go; when a key is busy and `wait` allows, in the global
-- order, waiting in each key's line (see the top of this file).
local function takeAll(p, wait)
    local deadline = clock_now() * 1000 + wait
    local backoff = retry.FIRST_BACKOFF
    while true do
        local what, _at, pttl, fault = attempt(p)
        if what == "OK" then
            return leaseOf(p), nil, nil
        end
        giveBack(p)
        ngx_update_time()
        local left = deadline - clock_now() * 1000
        if what ~= "busy" then
            if fault ~= "transient" or left <= 0 then
                return nil, what, nil
            end
            local nap = math_min(retry.poll(backoff, nil), left)
            backoff = math_min(backoff * 2, retry.MAX_BACKOFF)
            clock_sleep(nap / 1000)
        else
            if wait == 0 then
                return nil, "busy", pttl
            end
            if left <= 0 then
                return nil, "timeout", pttl
            end
            local held, err, retryAfter = inOrder(p, deadline)
            if held and confirm(p) then
                return leaseOf(p), nil, nil
            end
            -- Gave up, or a key was lost while we waited: nothing stays held.
            giveBack(p)
            if not held then
                return nil, err, retryAfter or pttl
            end
        end
    end
end
--- locks:acquire_all(keys, opts): one lease holding every key; nil, "busy",
-- retry_after (wait = 0, a key held); nil, "timeout", retry_after; nil,
-- "dlock: ..." on bad input or a Redis failure. Nothing is held but on success.
function _M.acquireAll(f, keys, opts)
    local store = f._store
    local bad, list, rkeys, ttl, wait, renew, onLost = multioptions.acquireAll(store, keys, opts)
    if bad ~= nil then
        return nil, bad, nil
    end
    if f._reentrant then
        return nil, REENTRANT, nil
    end
    ngx_update_time()
    local t0 = clock_now()
    local tok, terr = f._mint()
    if tok == nil then
        meter.refused(store.meter, terr)
        return nil, terr, nil
    end
    local p = {
        store = store,
        kind = f._kind,
        keys = list,
        rkeys = rkeys,
        order = keyorder.of(store.redis.slotted, rkeys),
        tok = tok,
        ttl = ttl,
        parts = {},
        fences = {},
        stray = false
    }
    local m, err, retryAfter = takeAll(p, wait)
    if m == nil then
        -- Only now that no attempt will use tok again: a sweep could delete a key a later attempt took.
        if p.stray then
            for i = 1, #rkeys do
                orphans.adoptAcquire(store.redis, p.kind.release, rkeys[i], tok)
            end
        end
        meter.refused(store.meter, err)
        return nil, err, retryAfter
    end
    -- The set is held from now: its wait ends here, and its keys' hold times start here.
    ngx_update_time()
    local now = clock_now()
    meter.acquired(store.meter, now - t0)
    for _, l in lua_ipairs(m._parts) do
        l._since = now * 1000
    end
    if renew then
        local werr = multilease.watch(m, onLost)
        if werr ~= nil then
            return nil, werr, nil
        end
    end
    return m, nil, nil
end
return _M
