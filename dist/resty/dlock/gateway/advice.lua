-- Generated from src/resty/dlock/gateway/advice.ts by TypeScriptToLua: edit that file, not this one.
-- What the request tracking tells the operator: a setup that hides a request's
-- end, said once; a keeper that cannot run, said once per guard, worker and
-- interval (a timer refused on every request would fill the error log).
local _M = {}
local check = require("resty.dlock.core.check")
local quiet = require("resty.dlock.core.quiet")
local ngx_log = ngx.log
local ERR = ngx.ERR
local WARN = ngx.WARN
local quiet_due_for = quiet.dueFor
local quiet_more = quiet.more
local warnedUnlogged = {}
--- A request of guard `name` ended without log(): once per guard and worker.
function _M.unlogged(name)
    if warnedUnlogged[name] ~= nil then
        return
    end
    warnedUnlogged[name] = true
    ngx_log(
        WARN,
        "dlock: guard ",
        name,
        ": a request ended without log() (its final location runs none, ",
        "e.g. after error_page, try_files or X-Accel-Redirect); its lease was released late and a client abort ",
        "could not be seen: add log_by_lua_block { require(\"resty.dlock.gateway\").log() } at http level"
    )
end
local warnedBlind = false
--- This ngx_lua cannot tell whether a request lives: once per worker.
function _M.blind()
    if warnedBlind then
        return
    end
    warnedBlind = true
    ngx_log(WARN, "dlock: gateway: this ngx_lua does not let us see when a request is over: only log() ", "ends a lease, so put log_by_lua_block { require(\"resty.dlock.gateway\").log() } at http level")
end
--- Per guard, its line about a keeper that could not start.
local keeperless = {}
--- The keeper could not start (no timer): requests that end without log() are not noticed meanwhile.
function _M.noKeeper(name, err)
    local n = quiet_due_for(keeperless, name)
    if n > 0 then
        ngx_log(ERR, "dlock: guard ", name, ": ", check.reason(err), quiet_more(n))
    end
end
return _M
