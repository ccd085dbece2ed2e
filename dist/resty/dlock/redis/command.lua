-- Generated from src/resty/dlock/redis/command.ts by TypeScriptToLua: edit that file, not this one.
-- A script call as Redis reads it: EVALSHA, the script's SHA, its key count,
-- then the key and arguments, written into the batch's buffer when the call
-- joins it and sent as one write (the cosocket joins the pieces in C). Four
-- pieces per call: the head (cached per script and word count), the key's
-- "$<length>\r\n" (cached per length), the key, and the rest of the command
-- (one string.format). Why that split:
--   - LuaJIT interns every string and hashes only four 4-byte windows of it
--     (first, last, middle, a quarter in). Whole commands of one script differ
--     only between those windows (same head, same tail, same length): each new
--     one walked a chain of all the others (memcmp), half of the worker's CPU
--     at 20,000 rate checks a second. The rest after the key is short and holds
--     the token (random) wherever it varies, or is the same string every time
--     (a rate limiter's arguments), which interning finds at once.
--   - Three pieces per word (length, word, CRLF) cost the cosocket two passes
--     of Lua C API calls per piece (its length, then its copy): a rate
--     decision took the worker about a fifth more CPU that way (bench 1e).
-- EVAL with the script's body replaces the head for calls Redis met with
-- NOSCRIPT; ASKING precedes each call of a batch for a Cluster slot being imported.
local _M = {}
local resp = require("resty.dlock.redis.resp")
local lua_tostring = tostring
local lua_tonumber = tonumber
local lua_select = select
local str_sub = string.sub
local str_find = string.find
local str_format = string.format
local str_rep = string.rep
local tbl_concat = table.concat
local table_new = require("table.new")
--- A batch, sized for `calls` calls (4 unless told): neither its buffer nor its
-- list of calls grows below that. Growing inside the hot trace of add() left a
-- side exit whose trace LuaJIT could not compile, and recorded again and again
-- (jit.v: hundreds of "register coalescing too complex" in seconds).
function _M.batchOf(sem, asking, calls)
    local n = calls or 4
    return {
        parts = table_new(4 * n, 0),
        n = 0,
        jobs = table_new(n, 0),
        sem = sem,
        undos = 0,
        posted = 0,
        asking = asking,
        kept = false
    }
end
-- The fixed start of a call's command, per script and word count: the array
-- head, EVALSHA (or EVAL), the SHA (or body) and the key count, as one piece.
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
        -- The array head counts every word of the command, the key and arguments included.
        h = "*" .. lua_tostring(3 + words) .. str_sub(h, 3)
        byWords[words] = h
    end
    return h
end
local CRLF = "\r\n"
-- "$<length>\r\n" per key length, made once (a key is at most a few hundred bytes).
local PRE = {}
local PRE_CACHED = 4096
local function pre(len)
    local p = PRE[len]
    if p == nil then
        p = "$" .. lua_tostring(len) .. CRLF
        if len <= PRE_CACHED then
            PRE[len] = p
        end
    end
    return p
end
-- The rest of a command after its key, per number of arguments: one format.
local WORD = "$%d\r\n%s\r\n"
local RESTS = {}
for n = 0, 6 do
    RESTS[n] = CRLF .. str_rep(WORD, n)
end
--- The rest of a command after its key, for up to six arguments (as strings). Not a tail call (see lease.make).
local function restOf(n, a1, a2, a3, a4, a5, a6)
    local r = str_format(RESTS[n], #a1, a1, #a2, a2, #a3, a3, #a4, a4, #a5, a5, #a6, a6)
    return r
end
local ASKING = resp.encode({"ASKING"})
-- Calls' tables, passed from answered calls to new ones: nine fields take a
-- table of 16 hash slots, about 450 bytes, per call. An uncontended acquire +
-- release allocated 1,970 bytes with a table per call and 1,420 with them
-- passed on; a rate decision 490 and 240 (50 threads, pipelined).
local spare = {}
local spares = 0
local SPARES = 256
--- Hand j to a later call. Only for a call whose caller read its answer, in a
-- batch no one looks at again (not kept, not posted): the sender, the batch
-- and the caller are done with it.
function _M.recycle(j)
    if spares < SPARES then
        spares = spares + 1
        spare[spares] = j
    end
end
--- Is j's table waiting for a later call (for the specs: a look at each)?
function _M.spared(j)
    for i = 1, spares do
        if spare[i] == j then
            return true
        end
    end
    return false
end
--- The arguments of a call, encoded once: the rest of its command after the
-- key, and its number of words (the key and the arguments). A call sent to
-- several servers (fanout.lua) encodes them once for all.
local function encoded(...)
    local n = lua_select("#", ...)
    local rest
    if n <= 6 then
        -- The arguments as locals: select(i, ...) in a loop copies the rest each
        -- time and keeps the function out of the JIT. Six cover every script.
        local a1, a2, a3, a4, a5, a6 = lua_select(1, ...)
        rest = restOf(
            n,
            n >= 1 and lua_tostring(a1) or "",
            n >= 2 and lua_tostring(a2) or "",
            n >= 3 and lua_tostring(a3) or "",
            n >= 4 and lua_tostring(a4) or "",
            n >= 5 and lua_tostring(a5) or "",
            n >= 6 and lua_tostring(a6) or ""
        )
    else
        local out = {CRLF}
        for i = 1, n do
            local a = lua_select(i, ...)
            local w = lua_tostring(a)
            out[i + 1] = str_format(WORD, #w, w)
        end
        rest = tbl_concat(out)
    end
    return rest, 1 + n
end
--- Add a call to b whose arguments are encoded (encoded()): its command goes into the buffer at once.
local function addEncoded(b, s, rkey, rest, words)
    local parts = b.parts
    local k = b.n
    parts[k + 1] = headOf(heads, s, words, false)
    parts[k + 2] = pre(#rkey)
    parts[k + 3] = rkey
    parts[k + 4] = rest
    b.n = k + 4
    local job
    if spares > 0 then
        job = spare[spares]
        spare[spares] = nil
        spares = spares - 1
        job.s = s
        job.rkey = rkey
        job.rest = rest
        job.words = words
        job.back = false
        job.res = nil
        job.err = nil
        job.fault = nil
        job.post = nil
    else
        job = {
            s = s,
            rkey = rkey,
            rest = rest,
            words = words,
            back = false,
            res = nil,
            err = nil,
            fault = nil,
            post = nil
        }
    end
    b.jobs[#b.jobs + 1] = job
    if s.undo ~= nil then
        b.undos = b.undos + 1
    end
    return job
end
--- Add a call to b: its command goes into the buffer at once (no table of its arguments).
function _M.add(b, s, rkey, ...)
    local rest, words = encoded(...)
    local job = addEncoded(b, s, rkey, rest, words)
    return job
end
--- Every job of b not answered yet fails with err.
function _M.fail(b, err, fault)
    local jobs = b.jobs
    for i = 1, #jobs do
        local j = jobs[i]
        if j.fault == nil and j.res == nil then
            j.err = err
            j.fault = fault
        end
    end
end
--- Word n of job j's command after its key count (1: KEYS[1]), read back from its rest (only for a call to take back).
function _M.wordOf(j, n)
    if n == 1 then
        return j.rkey
    end
    local rest = j.rest
    local pos = 3
    local w = ""
    for _ = 2, n do
        local eol = str_find(rest, CRLF, pos, true)
        local len = lua_tonumber(str_sub(rest, pos + 1, eol - 1))
        w = str_sub(rest, eol + 2, eol + 1 + len)
        pos = eol + 2 + len + 2
    end
    return w
end
--- Index k of the jobs `which` of a batch (nil: all of them, in order).
local function at(which, k)
    return which == nil and k or which[k]
end
--- The commands of the jobs `which` of b (nil: all), EVAL with the script's body when `body`, each after ASKING when b asks.
function _M.commands(b, which, body)
    local out = table_new(5 * #b.jobs, 0)
    local k = 0
    local n = which == nil and #b.jobs or #which
    for m = 1, n do
        local j = b.jobs[at(which, m)]
        if b.asking then
            k = k + 1
            out[k] = ASKING
        end
        out[k + 1] = headOf(body and bodies or heads, j.s, j.words, body)
        out[k + 2] = pre(#j.rkey)
        out[k + 3] = j.rkey
        out[k + 4] = j.rest
        k = k + 4
    end
    return out
end
-- Exported by name: this module's own uses of them are locals, not lookups in its exports table.
_M.addEncoded = addEncoded
_M.at = at
_M.encoded = encoded
return _M
