-- Generated from src/resty/dlock/core/dictcount.ts by TypeScriptToLua: edit that file, not this one.
local _M = {}
--- dict[k] += n: the new value, or nil when k is new and the dict has no room for it.
function _M.count(dict, k, n)
    local v = dict:incr(k, n)
    if v ~= nil then
        return v
    end
    if (dict:safe_add(k, n)) then
        return n
    end
    local again = dict:incr(k, n)
    return again
end
--- add(k, v, ttl) only into free memory: true when k was not there and now is.
function _M.mark(dict, k, v, ttl)
    local ok = dict:safe_add(k, v, ttl)
    return ok == true
end
return _M
