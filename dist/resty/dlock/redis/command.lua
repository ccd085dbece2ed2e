--[[ Generated with https://github.com/TypeScriptToLua/TypeScriptToLua ]]
local ____exports = {}
local resp = require("resty.dlock.redis.resp")
local lua_tostring = tostring
local lua_select = select
local str_sub = string.sub
local table_new = require("table.new")
--- A batch; size: fragments it is expected to hold (the buffer never grows inside the hot trace below that).
function ____exports.batchOf(sem, asking, size)
    return {
        parts = table_new(size or 16, 0),
        n = 0,
        jobs = {},
        sem = sem,
        undos = 0,
        asking = asking
    }
end
local heads = setmetatable({}, {__mode = "k"})
local bodies = setmetatable({}, {__mode = "k"})
local function headOf(cache, s, words, body)
    local byWords = cache[s]
    if byWords == nil then
        byWords = {}
        cache[s] = byWords
    end
    local h = byWords[words]
    if h == nil then
        h = resp.encode({body and "EVAL" or "EVALSHA", body and s.src or s.sha, s.keys})
        h = ("*" .. lua_tostring(3 + words)) .. str_sub(h, 3)
        byWords[words] = h
    end
    return h
end
local CRLF = "\r\n"
local PRE = {}
local PRE_CACHED = 4096
--- Put word w at fragments k+1 .. k+3 of parts; the index of the last.
local function put(parts, k, w)
    local len = #w
    local pre = PRE[len]
    if pre == nil then
        pre = ("$" .. lua_tostring(len)) .. CRLF
        if len <= PRE_CACHED then
            PRE[len] = pre
        end
    end
    parts[k + 1] = pre
    parts[k + 2] = w
    parts[k + 3] = CRLF
    return k + 3
end
local ASKING = resp.encode({"ASKING"})
--- Add a call to b: its command goes into the buffer at once (no table of its arguments).
function ____exports.add(b, s, rkey, ...)
    local n = lua_select("#", ...)
    local words = 1 + n
    local parts = b.parts
    local at = b.n + 1
    parts[at] = headOf(heads, s, words, false)
    local k = put(parts, at, rkey)
    if n <= 6 then
        local a1, a2, a3, a4, a5, a6 = lua_select(1, ...)
        if n >= 1 then
            k = put(
                parts,
                k,
                lua_tostring(a1)
            )
        end
        if n >= 2 then
            k = put(
                parts,
                k,
                lua_tostring(a2)
            )
        end
        if n >= 3 then
            k = put(
                parts,
                k,
                lua_tostring(a3)
            )
        end
        if n >= 4 then
            k = put(
                parts,
                k,
                lua_tostring(a4)
            )
        end
        if n >= 5 then
            k = put(
                parts,
                k,
                lua_tostring(a5)
            )
        end
        if n >= 6 then
            k = put(
                parts,
                k,
                lua_tostring(a6)
            )
        end
    else
        for i = 1, n do
            local a = lua_select(i, ...)
            k = put(
                parts,
                k,
                lua_tostring(a)
            )
        end
    end
    b.n = k
    local job = {
        s = s,
        parts = parts,
        at = at,
        words = words,
        back = false,
        res = nil,
        err = nil,
        fault = nil
    }
    local ____b_jobs_0 = b.jobs
    ____b_jobs_0[#____b_jobs_0 + 1] = job
    if s.undo ~= nil then
        b.undos = b.undos + 1
    end
    return job
end
--- Every job of b not answered yet fails with err.
function ____exports.fail(b, err, fault)
    local jobs = b.jobs
    for i = 1, #jobs do
        local j = jobs[i]
        if j.fault == nil and j.res == nil then
            j.err = err
            j.fault = fault
        end
    end
end
--- Word n of job j's command after its key count (1: KEYS[1]).
function ____exports.wordOf(j, n)
    return j.parts[j.at + 3 * n - 1]
end
--- The commands of the jobs `which` of b (nil: all), EVAL with the script's body when `body`, each after ASKING when b asks.
function ____exports.commands(b, which, body)
    local out = table_new(b.n + 2 * #b.jobs, 0)
    local k = 0
    local n = which == nil and #b.jobs or #which
    for m = 1, n do
        local j = b.jobs[(which == nil and m - 1 or which[m] - 1) + 1]
        if b.asking then
            k = k + 1
            out[k] = ASKING
        end
        k = k + 1
        out[k] = body and headOf(bodies, j.s, j.words, true) or j.parts[j.at]
        local parts = j.parts
        for i = j.at + 1, j.at + 3 * j.words do
            k = k + 1
            out[k] = parts[i]
        end
    end
    return out
end
return ____exports
