-- Generated from src/resty/dlock/core/dictcount.ts by TypeScriptToLua: edit that file, not this one.
-- Counters and marks in a shared dict that never push a lease's record out.
-- incr with an init value on a key the dict does not have, and add, make room
-- by evicting the least recently used keys when the dict is full: records of
-- held leases among them, which the ledger promises a full dict never loses
-- (it only fails to record new ones). A counter or mark with no room is
-- dropped instead: a count missed, a sweep skipped.
local _M = {}
--- dict[k] += n: the new value, or nil when k is new and the dict has no room for it.
function _M.count(dict, k, n)
    -- An existing key: incr takes no memory.
    local v = dict:incr(k, n)
    if v ~= nil then
        return v
    end
    if (dict:safe_add(k, n)) then
        return n
    end
    -- Added by another worker in between (or no room: nil again).
    local again = dict:incr(k, n)
    return again
end
--- add(k, v, ttl) only into free memory: true when k was not there and now is.
function _M.mark(dict, k, v, ttl)
    local ok = dict:safe_add(k, v, ttl)
    return ok == true
end
return _M
