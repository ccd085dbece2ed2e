--[[ Generated with https://github.com/TypeScriptToLua/TypeScriptToLua ]]
local ____exports = {}
local acquire = require("resty.dlock.core.acquire")
local backend = require("resty.dlock.redis.backend")
local batch = require("resty.dlock.core.batch")
local check = require("resty.dlock.core.check")
local lease = require("resty.dlock.core.lease")
local meter = require("resty.dlock.core.meter")
local multiscripts = require("resty.dlock.redis.multiscripts")
local options = require("resty.dlock.core.options")
local orphans = require("resty.dlock.core.orphans")
local retry = require("resty.dlock.core.retry")
local scripts = require("resty.dlock.redis.scripts")
local settle = require("resty.dlock.core.settle")
local watchdog = require("resty.dlock.core.watchdog")
local ngx_ = ngx
local ngx_now = ngx.now
local ngx_update_time = ngx.update_time
local ngx_log = ngx.log
local ERR = ngx.ERR
local lua_setmetatable = setmetatable
local lua_pcall = pcall
local lua_pairs = pairs
local lua_tostring = tostring
local lua_unpack = unpack
local table_sort = table.sort
local math_min = math.min
local hashed = scripts.hashed
local queueKey = scripts.queueKey
local fenceKey = backend.fenceKey
local REDLOCK = "dlock: acquire_all is refused with redis.redlock: not built yet (taking a set on each master " .. "and deciding by majority would be sound, but the quorum backend runs single-key scripts only)"
local REENTRANT = "dlock: acquire_all is refused by reentrant factories (reentrant = true): a set is never nested, " .. "and a key of it the caller already held would wait for itself"
--- Release parts (owner-checked, one round trip per endpoint): not_owner when
-- one was not ours (now, or when an extend or the watchdog found it gone), or
-- the last error.
local function releaseParts(parts)
    local open = {}
    local notOwner = false
    for i = 1, #parts do
        local p = parts[i]
        if not p._released then
            p._releasing = true
            open[#open + 1] = p
        elseif not p._releasing then
            notOwner = true
        end
    end
    if #open == 0 then
        return nil, "not_owner"
    end
    local first = open[1]
    local targets = {}
    for i = 1, #open do
        targets[i] = {rkey = open[i]._rkey, token = first.token}
    end
    local out = backend.batch(first._store.redis, first._kind.release, targets)
    local err
    for i = 1, #open do
        local l = open[i]
        local reply = out.replies[i]
        if reply == nil then
            settle.unconfirmed(l, out.faults[i], true)
            err = out.errors[i]
        else
            local ok = settle.released(l, reply)
            if ok == nil then
                notOwner = true
            end
        end
    end
    if err ~= nil then
        return nil, err
    end
    if notOwner then
        return nil, "not_owner"
    end
    return true, nil
end
local multiMethods = {
    valid = function(self)
        if self._lost then
            return false
        end
        local parts = self._parts
        for i = 1, #parts do
            if not parts[i]:valid() then
                return false
            end
        end
        return true
    end,
    release = function(self)
        local perr = lease.phaseError("release")
        if perr ~= nil then
            return nil, perr
        end
        return releaseParts(self._parts)
    end,
    extend = function(self, ttl)
        local perr = lease.phaseError("extend")
        if perr ~= nil then
            return nil, perr
        end
        local ms = self.ttl
        if ttl ~= nil then
            local n, terr = options.checkTtl(ttl)
            if n == nil then
                return nil, terr
            end
            ms = n
        end
        local parts = self._parts
        for i = 1, #parts do
            if parts[i]._released then
                releaseParts(parts)
                return nil, "not_owner"
            end
        end
        local first = parts[1]
        local targets = {}
        local mss = {}
        for i = 1, #parts do
            targets[i] = {rkey = parts[i]._rkey, token = first.token}
            mss[i] = ms
        end
        local sent = ngx_now() * 1000
        local out = backend.batch(first._store.redis, first._kind.extend, targets, mss)
        local err
        local notOwner = false
        for i = 1, #parts do
            local l = parts[i]
            local reply = out.replies[i]
            if reply == nil then
                settle.unconfirmed(l, out.faults[i], false)
                err = out.errors[i]
            else
                local ok = settle.extended(l, reply, ms, sent)
                if ok == nil then
                    notOwner = true
                end
            end
        end
        if notOwner then
            releaseParts(parts)
            return nil, "not_owner"
        end
        if err ~= nil then
            return nil, err
        end
        self.ttl = ms
        return true, nil
    end
}
local multiMt = {__index = multiMethods}
--- The watchdog lost one key of m: the set is lost, said once to its holder.
local function partLost(m, why)
    if m._lost then
        return
    end
    m._lost = true
    local onLost = m._onLost
    if onLost ~= nil then
        local ok, err = lua_pcall(onLost, m, why)
        if not ok then
            ngx_log(
                ERR,
                "dlock: on_lost of the lease on ",
                m.key,
                " (acquire_all) raised: ",
                check.text(err)
            )
        end
    end
end
--- Renew every key of m (renew = true) until it is released; nil, or why the watchdog cannot run (m is given back).
local function watch(m, onLost)
    m._onLost = onLost
    local function told(l, why)
        return partLost(m, (l.key .. ": ") .. why)
    end
    local parts = m._parts
    for i = 1, #parts do
        local p = parts[i]
        p._onLost = told
        local err = watchdog.watch(p)
        if err ~= nil then
            for j = 1, #parts do
                watchdog.unwatch(parts[j])
            end
            releaseParts(parts)
            return err
        end
    end
    return nil
end
--- Run the acquire script for the keys at `idx` (indexes into p.keys), making their leases when taken.
local function take(p, idx)
    local store = p.store
    local conf = store.redis
    local n = #idx
    local fenced = p.kind.fenced
    local args = {}
    for j = 2, n do
        args[#args + 1] = p.rkeys[idx[j]]
    end
    if fenced then
        for j = 1, n do
            args[#args + 1] = fenceKey(conf, p.rkeys[idx[j]])
        end
    end
    for j = 1, n do
        args[#args + 1] = queueKey(p.rkeys[idx[j]], conf.slotted)
    end
    args[#args + 1] = p.tok
    args[#args + 1] = p.ttl
    args[#args + 1] = n
    local sent = ngx_now() * 1000
    local res, err, fault = backend.call(
        conf,
        multiscripts.acquire(n, fenced and 3 or 2),
        p.rkeys[idx[1]],
        lua_unpack(args)
    )
    if res == nil then
        if fault == "lost" or fault == "replicas" then
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
    if at ~= nil then
        return "busy", idx[at], pttl, nil
    end
    for j = 1, n do
        local i = idx[j]
        local ____fenced_0
        if fenced then
            ____fenced_0 = multiscripts.fenceOf(res, j)
        else
            ____fenced_0 = nil
        end
        local fence = ____fenced_0
        if fence ~= nil then
            p.fences[i] = fence
        end
        if not (p.parts[i] ~= nil) then
            p.parts[i] = lease.make(
                store,
                p.kind,
                p.keys[i],
                p.rkeys[i],
                p.tok,
                p.ttl,
                sent,
                fence
            )
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
    for ____, l in lua_pairs(p.parts) do
        list[#list + 1] = l
    end
    p.parts = {}
    p.fences = {}
    if #list > 0 then
        batch.releaseAll(list)
    end
end
local function byRkey(a, b)
    return a[1] < b[1]
end
--- Cluster keys of more than one slot: the order to take them in (sorted by Redis key); nil when one call can take them all.
local function orderOf(store, rkeys)
    if not store.redis.slotted then
        return nil
    end
    local h = hashed(rkeys[1])
    local one = true
    for i = 2, #rkeys do
        if hashed(rkeys[i]) ~= h then
            one = false
            break
        end
    end
    if one then
        return nil
    end
    local pairsOf = {}
    for i = 1, #rkeys do
        pairsOf[i] = {rkeys[i], i}
    end
    table_sort(pairsOf, byRkey)
    local order = {}
    for i = 1, #pairsOf do
        order[i] = pairsOf[i][2]
    end
    return order
end
--- Take the set, waiting in line for one busy key at a time while `wait` allows.
local function takeAll(p, wait)
    local deadline = ngx_now() * 1000 + wait
    local backoff = retry.FIRST_BACKOFF
    while true do
        local what, at, pttl, fault = attempt(p)
        if what == "OK" then
            local parts = {}
            local fences = {}
            for i = 1, #p.keys do
                parts[i] = p.parts[i]
                if p.kind.fenced then
                    fences[i] = p.fences[i]
                end
            end
            local ____p_keys__1_2 = p.keys[1]
            local ____p_keys_3 = p.keys
            local ____p_tok_4 = p.tok
            local ____p_ttl_5 = p.ttl
            local ____p_kind_fenced_1
            if p.kind.fenced then
                ____p_kind_fenced_1 = fences[1]
            else
                ____p_kind_fenced_1 = nil
            end
            local m = {
                key = ____p_keys__1_2,
                keys = ____p_keys_3,
                token = ____p_tok_4,
                ttl = ____p_ttl_5,
                fence = ____p_kind_fenced_1,
                fences = p.kind.fenced and fences or nil,
                shared = false,
                _parts = parts,
                _lost = false,
                _onLost = nil
            }
            return lua_setmetatable(m, multiMt), nil, nil
        end
        giveBack(p)
        ngx_update_time()
        local left = deadline - ngx_now() * 1000
        if what ~= "busy" then
            if fault ~= "transient" or left <= 0 then
                return nil, what, nil
            end
            local nap = math_min(
                retry.poll(backoff, nil),
                left
            )
            backoff = math_min(backoff * 2, retry.MAX_BACKOFF)
            ngx_.sleep(nap / 1000)
        else
            if wait == 0 then
                return nil, "busy", pttl
            end
            if left <= 0 then
                return nil, "timeout", pttl
            end
            local l, err, retryAfter = acquire.acquire(
                p.store,
                p.kind,
                p.keys[at],
                p.tok,
                p.ttl,
                left
            )
            if l == nil then
                return nil, err, retryAfter
            end
            p.parts[at] = l
            if l.fence ~= nil then
                p.fences[at] = l.fence
            end
        end
    end
end
--- locks:acquire_all(keys, opts): one lease holding every key; nil, "busy",
-- retry_after (wait = 0, a key held); nil, "timeout", retry_after; nil,
-- "dlock: ..." on bad input or a Redis failure. Nothing is held but on success.
function ____exports.acquireAll(f, keys, opts)
    local perr = lease.phaseError("acquire_all")
    if perr ~= nil then
        return nil, perr, nil
    end
    local store = f._store
    local list, ttlOrErr, wait, renew, onLost = options.acquireAll(store, keys, opts)
    if list == nil then
        return nil, ttlOrErr, nil
    end
    if store.redis.topology == "redlock" then
        return nil, REDLOCK, nil
    end
    if f.reentrant then
        return nil, REENTRANT, nil
    end
    ngx_update_time()
    local t0 = ngx_now()
    local tok, terr = f._mint()
    if tok == nil then
        meter.refused(store.meter, terr)
        return nil, terr, nil
    end
    local rkeys = {}
    for i = 1, #list do
        rkeys[i] = store.prefix .. list[i]
    end
    local p = {
        store = store,
        kind = f._kind,
        keys = list,
        rkeys = rkeys,
        order = orderOf(store, rkeys),
        tok = tok,
        ttl = ttlOrErr,
        parts = {},
        fences = {}
    }
    local m, err, retryAfter = takeAll(p, wait)
    if m == nil then
        meter.refused(store.meter, err)
        return nil, err, retryAfter
    end
    meter.acquired(store.meter, m._parts[1]._since / 1000 - t0)
    if renew then
        local werr = watch(m, onLost)
        if werr ~= nil then
            return nil, werr, nil
        end
    end
    return m, nil, nil
end
return ____exports
