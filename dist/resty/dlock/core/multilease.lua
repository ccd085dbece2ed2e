-- Generated from src/resty/dlock/core/multilease.ts by TypeScriptToLua: edit that file, not this one.
-- The lease of a set of keys (locks:acquire_all, core/multi.lua): one face on
-- its keys' own leases (`_parts`), which are what the shared dict records, the
-- watchdog renews and crash recovery gives back, each as a single lease. Its
-- release and extend run every key's owner-checked script in one round trip
-- per endpoint (backend.batch).
local _M = {}
local backend = require("resty.dlock.redis.backend")
local check = require("resty.dlock.core.check")
local lease = require("resty.dlock.core.lease")
local multiscripts = require("resty.dlock.redis.multiscripts")
local options = require("resty.dlock.core.options")
local scripts = require("resty.dlock.redis.scripts")
local settle = require("resty.dlock.core.settle")
local watchdog = require("resty.dlock.core.watchdog")
local clock = require("resty.dlock.core.clock")
local clock_now = clock.now
local ngx_log = ngx.log
local ERR = ngx.ERR
local lua_setmetatable = setmetatable
local lua_pcall = pcall
local lua_type = type
local lua_unpack = unpack
local notSelf = check.notSelf
--- The owner-checked release (or extend to ms) of every part, in one script
-- call when they share one (together), else one round trip per endpoint
-- (backend.batch): per part (aligned), the reply or the error and fault.
local function runAll(parts, together, release, ms)
    local first = parts[1]
    local conf = first._store.redis
    local n = #parts
    if together and n > 1 then
        local args = {}
        for i = 2, n do
            args[#args + 1] = parts[i]._rkey
        end
        if release then
            for i = 1, n do
                args[#args + 1] = scripts.queueKey(parts[i]._rkey, conf.slotted)
            end
        end
        args[#args + 1] = first.token
        if not release then
            args[#args + 1] = ms
        end
        local s = release and multiscripts.release(n) or multiscripts.extend(n)
        local res, err, fault = backend.call(conf, s, first._rkey, lua_unpack(args))
        local out = {replies = {}, errors = {}, faults = {}}
        local t = lua_type(res) == "table" and res or nil
        for i = 1, n do
            if t ~= nil then
                out.replies[i] = t[i]
            else
                out.errors[i] = err or "dlock: redis failed"
                out.faults[i] = fault or "failed"
            end
        end
        return out
    end
    local targets = {}
    local mss = {}
    for i = 1, n do
        targets[i] = {rkey = parts[i]._rkey, token = first.token}
        mss[i] = ms
    end
    if release then
        return backend.batch(conf, first._kind.release, targets, nil)
    end
    -- Redlock puts keys back only while every part is valid (settle.extendScript).
    local at = settle.nowMs()
    local s = settle.extendScript(first, at)
    for i = 2, n do
        if settle.extendScript(parts[i], at) ~= s then
            s = first._kind.extend
        end
    end
    return backend.batch(conf, s, targets, mss)
end
--- Release parts (owner-checked, in one call when together): not_owner when
-- one was not ours (now, or when an extend or the watchdog found it gone), or
-- the last error.
local function releaseParts(parts, together)
    local open = {}
    local notOwner = false
    for i = 1, #parts do
        local p = parts[i]
        if not p._released then
            p._releasing = true
            open[#open + 1] = p
        elseif not p._releasing then
            -- Over before any release of ours: found gone.
            notOwner = true
        end
    end
    if #open == 0 then
        return nil, "not_owner"
    end
    local out = runAll(open, together, true, 0)
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
--- The sets' metatable (its __index, the methods, is set once they are).
local multiMt = {}
local multiMethods = {
    valid = function(self)
        if notSelf(self, multiMt, "lease:valid()") ~= nil then
            return false
        end
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
        local bad = notSelf(self, multiMt, "lease:release()")
        if bad ~= nil then
            return nil, bad
        end
        local perr = lease.phaseError("release")
        if perr ~= nil then
            return nil, perr
        end
        return releaseParts(self._parts, self._together)
    end,
    extend = function(self, ttl)
        local bad = notSelf(self, multiMt, "lease:extend()")
        if bad ~= nil then
            return nil, bad
        end
        local perr = lease.phaseError("extend")
        if perr ~= nil then
            return nil, perr
        end
        local ms, terr = options.extendTtl(ttl, self.ttl)
        if ms == nil then
            return nil, terr
        end
        local parts = self._parts
        -- As a single renewed lease's: the watchdog renews each part a third of the way through its ttl.
        local rerr = options.renewable(watchdog.watches(parts[1]), ms)
        if rerr ~= nil then
            return nil, rerr
        end
        for i = 1, #parts do
            if parts[i]._released then
                releaseParts(parts, self._together)
                return nil, "not_owner"
            end
        end
        for i = 1, #parts do
            lease.quiesce(parts[i])
        end
        local sent = clock_now() * 1000
        -- Renewals of the parts sent meanwhile renew at this ttl (lease.lua _extendingMs).
        for i = 1, #parts do
            parts[i]._extendingMs = ms
        end
        local out = runAll(parts, self._together, false, ms)
        for i = 1, #parts do
            parts[i]._extendingMs = nil
        end
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
                else
                    watchdog.extended(l)
                end
            end
        end
        if notOwner then
            releaseParts(parts, self._together)
            return nil, "not_owner"
        end
        if err ~= nil then
            return nil, err
        end
        self.ttl = ms
        return true, nil
    end
}
multiMt.__index = multiMethods
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
function _M.watch(m, onLost)
    m._onLost = onLost
    local function told(l, why)
        return partLost(m, l.key .. ": " .. why)
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
            releaseParts(parts, m._together)
            return err
        end
    end
    return nil
end
--- The lease of keys (the caller's order) whose leases are parts (aligned), fences with fencing.
function _M.make(keys, parts, tok, ttl, fences, together)
    local m = {
        key = keys[1],
        keys = keys,
        token = tok,
        ttl = ttl,
        fence = fences and fences[1],
        fences = fences,
        shared = false,
        _parts = parts,
        _together = together,
        _lost = false,
        _onLost = nil
    }
    -- Not a tail call (see lease.make).
    local l = lua_setmetatable(m, multiMt)
    return l
end
return _M
