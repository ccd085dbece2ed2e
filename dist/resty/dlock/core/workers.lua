-- Generated from src/resty/dlock/core/workers.ts by TypeScriptToLua: edit that file, not this one.
-- What a worker does as it starts (dlock.init_worker(), from
-- init_worker_by_lua), besides crash recovery's sweep: things a reload must
-- not leave undone, such as the probe of a breaker the workers before it
-- opened (their timers went with them, and an idle guard gets no request to
-- start one).
local _M = {}
local lua_pcall = pcall
local ngx_log = ngx.log
local ERR = ngx.ERR
local hooks = {}
--- Run fn in every worker as it starts (registered before the workers fork, in init_by_lua).
function _M.onStart(fn)
    hooks[#hooks + 1] = fn
end
--- The worker starts: every hook, one failing not stopping the others.
function _M.started()
    for i = 1, #hooks do
        local ok, err = lua_pcall(hooks[i])
        if not ok then
            ngx_log(ERR, "dlock: at worker start: ", err)
        end
    end
end
return _M
