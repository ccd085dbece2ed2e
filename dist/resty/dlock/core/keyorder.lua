-- Generated from src/resty/dlock/core/keyorder.ts by TypeScriptToLua: edit that file, not this one.
-- The one order in which every caller of acquire_all takes keys it cannot take
-- in one script call (Cluster keys of several slots, and any set while it waits):
-- sorted by Redis key, so no two callers can each hold what the other waits for.
local _M = {}
local scripts = require("resty.dlock.redis.scripts")
local table_sort = table.sort
local hashed = scripts.hashed
local function byRkey(a, b)
    return a[1] < b[1]
end
--- The keys' indexes sorted by Redis key.
local function sorted(rkeys)
    local pairsOf = {}
    for i = 1, #rkeys do
        pairsOf[i] = {rkeys[i], i}
    end
    table_sort(pairsOf, byRkey)
    local order = {}
    for i = 1, #pairsOf do
        order[i] = pairsOf[i][2]
    end
    return order
end
--- Cluster keys of more than one slot: the order to take them in; nil when one call can take them all.
function _M.of(slotted, rkeys)
    if not slotted then
        return nil
    end
    local h = hashed(rkeys[1])
    for i = 2, #rkeys do
        if hashed(rkeys[i]) ~= h then
            return sorted(rkeys)
        end
    end
    return nil
end
-- Exported by name: this module's own uses of them are locals, not lookups in its exports table.
_M.sorted = sorted
return _M
