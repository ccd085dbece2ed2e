-- Generated from src/resty/dlock/redis/roundtrip.ts by TypeScriptToLua: edit that file, not this one.
-- One round trip of script calls to one server, the only way a script reaches
-- Redis: a batch of calls (one, or many: auto-pipelining's batches, a batch of
-- releases) goes out as one pipeline on a pooled connection, its replies are
-- read one at a time (resp.lua), and every call keeps its own outcome:
--   - a reply read is that call's answer; an error reply is that call's
--     refusal, mapped to a fault (refused);
--   - when the connection breaks, the calls whose replies were not read are
--     "outcome unknown" ("lost"), and the others are not;
--   - NOSCRIPT (SCRIPT FLUSH, a restart, a failover) is answered by sending
--     the script's body (EVAL, which caches it again) for the calls that met it;
--   - with redis.replicas, one WAIT follows the writes of the batch (replicas.lua);
--   - ASKING precedes each call of a batch for a Cluster slot being imported.
local _M = {}
local check = require("resty.dlock.core.check")
local command = require("resty.dlock.redis.command")
local connection = require("resty.dlock.redis.connection")
local resp = require("resty.dlock.redis.resp")
local hints = require("resty.dlock.redis.hints")
local replicas = require("resty.dlock.redis.replicas")
local lua_tostring = tostring
local str_sub = string.sub
local str_find = string.find
local str_match = string.match
local connect = connection.connect
local done = connection.done
local stale = connection.stale
local socket = connection.socket
local reader = resp.reader
local read = resp.read
local drained = resp.drained
local add = command.add
local batchOf = command.batchOf
local recycle = command.recycle
local at = command.at
local commands = command.commands
local fail = command.fail
local turned_away = hints.turnedAway
local closed_after = hints.closedAfter
local no_scripts = hints.noScripts
local replica = hints.replica
-- READONLY: a master demoted by a failover; the next try goes to the new one.
-- NOREPLICAS: a master with min-replicas-to-write while its replicas are away
-- (a resync, a restart): writes resume when one is back.
local TRANSIENT = check.set("LOADING", "BUSY", "TRYAGAIN", "MASTERDOWN", "CLUSTERDOWN", "READONLY", "NOREPLICAS")
--- An error reply: its message (naming the endpoint) and fault.
local function refused(conf, err)
    local code = str_match(lua_tostring(err), "^(%u+)")
    if code == "READONLY" or code == "LOADING" then
        stale(conf)
    end
    local fault = "failed"
    if code == "MOVED" or code == "ASK" then
        fault = "redirect"
    elseif code ~= nil and TRANSIENT[code] ~= nil then
        fault = "transient"
    end
    local away = turned_away(conf.endpoint, err)
    if away ~= nil then
        return away, fault
    end
    local scriptless = no_scripts(conf.endpoint, err)
    if scriptless ~= nil then
        return scriptless, fault
    end
    local e = lua_tostring(err)
    return "dlock: redis " .. conf.endpoint .. ": " .. e .. (code == "READONLY" and replica(conf.topology, e) or ""), fault
end
--- Did a Cluster slot that is migrating refuse the call (TRYAGAIN: a script
-- whose keys the move has split between two nodes)? It is only to be tried
-- again, not counted as Redis failing.
function _M.migrating(fault, err)
    return fault == "transient" and (str_find(lua_tostring(err), ": TRYAGAIN", 1, true)) ~= nil
end
--- The fault of a connection that could not be made (nothing was sent). Behind
-- Sentinel a master that cannot be reached is most likely being replaced: the
-- sentinels are asked again, and a waiting acquire tries again ("transient").
local function unreachable(conf)
    return conf.sentinel ~= nil and "transient" or "failed"
end
--- The jobs `which` (from k on) were sent, and their replies never came.
local function lost(conf, b, which, k, why)
    local n = which == nil and #b.jobs or #which
    for m = k, n do
        local j = b.jobs[at(which, m)]
        j.res = nil
        j.err = "dlock: redis " .. conf.endpoint .. ": " .. lua_tostring(why) .. " during " .. j.s.name
        j.fault = "lost"
    end
end
--- Send the commands of the jobs `which`; false when the connection failed (then they are lost).
local function sendAll(conf, sock, b, which, payload)
    local sent, serr = sock:send(payload)
    if sent == nil then
        -- Nothing or part of it left: none of them may have reached Redis, or all.
        lost(conf, b, which, 1, serr)
        return false
    end
    return true
end
--- The jobs `again`, which met NOSCRIPT, when the connection broke before their
-- script could follow: they did not run, and never will on this connection.
local function unrun(conf, b, again, why)
    if again == nil then
        return
    end
    for i = 1, #again do
        local j = b.jobs[again[i]]
        j.res = nil
        j.err = "dlock: redis " .. conf.endpoint .. ": " .. lua_tostring(why) .. " before the script could follow NOSCRIPT, during " .. j.s.name
        j.fault = "failed"
    end
