--[[ Generated with https://github.com/TypeScriptToLua/TypeScriptToLua ]]
local ____exports = {}
local check = require("resty.dlock.core.check")
local connection = require("resty.dlock.redis.connection")
local resp = require("resty.dlock.redis.resp")
local scripts = require("resty.dlock.redis.scripts")
local lua_tostring = tostring
local lua_type = type
local lua_select = select
local str_sub = string.sub
local str_format = string.format
local str_rep = string.rep
local str_match = string.match
local tbl_concat = table.concat
local connect = connection.connect
local done = connection.done
local stale = connection.stale
local socket = connection.socket
local reader = resp.reader
local read = resp.read
local drained = resp.drained
local queueKey = scripts.queueKey
function ____exports.batchOf(sem, asking)
    return {
        parts = {},
        jobs = {},
        sem = sem,
        undos = 0,
        asking = asking
    }
end
local TRANSIENT = check.set(
    "LOADING",
    "BUSY",
    "TRYAGAIN",
    "MASTERDOWN",
    "CLUSTERDOWN",
    "READONLY"
)
--- An error reply: its message (naming the endpoint) and fault.
function ____exports.refused(conf, err)
    local code = str_match(
        lua_tostring(err),
        "^(%u+)"
    )
    if code == "READONLY" or code == "LOADING" then
        stale(conf)
    end
    local fault = "failed"
    if code == "MOVED" or code == "ASK" then
        fault = "redirect"
    elseif code ~= nil and TRANSIENT[code] ~= nil then
        fault = "transient"
    end
    return (("dlock: redis " .. conf.endpoint) .. ": ") .. lua_tostring(err), fault
end
--- The fault of a connection that could not be made (nothing was sent). Behind
-- Sentinel a master that cannot be reached is most likely being replaced: the
-- sentinels are asked again, and a waiting acquire tries again ("transient").
function ____exports.unreachable(conf)
    return conf.sentinel ~= nil and "transient" or "failed"
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
-- KEYS[2] its waiters' queue, for two-key scripts), ARGV[1] the token (and
-- ARGV[2] ms, when given). What scripts.forTarget sends through a backend.
local function addTarget(b, slotted, s, t, ms)
    if s.keys == 2 then
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
--- The commands of some of b's jobs (by index), EVAL with the script's body when `body`, each after ASKING when b asks.
local function commands(b, which, body)
    local out = {}
    for k = 1, #which do
        local j = b.jobs[which[k]]
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
--- The jobs `which` (from k on) were sent, and their replies never came.
local function lost(conf, b, which, k, why)
    for m = k, #which do
        local j = b.jobs[which[m]]
        j.res = nil
        j.err = (((("dlock: redis " .. conf.endpoint) .. ": ") .. lua_tostring(why)) .. " during ") .. j.s.name
        j.fault = "lost"
    end
end
--- Send the commands (EVAL when `body`), and read the replies of the jobs `which` (indexes into b.jobs) in turn.
local function roundTrip(conf, sock, b, which, payload, body)
    local sent, serr = sock:send(payload)
    if sent == nil then
        lost(
            conf,
            b,
            which,
            1,
            serr
        )
        return {}
    end
    local r = reader(sock)
    local again = {}
    for k = 1, #which do
        local j = b.jobs[which[k]]
        if b.asking then
            local ok, aerr = read(r)
            if ok == nil then
                lost(
                    conf,
                    b,
                    which,
                    k,
                    aerr
                )
                return {}
            end
        end
        local v, rerr = read(r)
        if v == nil then
            lost(
                conf,
                b,
                which,
                k,
                rerr
            )
            return {}
        end
        if v == false then
            if not body and str_sub(
                lua_tostring(rerr),
                1,
                8
            ) == "NOSCRIPT" then
                again[#again + 1] = which[k]
            else
                local e, f = ____exports.refused(conf, rerr)
                j.err = e
                j.fault = f
            end
        else
            j.res = v
        end
    end
    if not drained(r) then
        for k = 1, #which do
            local j = b.jobs[which[k]]
            j.res = nil
            j.err = (("dlock: redis " .. conf.endpoint) .. ": more data than replies during ") .. j.s.name
            j.fault = "lost"
        end
        return {}
    end
    return again
end
--- Dict key counting writes that fewer replicas than asked acknowledged in time.
____exports.SHORTFALLS = "c:redis:replica_shortfalls"
--- WAIT for conf.replicas replicas to acknowledge this connection's writes.
-- Replication is asynchronous: a lock on a master that fails over before a
-- replica has it is lost, and a second holder gets in. nil when enough
-- acknowledged; else the error (the connection is handed back, or closed).
local function replicated(red, conf, s)
    local n, err = red:wait(conf.replicas, conf.replicas_timeout)
    done(red, conf, n ~= nil)
    if lua_type(n) == "number" and n >= conf.replicas then
        return nil
    end
    if conf.dict ~= nil then
        conf.dict:incr(____exports.SHORTFALLS, 1, 0)
    end
    if lua_type(n) == "number" then
        return str_format(
            "dlock: redis %s: only %d of %d replica(s) acknowledged the %s within %d ms",
            conf.endpoint,
            n,
            conf.replicas,
            s.name,
            conf.replicas_timeout
        )
    end
    return (((("dlock: redis " .. conf.endpoint) .. ": WAIT for replicas after the ") .. s.name) .. " failed: ") .. lua_tostring(err)
end
--- Send b's calls as one pipeline on a pooled connection (EVAL for those Redis has no script for), then one WAIT.
function ____exports.run(conf, b)
    local jobs = b.jobs
    local which = {}
    for i = 1, #jobs do
        which[#which + 1] = i
    end
    local red, cerr = connect(conf)
    if red == nil then
        ____exports.fail(
            b,
            cerr,
            ____exports.unreachable(conf)
        )
        return
    end
    local sock = socket(red)
    local again = roundTrip(
        conf,
        sock,
        b,
        which,
        b.asking and commands(b, which, false) or tbl_concat(b.parts),
        false
    )
    if #again > 0 then
        roundTrip(
            conf,
            sock,
            b,
            again,
            commands(b, again, true),
            true
        )
    end
    local broken = false
    local wrote = {}
    for i = 1, #jobs do
        local j = jobs[i]
        if j.fault == "lost" then
            broken = true
        elseif j.res ~= nil and conf.replicas > 0 and j.s.written ~= nil and j.s.written(j.res) then
            wrote[#wrote + 1] = j
        end
    end
    if not broken and #wrote > 0 then
        local short = replicated(red, conf, wrote[1].s)
        if short ~= nil then
            for i = 1, #wrote do
                local j = wrote[i]
                j.res = nil
                j.err = short
                j.fault = "replicas"
            end
        end
        return
    end
    done(red, conf, not broken)
end
--- One call on a pooled connection of its own: a batch of one.
function ____exports.one(conf, s, rkey, ...)
    local b = ____exports.batchOf(nil, false)
    local job = ____exports.add(b, s, rkey, ...)
    ____exports.run(conf, b)
    return job.res, job.err, job.fault
end
--- As one(), after ASKING (a Cluster node serves a slot it imports only to a client that asks so).
function ____exports.asking(conf, s, rkey, ...)
    local b = ____exports.batchOf(nil, true)
    local job = ____exports.add(b, s, rkey, ...)
    ____exports.run(conf, b)
    return job.res, job.err, job.fault
end
--- A per-target script (see addTarget) for every target, in one round trip
-- (two when Redis met NOSCRIPT), on one server.
function ____exports.many(conf, s, targets, ms)
    local out = {replies = {}, errors = {}, faults = {}}
    local n = #targets
    if n == 0 then
        return out
    end
    local b = ____exports.batchOf(nil, false)
    for i = 1, n do
        local m
        if ms ~= nil then
            m = ms[i]
        end
        addTarget(
            b,
            conf.slotted,
            s,
            targets[i],
            m
        )
    end
    ____exports.run(conf, b)
    for i = 1, n do
        local j = b.jobs[i]
        if j.res ~= nil then
            out.replies[i] = j.res
        else
            out.errors[i] = j.err
            out.faults[i] = j.fault
        end
    end
    return out
end
return ____exports
