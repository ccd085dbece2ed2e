--[[ Generated with https://github.com/TypeScriptToLua/TypeScriptToLua ]]
local ____exports = {}
local askingRun, TRANSIENT
local check = require("resty.dlock.core.check")
local redis = require("resty.dlock.redis.client")
local scripts = require("resty.dlock.redis.scripts")
function ____exports.refused(conf, err)
    local code = string.match(
        tostring(err),
        "^(%u+)"
    )
    if code == "READONLY" or code == "LOADING" then
        redis.stale(conf)
    end
    local fault = "failed"
    if code == "MOVED" or code == "ASK" then
        fault = "redirect"
    elseif code ~= nil and TRANSIENT[code] ~= nil then
        fault = "transient"
    end
    return (("dlock: redis " .. conf.endpoint) .. ": ") .. tostring(err), fault
end
--- The fault of a connection that could not be made (nothing was sent). Behind
-- Sentinel a master that cannot be reached is most likely being replaced: the
-- sentinels are asked again, and a waiting acquire tries again ("transient").
function ____exports.unreachable(conf)
    return conf.sentinel ~= nil and "transient" or "failed"
end
--- As call; `asking` sends ASKING first on the same connection (a cluster slot
-- being imported by this node serves a key only to a client that asks so).
function ____exports.exec(conf, asking, s, rkey, ...)
    local args = {...}
    local red, cerr = redis.connect(conf)
    if red == nil then
        return nil, cerr, ____exports.unreachable(conf)
    end
    local res
    local err
    if asking then
        res, err = askingRun(red, s, rkey, args)
    else
        res, err = scripts.run(
            red,
            s,
            rkey,
            unpack(args)
        )
    end
    if res ~= nil and res ~= false and conf.replicas > 0 and s.written ~= nil and s.written(res) then
        local short = ____exports.replicated(red, conf, s)
        if short ~= nil then
            return nil, short, "replicas"
        end
    end
    redis.done(red, conf, res ~= nil)
    if res == nil then
        return nil, (((("dlock: redis " .. conf.endpoint) .. ": ") .. tostring(err)) .. " during ") .. s.name, "lost"
    end
    if res == false then
        local msg, fault = ____exports.refused(conf, err)
        return nil, msg, fault
    end
    return res, nil, nil
end
function askingRun(red, s, rkey, args)
    local ok, aerr = red:asking()
    if ok == nil then
        return nil, tostring(aerr) .. " during ASKING"
    end
    local res, err = red:evalsha(
        s.sha,
        s.keys,
        rkey,
        unpack(args)
    )
    if res == false and err ~= nil and string.sub(err, 1, 8) == "NOSCRIPT" then
        red:asking()
        return red:eval(
            s.src,
            s.keys,
            rkey,
            unpack(args)
        )
    end
    return res, err
end
--- WAIT for conf.replicas replicas to acknowledge this connection's writes.
-- Replication is asynchronous: a lock on a master that fails over before a
-- replica has it is lost, and a second holder gets in. nil when enough
-- acknowledged; else the error (the connection is handed back, or closed).
function ____exports.replicated(red, conf, s)
    local n, err = red:wait(conf.replicas, conf.replicas_timeout)
    redis.done(red, conf, n ~= nil)
    if type(n) == "number" and n >= conf.replicas then
        return nil
    end
    if conf.dict ~= nil then
        conf.dict:incr(____exports.SHORTFALLS, 1, 0)
    end
    if type(n) == "number" then
        return string.format(
            "dlock: redis %s: only %d of %d replica(s) acknowledged the %s within %d ms",
            conf.endpoint,
            n,
            conf.replicas,
            s.name,
            conf.replicas_timeout
        )
    end
    return (((("dlock: redis " .. conf.endpoint) .. ": WAIT for replicas after the ") .. s.name) .. " failed: ") .. tostring(err)
end
TRANSIENT = check.set(
    "LOADING",
    "BUSY",
    "TRYAGAIN",
    "MASTERDOWN",
    "CLUSTERDOWN",
    "READONLY"
)
--- One script round trip on a pooled connection. Returns the reply, or nil, an
-- error that names the endpoint, and the kind of fault.
function ____exports.call(conf, s, rkey, ...)
    return ____exports.exec(
        conf,
        false,
        s,
        rkey,
        ...
    )
end
--- Dict key counting writes that fewer replicas than asked acknowledged in time.
____exports.SHORTFALLS = "c:redis:replica_shortfalls"
local function isError(r)
    return type(r) == "table" and r[1] == false
end
--- Queue s for the targets listed in `which` (indexes into targets), by SHA or
-- with its body: KEYS[1] the target's key (and KEYS[2] its waiters' queue,
-- for two-key scripts; its readers and its queue for three-key ones), ARGV[1] its token (and ARGV[2] ms[i], when given).
local function queue(red, conf, s, targets, ms, which, body)
    red:init_pipeline(#which)
    local send = body and red.eval or red.evalsha
    local code = body and s.src or s.sha
    for ____, i in ipairs(which) do
        local t = targets[i]
        local m
        if ms ~= nil then
            m = ms[i]
        end
        if s.keys == 3 then
            local q = scripts.queueKey(t.rkey, conf.slotted)
            local r = scripts.readersKey(t.rkey, conf.slotted)
            if m ~= nil then
                send(
                    red,
                    code,
                    3,
                    t.rkey,
                    r,
                    q,
                    t.token,
                    m
                )
            else
                send(
                    red,
                    code,
                    3,
                    t.rkey,
                    r,
                    q,
                    t.token
                )
            end
        elseif s.keys == 2 and m ~= nil then
            send(
                red,
                code,
                2,
                t.rkey,
                scripts.queueKey(t.rkey, conf.slotted),
                t.token,
                m
            )
        elseif s.keys == 2 then
            send(
                red,
                code,
                2,
                t.rkey,
                scripts.queueKey(t.rkey, conf.slotted),
                t.token
            )
        elseif m ~= nil then
            send(
                red,
                code,
                1,
                t.rkey,
                t.token,
                m
            )
        else
            send(
                red,
                code,
                1,
                t.rkey,
                t.token
            )
        end
    end
end
--- Run one per-target script (see queue) for every target in one round trip. Replies that say NOSCRIPT (scripts flushed,
-- a restart, a failover) get a second round trip with the script's body.
function ____exports.batch(conf, s, targets, ms)
    local out = {replies = {}, errors = {}, faults = {}}
    local n = #targets
    if n == 0 then
        return out
    end
    local all = {}
    for i = 1, n do
        all[#all + 1] = i
    end
    local red, cerr = redis.connect(conf)
    if red == nil then
        for ____, i in ipairs(all) do
            out.errors[i] = cerr
            out.faults[i] = ____exports.unreachable(conf)
        end
        return out
    end
    local todo = all
    local body = false
    while #todo > 0 do
        queue(
            red,
            conf,
            s,
            targets,
            ms,
            todo,
            body
        )
        local replies, err = red:commit_pipeline()
        if replies == nil then
            redis.done(red, conf, false)
            for ____, i in ipairs(todo) do
                out.errors[i] = (((("dlock: redis " .. conf.endpoint) .. ": ") .. tostring(err)) .. " during ") .. s.name
                out.faults[i] = "lost"
            end
            return out
        end
        local again = {}
        for j = 1, #todo do
            local i = todo[j]
            local r = replies[j]
            if isError(r) then
                local msg = tostring(r[2])
                if not body and string.sub(msg, 1, 8) == "NOSCRIPT" then
                    again[#again + 1] = i
                else
                    local e, fault = ____exports.refused(conf, msg)
                    out.errors[i] = e
                    out.faults[i] = fault
                end
            elseif r == nil then
                out.errors[i] = (("dlock: redis " .. conf.endpoint) .. ": no reply during ") .. s.name
                out.faults[i] = "lost"
            else
                out.replies[i] = r
            end
        end
        todo = again
        body = true
    end
    if conf.replicas > 0 and s.written ~= nil then
        local wrote = {}
        for i, r in pairs(out.replies) do
            if s.written(r) then
                wrote[#wrote + 1] = i
            end
        end
        if #wrote > 0 then
            local short = ____exports.replicated(red, conf, s)
            if short ~= nil then
                for ____, i in ipairs(wrote) do
                    out.replies[i] = nil
                    out.errors[i] = short
                    out.faults[i] = "replicas"
                end
            end
            return out
        end
    end
    redis.done(red, conf, true)
    return out
end
return ____exports