end
--- Read the replies of the jobs `which` in turn; those that met NOSCRIPT (unless `body`: EVAL was sent).
local function replies(conf, sock, b, which, body)
    local r = reader(sock)
    local again
    local n = which == nil and #b.jobs or #which
    for k = 1, n do
        local j = b.jobs[at(which, k)]
        if b.asking then
            -- ASKING's own reply; one it refused leaves the call to be refused (MOVED).
            local ok, aerr = read(r)
            if ok == nil then
                lost(conf, b, which, k, aerr)
                unrun(conf, b, again, aerr)
                return nil
            end
        end
        local v, rerr = read(r)
        if v == nil then
            -- These and the ones after them were sent; their replies never came.
            lost(conf, b, which, k, rerr)
            unrun(conf, b, again, rerr)
            return nil
        end
        if v == false then
            if not body and str_sub(lua_tostring(rerr), 1, 8) == "NOSCRIPT" then
                if again == nil then
                    again = {}
                end
                again[#again + 1] = at(which, k)
            else
                local e, f = refused(conf, rerr)
                j.err = e
                j.fault = f
            end
        else
            j.res = v
        end
    end
    if not drained(r) then
        -- More bytes than replies: the replies may not be the ones they seemed,
        -- and the connection is not fit for the pool. Nothing read here stands.
        lost(conf, b, which, 1, "more data than replies")
        return nil
    end
    return again
end
--- As send, on `red` when given (a connection the batch before left fit).
local function sendOn(conf, b, red)
    if red == nil then
        local fresh, cerr = connect(conf)
        if fresh == nil then
            fail(b, cerr, unreachable(conf))
            return nil
        end
        red = fresh
    end
    if not sendAll(conf, socket(red), b, nil, b.asking and commands(b, nil, false) or b.parts) then
        done(red, conf, false)
        return nil
    end
    return red
end
--- Send b's calls as one pipeline on a pooled connection: the connection to
-- read their replies from (finish), or nil when it failed (b's calls say so).
-- Split from finish so that one caller can have calls on their way to several
-- servers at once (a Redlock quorum).
local function send(conf, b)
    return sendOn(conf, b, nil)
end
--- Read the replies of b's calls sent on red (EVAL for those Redis has no
-- script for), then one WAIT. With `keep`, red comes back when it may carry
-- the next batch at once: no reply lost, no call refused (a READONLY master
-- is asked no more), no WAIT (which hands it back); else it goes back to its
-- pool (or is closed) here.
local function complete(conf, b, red, keep)
    local sock = socket(red)
    local again = replies(conf, sock, b, nil, false)
    if again ~= nil and sendAll(conf, sock, b, again, commands(b, again, true)) then
        replies(conf, sock, b, again, true)
    end
    local jobs = b.jobs
    local broken = false
    local erred = false
    local unfit = false
    local wrote
    for i = 1, #jobs do
        local j = jobs[i]
        if j.fault == "lost" then
            broken = true
        elseif j.fault ~= nil then
            erred = true
            if j.fault == "transient" and (str_find(j.err, ": READONLY", 1, true)) ~= nil then
                unfit = true
            elseif closed_after(j.err) then
                unfit = true
            end
        elseif j.res ~= nil and conf.replicas > 0 and j.s.written ~= nil and j.s.written(j.res) then
            if wrote == nil then
                wrote = {}
            end
            wrote[#wrote + 1] = j
        end
    end
    if wrote ~= nil then
        if broken then
            -- No WAIT can follow these writes: one on another connection covers none of them.
            replicas.unconfirmed(wrote, "dlock: redis " .. conf.endpoint .. ": the connection broke before WAIT for replicas after the " .. wrote[1].s.name)
        else
            -- One WAIT covers every write of the batch; it hands the connection back (or closes it).
            local short = replicas.waited(red, conf, wrote[1].s)
            if short ~= nil then
                replicas.unconfirmed(wrote, short)
            end
            return nil
        end
    end
    if keep and not broken and not erred then
        return red
    end
    -- A master demoted under a name or address that moved on to the new one (a
    -- cloud's primary endpoint, a virtual IP, a Kubernetes Service): only a new
    -- connection reaches that one, so this one is closed, never pooled again. A
    -- server that turned it away (maxclients, protected mode) has closed it already.
    done(red, conf, not broken and not unfit)
    return nil
end
--- Read the replies of b's calls sent on red, then hand red back (see complete).
local function finish(conf, b, red)
    complete(conf, b, red, false)
end
--- Send b's calls as one pipeline on `red`, the connection the batch before
-- left fit (nil: a pooled one), and read their replies. The connection when
-- it may carry the next batch at once, for the caller to hand back with
-- connection.done when there is none: a sender with batches back to back
-- keeps one connection instead of taking it from the pool and giving it back
-- per batch (a client object, a pool lookup and an idle timer each time).
function _M.runOn(conf, b, red)
    local sent = sendOn(conf, b, red)
    if sent == nil then
        return nil
    end
    return complete(conf, b, sent, true)
end
--- Send b's calls as one pipeline and read their replies.
local function run(conf, b)
    local red = send(conf, b)
    if red ~= nil then
        finish(conf, b, red)
    end
end
--- One call on a pooled connection of its own: a batch of one; after ASKING
-- when `asking` (a Cluster node serves a slot it imports only to a client
-- that asks so).
function _M.one(conf, asking, s, rkey, ...)
    local b = batchOf(nil, asking, 1)
    local job = add(b, s, rkey, ...)
    run(conf, b)
    local res = job.res
    local err = job.err
    local fault = job.fault
    recycle(job)
    return res, err, fault
end
-- Exported by name: this module's own uses of them are locals, not lookups in its exports table.
_M.refused = refused
_M.unreachable = unreachable
_M.send = send
_M.finish = finish
_M.run = run
return _M
