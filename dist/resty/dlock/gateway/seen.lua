-- Generated from src/resty/dlock/gateway/seen.ts by TypeScriptToLua: edit that file, not this one.
-- Requests a guard has seen, found again when an internal redirect brings
-- them back (error_page, ngx.exec, try_files): with a fresh ngx.ctx, at the
-- same address. An anchor (core/request.lua) tells whether the request at an
-- address is still the one seen; those that are gone are swept once SWEEP
-- are kept.
local _M = {}
local request = require("resty.dlock.core.request")
local request_alive = request.alive
local lua_pairs = pairs
--- Entries kept before the gone ones are swept.
local SWEEP = 1000
function _M.create()
    return {byId = {}, count = 0}
end
--- The anchor kept for request id when that request is still running, else nil.
function _M.find(s, id)
    local a = s.byId[id]
    if a == nil or not request_alive(a) then
        return nil
    end
    return a
end
--- Keep a, the current request's anchor (not one nginx cannot watch: nothing would tell it gone).
function _M.put(s, a)
    if a.ref < 0 then
        return
    end
    local byId = s.byId
    if s.count >= SWEEP then
        for k, v in lua_pairs(byId) do
            if not request_alive(v) then
                byId[k] = nil
                s.count = s.count - 1
            end
        end
    end
    if byId[a.id] == nil then
        s.count = s.count + 1
    end
    byId[a.id] = a
end
return _M
