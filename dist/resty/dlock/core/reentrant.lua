-- Generated from src/resty/dlock/core/reentrant.ts by TypeScriptToLua: edit that file, not this one.
-- Reentrancy (dlock.new({ reentrant = true })): a request (or a timer, outside
-- requests) that acquires a key it already holds gets a nested lease at once,
-- counted here, per worker; the Redis key stays one plain string with a PX
-- expiry, so other clients (node-redlock, redis-py) still see an ordinary
-- lock. The key is freed when the last of the nested leases is released.
--
-- Every lease of a reentrant factory is a handle on a shared hold: its fields
-- are the real lease's (ttl read through, as an extend changes it), release()
-- counts down, extend() and valid() are the real lease's. A hold is found
-- again only by the request that took it while that request is alive (a later
-- request can get the same address), or by the very coroutine that took it
-- outside requests.
local _M = {}
local check = require("resty.dlock.core.check")
local request = require("resty.dlock.core.request")
local co_running = coroutine.running
local lua_tostring = tostring
local lua_setmetatable = setmetatable
local lua_pairs = pairs
local lua_ipairs = ipairs
local notSelf = check.notSelf
--- Holds of this worker, by "<owner>\0<factory>\0<redis key>".
local holds = {}
--- enter() calls since holds whose owner is gone were last dropped.
local entered = 0
local PRUNE_EVERY = 64
--- The handles' metatable (its __index is set once the methods are).
local handleMt = {}
local handleMethods = {
    release = function(self)
        local bad = notSelf(self, handleMt, "lease:release()")
        if bad ~= nil then
            return nil, bad
        end
        if self._done then
            return nil, "not_owner"
        end
        local h = self._hold
        if h.count > 1 then
            h.count = h.count - 1
            self._done = true
            -- The key is no longer ours (it ran out, or the watchdog lost it): say so
            -- now, not only at the last release, which asks Redis.
            if not h.root:valid() then
                return nil, "not_owner"
            end
            return true, nil
        end
        local ok, err = h.root:release()
        if ok ~= nil or err == "not_owner" then
            self._done = true
            h.count = 0
            if holds[h.slot] == h then
                holds[h.slot] = nil
            end
        end
        return ok, err
    end,
    extend = function(self, ttl)
        local bad = notSelf(self, handleMt, "lease:extend()")
        if bad ~= nil then
            return nil, bad
        end
        if self._done then
            return nil, "not_owner"
        end
        return self._hold.root:extend(ttl)
    end,
    valid = function(self)
        if notSelf(self, handleMt, "lease:valid()") ~= nil then
            return false
        end
        return not self._done and self._hold.root:valid()
    end
}
handleMt.__index = function(x, k)
    if k == "ttl" then
        return x._hold.root.ttl
    end
    return handleMethods[k]
end
local function handle(h)
    local r = h.root
    local x = {
        key = r.key,
        token = r.token,
        fence = r.fence,
        shared = r.shared,
        _hold = h,
        _done = false
    }
    return lua_setmetatable(x, handleMt)
end
--- Who is asking: the request (by address), else the running coroutine.
local function owner()
    local a = request.anchor()
    if a ~= nil then
        return "r" .. lua_tostring(a.id), a, nil
    end
    local co = co_running()
    return lua_tostring(co), nil, co
end
--- A nested lease when the caller already holds rkey through this factory's
-- `factory` id, else nil. A hold whose lease is over (released, lost, expired)
-- or whose owner is gone is dropped.
function _M.nested(factory, rkey)
    local who, anchor, co = owner()
    local slot = who .. "\0" .. factory .. "\0" .. rkey
    local h = holds[slot]
    if h == nil then
        return nil
    end
    local same
    if h.anchor ~= nil then
        same = anchor ~= nil and request.alive(h.anchor) and h.anchor.id == anchor.id
    else
        same = h.co == co
    end
    if not same or not h.root:valid() then
        holds[slot] = nil
        return nil
    end
    h.count = h.count + 1
    return handle(h)
end
local function gone(h)
    if h.anchor ~= nil then
        return not request.alive(h.anchor)
    end
    return h.co == nil or request.finished(h.co)
end
--- Drop holds of requests and timers that ended without releasing: their
-- leases expire in Redis by their ttl; here they would only take memory.
local function prune()
    local dead = {}
    for slot, h in lua_pairs(holds) do
        if h.count == 0 or gone(h) or h.root._released then
            dead[#dead + 1] = slot
        end
    end
    for _, slot in lua_ipairs(dead) do
        holds[slot] = nil
    end
end
--- The first lease of rkey by this caller: registered, and handed out as a handle.
function _M.enter(factory, root)
    entered = entered + 1
    if entered >= PRUNE_EVERY then
        entered = 0
        prune()
    end
    local who, anchor, co = owner()
    local slot = who .. "\0" .. factory .. "\0" .. root._rkey
    local h = {root = root, count = 1, anchor = anchor, co = co, slot = slot}
    holds[slot] = h
    return handle(h)
end
return _M
