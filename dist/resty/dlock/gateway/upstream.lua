-- Generated from src/resty/dlock/gateway/upstream.ts by TypeScriptToLua: edit that file, not this one.
-- Did a request's backend perhaps go on after nginx was done with it? A guard
-- that took a key for the request must then keep it to its ttl (unrenewed),
-- not release it beside a backend still at work.
local _M = {}
local vars = require("resty.dlock.gateway.vars")
local ngx = ngx
local str_find = string.find
local str_gmatch = string.gmatch
local var_get = vars.get
--- A try in $upstream_status and the like: ", " between tries, " : " between upstream groups.
local TRY = "[^%s,:]+"
--- Did an upstream time out once nginx had connected to it (a 504 whose
-- $upstream_connect_time is a time)? A connect that timed out is a 504 too,
-- and "-": no backend got the request.
local function timedOutConnected(statuses)
    local nextStatus = str_gmatch(statuses, TRY)
    local nextTime = str_gmatch(var_get("upstream_connect_time") or "", TRY)
    local s = nextStatus()
    while s ~= nil do
        local t = nextTime()
        if s == "504" and t ~= nil and t ~= "-" then
            return true
        end
        s = nextStatus()
    end
    return false
end
--- In the log phase: may the backend still be running the request, so that its
-- key must be kept? Yes when an upstream timed out once connected (a 504 in
-- $upstream_status, whatever error_page made of the answer, also when the
-- next upstream answered): nginx closed the connection, the application
-- behind it goes on.
-- Yes when the client went away while an upstream worked. A connection nginx
-- closed itself (444, after the upstream answered: error_page to return 444) is
-- no client's abort. A client that gave up a download counts as one even when
-- the upstream had sent it whole: nginx's byte counts include FastCGI's and
-- gRPC's framing (and the proxy's variables are gone by the log phase), so a
-- response cut short cannot be told from a whole one for every upstream.
function _M.aborted()
    local tried = var_get("upstream_status")
    if tried ~= nil and (str_find(tried, "504", 1, true)) ~= nil and timedOutConnected(tried) then
        return true
    end
    if var_get("request_completion") == "OK" or ngx.status == 444 then
        return false
    end
    local upstream = var_get("upstream_addr")
    return upstream ~= nil and upstream ~= ""
end
return _M
