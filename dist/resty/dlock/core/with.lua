-- Generated from src/resty/dlock/core/with.ts by TypeScriptToLua: edit that file, not this one.
-- The `with` method of locks and semaphores: run a function while holding a
-- key, and release whatever the function does.
local _M = {}
local check = require("resty.dlock.core.check")
local settle = require("resty.dlock.core.settle")
local lua_type = type
local lua_select = select
-- pcall typed for any number of results, so they pass through without a table.
local protect = pcall
--- Release, then hand on fn's results (pcall's `ok, ...`) or its error. A
-- release Redis did not confirm goes to the background sweep and, when fn
-- succeeded, is the result: the caller must not believe the key free.
local function finish(l, ...)
    local released, rerr = l:release()
    local stuck = released == nil and rerr ~= "not_owner"
    if stuck then
        -- A reentrant factory's handle (reentrant.lua): the lease left to the sweep is its root, which it released last.
        local hold = l._hold
        settle.orphan(hold ~= nil and hold.root or l)
    end
    local ok, e = lua_select(1, ...)
    if ok ~= true then
        return nil, "dlock: callback failed while holding " .. l.key .. ": " .. check.text(e)
    end
    if stuck then
        return nil, "dlock: could not release " .. l.key .. " after the callback (retried until it expires): " .. check.reason(rerr)
    end
    return lua_select(2, ...)
end
--- Run fn(...) while holding key; the lease is released whatever fn does.
-- Returns fn's results, or nil, err when the lease was not acquired, fn
-- raised, or the release failed.
function _M.withLease(self, key, opts, fn, ...)
    -- The factory's own acquire: locks:with() and sem:with() share this function.
    if lua_type(self) ~= "table" or lua_type(self.acquire) ~= "function" then
        return check.fail("with() was called without its object (with \".\" where \":\" was meant)", self)
    end
    if lua_type(fn) ~= "function" then
        return check.fail("with needs a function", fn)
    end
    local l, err, retryAfter = self:acquire(key, opts)
    if l == nil then
        return nil, err, retryAfter
    end
    return finish(l, protect(fn, ...))
end
return _M
