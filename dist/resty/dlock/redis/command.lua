--[[ Generated with https://github.com/TypeScriptToLua/TypeScriptToLua ]]
local ____exports = {}
local resp = require("resty.dlock.redis.resp")
local scripts = require("resty.dlock.redis.scripts")
local lua_tostring = tostring
local lua_select = select
local str_sub = string.sub
local str_format = string.format
local str_rep = string.rep
local tbl_concat = table.concat
local queueKey = scripts.queueKey
local readersKey = scripts.readersKey
function ____exports.batchOf(sem, asking)
    return {
        parts = {},
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
local WORD = "$%d\r\n%s\r\n"
local FORMATS = {}
for n = 1, 7 do
    FORMATS[n] = "%s" .. str_rep(WORD, n)
end
local ASKING = resp.encode({"ASKING"})
--- The words of a command (up to seven: the key and six arguments), with its head. Not a tail call (see lease.make).
local function encode(head, n, w1, w2, w3, w4, w5, w6, w7)
    local cmd = str_format(
        FORMATS[n],
        head,
        #w1,
        w1,
        #w2,
        w2,
        #w3,
        w3,
        #w4,
        w4,
        #w5,
        w5,
        #w6,
        w6,
        #w7,
        w7
    )
    return cmd
end
--- Add a call to b: its command goes into the buffer at once (no table of its arguments).
function ____exports.add(b, s, rkey, ...)
    local n = lua_select("#", ...)
    local words = 1 + n
    local head = headOf(heads, s, words, false)
    local cmd
    if n <= 6 then
        local a1, a2, a3, a4, a5, a6 = lua_select(1, ...)
        cmd = encode(
            head,
            words,
            rkey,
            n >= 1 and lua_tostring(a1) or "",
            n >= 2 and lua_tostring(a2) or "",
            n >= 3 and lua_tostring(a3) or "",
            n >= 4 and lua_tostring(a4) or "",
            n >= 5 and lua_tostring(a5) or "",
            n >= 6 and lua_tostring(a6) or ""
        )
    else
        local parts = {}
        parts[1] = head
        resp.arg(parts, rkey)
        for i = 1, n do
            local a = lua_select(i, ...)
            resp.arg(parts, a)
        end
        cmd = tbl_concat(parts)
    end
    local job = {
        s = s,
        cmd = cmd,
        words = words,
        back = false,
        res = nil,
        err = nil,
        fault = nil
    }
    local ____b_jobs_0 = b.jobs
    ____b_jobs_0[#____b_jobs_0 + 1] = job
    local ____b_parts_1 = b.parts
    ____b_parts_1[#____b_parts_1 + 1] = cmd
    if s.undo ~= nil then
        b.undos = b.undos + 1
    end
    return job
end
--- Add a per-target script call (release, extend, drop): KEYS[1] the key (and
-- KEYS[2] its waiters' queue, for two-key scripts; its readers and its queue
-- for three-key ones), ARGV[1] the token (and
-- ARGV[2] ms, when given). What scripts.forTarget sends through a backend.
function ____exports.addTarget(b, slotted, s, t, ms)
    if s.keys == 3 then
        local q = queueKey(t.rkey, slotted)
        local r = readersKey(t.rkey, slotted)
        if ms == nil then
            ____exports.add(
                b,
                s,
                t.rkey,
                r,
                q,
                t.token
            )
        else
            ____exports.add(
                b,
                s,
                t.rkey,
                r,
                q,
                t.token,
                ms
            )
        end
    elseif s.keys == 2 then
        local q = queueKey(t.rkey, slotted)
        if ms == nil then
            ____exports.add(
                b,
                s,
                t.rkey,
                q,
                t.token
            )
        else
            ____exports.add(
                b,
                s,
                t.rkey,
                q,
                t.token,
                ms
            )
        end
    elseif ms == nil then
        ____exports.add(b, s, t.rkey, t.token)
    else
        ____exports.add(
            b,
            s,
            t.rkey,
            t.token,
            ms
        )
    end
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
    return resp.word(
        j.cmd,
        #headOf(heads, j.s, j.words, false) + 1,
        n
    )
end
--- The commands of the jobs `which` of b (nil: all), EVAL with the script's body when `body`, each after ASKING when b asks.
function ____exports.commands(b, which, body)
    local out = {}
    local n = which == nil and #b.jobs or #which
    for k = 1, n do
        local j = b.jobs[(which == nil and k - 1 or which[k] - 1) + 1]
        if b.asking then
            out[#out + 1] = ASKING
        end
        if body then
            local sha = headOf(heads, j.s, j.words, false)
            out[#out + 1] = headOf(bodies, j.s, j.words, true) .. str_sub(j.cmd, #sha + 1)
        else
            out[#out + 1] = j.cmd
        end
    end
    return tbl_concat(out)
end
return ____exports
