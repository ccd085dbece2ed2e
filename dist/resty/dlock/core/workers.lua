-- Generated from src/resty/dlock/core/workers.ts by TypeScriptToLua: edit that file, not this one.
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
