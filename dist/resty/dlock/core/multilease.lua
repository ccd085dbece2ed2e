--[[ Generated with https://github.com/TypeScriptToLua/TypeScriptToLua ]]
local ____exports = {}
local backend = require("resty.dlock.redis.backend")
local check = require("resty.dlock.core.check")
local lease = require("resty.dlock.core.lease")
local options = require("resty.dlock.core.options")
local settle = require("resty.dlock.core.settle")
local watchdog = require("resty.dlock.core.watchdog")
local ngx_now = ngx.now
local ngx_log = ngx.log
local ERR = ngx.ERR
local lua_setmetatable = setmetatable
local lua_pcall = pcall
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
function ____exports.watch(m, onLost)
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
--- The lease of keys (the caller's order) whose leases are parts (aligned), fences with fencing.
function ____exports.make(keys, parts, tok, ttl, fences)
    local ____keys__1_1 = keys[1]
    local ____keys_2 = keys
    local ____tok_3 = tok
    local ____ttl_4 = ttl
    local ____temp_0
    if fences ~= nil then
        ____temp_0 = fences[1]
    else
        ____temp_0 = nil
    end
    local m = {
        key = ____keys__1_1,
        keys = ____keys_2,
        token = ____tok_3,
        ttl = ____ttl_4,
        fence = ____temp_0,
        fences = fences,
        shared = false,
        _parts = parts,
        _lost = false,
        _onLost = nil
    }
    local l = lua_setmetatable(m, multiMt)
    return l
end
return ____exports
