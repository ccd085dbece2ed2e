-- Generated from src/resty/dlock/gateway/registry.ts by TypeScriptToLua: edit that file, not this one.
-- The guards made in this worker, in creation order: gateway.new adds them and
-- the status pages list them. A module of its own, so that the public gateway
-- module never hands out the list a status page reads.
local _M = {}
local listed = {}
--- Every guard made so far (to read).
function _M.all()
    return listed
end
--- How many guards there are: a guard with no name is named after its mode and this count.
function _M.count()
    return #listed
end
--- Is name taken by a guard already?
function _M.taken(name)
    for i = 1, #listed do
        if listed[i].name == name then
            return true
        end
    end
    return false
end
function _M.add(g)
    listed[#listed + 1] = g
end
return _M
