-- Generated from src/resty/dlock/gateway/subrequests.ts by TypeScriptToLua: edit that file, not this one.
-- Leases taken in subrequests (a guard in rewrite_by_lua of a location reached
-- by ngx.location.capture or auth_request). nginx runs no log phase for a
-- subrequest: such leases end with their main request's log(), which finds
-- them by the connection the two share (inflight.lua); without any log() the
-- keeper ends them once the main request is gone.
local _M = {}
--- Per connection (its address), the ids of its subrequests holding leases.
local byConnection = {}
--- Connections in byConnection: nothing to look up at a log() while none.
local linked = 0
--- Subrequest rid, of the main request on connection conn, holds leases.
function _M.link(conn, rid)
    local list = byConnection[conn]
    if list == nil then
        list = {}
        byConnection[conn] = list
        linked = linked + 1
    end
    list[#list + 1] = rid
end
--- Subrequest rid's leases ended.
function _M.unlink(conn, rid)
    local list = byConnection[conn]
    if list == nil then
        return
    end
    local n = #list
    for i = 1, n do
        if list[i] == rid then
            list[i] = list[n]
            list[n] = nil
            break
        end
    end
    if #list == 0 then
        byConnection[conn] = nil
        linked = linked - 1
    end
end
--- Does any subrequest hold leases? (Until one does, a log() looks up nothing.)
function _M.any()
    return linked > 0
end
--- The subrequests of connection conn that hold leases (nil: none). unlink()
-- moves the last one into the place of the one it takes out: walk it from
-- the end.
function _M.of(conn)
    return byConnection[conn]
end
return _M
