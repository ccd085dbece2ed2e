-- Generated from src/resty/dlock/redis/args.ts by TypeScriptToLua: edit that file, not this one.
-- A call's arguments as locals, for the paths where a `...` would keep LuaJIT
-- from compiling the rest: it compiles no `...` (VARG, "NYI: bytecode 71") in
-- a function that a trace did not enter, and a trace that starts where a loop
-- exits (the Cluster slot's CRC, cluster.lua) comes back into its caller's
-- frame. Six arguments cover every script but the general rate script and
-- acquire_all's, which go as lists.
local _M = {}
--- f with the first n of a1..a6: a fixed number of arguments in each branch, no `...`.
function _M.forward(f, node, s, rkey, n, a1, a2, a3, a4, a5, a6)
    if n == 0 then
        return f(node, s, rkey)
    end
    if n == 1 then
        return f(node, s, rkey, a1)
    end
    if n == 2 then
        return f(node, s, rkey, a1, a2)
    end
    if n == 3 then
        return f(node, s, rkey, a1, a2, a3)
    end
    if n == 4 then
        return f(node, s, rkey, a1, a2, a3, a4)
    end
    if n == 5 then
        return f(node, s, rkey, a1, a2, a3, a4, a5)
    end
    return f(node, s, rkey, a1, a2, a3, a4, a5, a6)
end
--- The first n of a1..a6 as a list.
function _M.listOf(n, a1, a2, a3, a4, a5, a6)
    local all = {a1, a2, a3, a4, a5, a6}
    local out = {}
    for i = 1, n do
        out[i] = all[i]
    end
    return out
end
--- args (the keys after the first, then the arguments) without those at positions first..last.
function _M.withoutKeys(args, first, last)
    local out = {}
    for i = 1, #args do
        if i < first or i > last then
            out[#out + 1] = args[i]
        end
    end
    return out
end
return _M
