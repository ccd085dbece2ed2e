--[[ Generated with https://github.com/TypeScriptToLua/TypeScriptToLua ]]
local ____exports = {}
local majority, nowMs, errorsOf, count, decideAcquire, pipelined, ngx_now, update_time, lua_type, lua_tostring, math_floor, str_format, tbl_concat, tbl_sort
local pipeline = require("resty.dlock.redis.pipeline")
local roundtrip = require("resty.dlock.redis.roundtrip")
local scripts = require("resty.dlock.redis.scripts")
--- The allowance for clock drift between masters over a ttl, in ms (redis.io: 1 % plus 2 ms).
function ____exports.drift(ttl)
    return math_floor(ttl * 0.01) + 2
end
function majority(conf)
    return math_floor(#conf.nodes / 2) + 1
end
function nowMs()
    update_time()
    return ngx_now() * 1000
end
function errorsOf(conf, v)
    local list = {}
    for i = 1, #conf.nodes do
        local e = v.errors[i]
        if e ~= nil then
            list[#list + 1] = e
        end
    end
    return tbl_concat(list, "; ")
end
function count(conf, v, want)
    local yes = 0
    local answered = 0
    for i = 1, #conf.nodes do
        local r = v.replies[i]
        if r ~= nil then
            answered = answered + 1
            if r == want then
                yes = yes + 1
            end
        end
    end
    return yes, answered
end
function decideAcquire(conf, v, rkey, tok, ttl, started)
    local n = #conf.nodes
    local need = majority(conf)
    local took = count(conf, v, "OK")
    local elapsed = nowMs() - started
    if took >= need and elapsed + ____exports.drift(ttl) < ttl then
        return "OK", nil, nil
    end
    local undone = true
    local unknown = false
    for i = 1, n do
        if v.replies[i] == "OK" then
            local r = pipelined(conf.nodes[i], scripts.RELEASE, rkey, tok)
            if r == nil then
                undone = false
            end
        elseif v.faults[i] == "lost" then
            unknown = true
        end
    end
    local pttls = {}
    for i = 1, n do
        local r = v.replies[i]
        if lua_type(r) == "number" then
            pttls[#pttls + 1] = r
        end
    end
    if #pttls > n - need and undone then
        tbl_sort(pttls)
        return pttls[#pttls - (n - need)], nil, nil
    end
    if not undone or unknown then
        return nil, ((((((("dlock: redis " .. conf.endpoint) .. ": took the key on ") .. lua_tostring(took)) .. " of ") .. lua_tostring(n)) .. " masters, and some may still hold it (") .. errorsOf(conf, v)) .. ")", "lost"
    end
    if took >= need then
        return nil, str_format("dlock: redis %s: took the key on a majority, but only after %d ms of a %d ms ttl", conf.endpoint, elapsed, ttl), "transient"
    end
    return nil, ((((((((("dlock: redis " .. conf.endpoint) .. ": took the key on ") .. lua_tostring(took)) .. " of ") .. lua_tostring(n)) .. " masters, a majority is ") .. lua_tostring(need)) .. " (") .. errorsOf(conf, v)) .. ")", "transient"
end
pipelined = pipeline.call
local many = roundtrip.many
local spawn = ngx.thread.spawn
local thread_wait = ngx.thread.wait
ngx_now = ngx.now
update_time = ngx.update_time
lua_type = type
local lua_select = select
lua_tostring = tostring
local lua_tonumber = tonumber
math_floor = math.floor
str_format = string.format
tbl_concat = table.concat
tbl_sort = table.sort
--- Is this script one a quorum can decide?
local function kindSupported(s)
    return s == scripts.ACQUIRE or s == scripts.RELEASE or s == scripts.EXTEND
end
--- Per worker, per master (by endpoint): what its calls did, for status pages.
local health = {}
--- Shared dict key (all workers): calls to a master that failed.
____exports.NODE_FAILURES = "c:redis:node_failures:"
local function note(node, fault, err)
    local h = health[node.endpoint]
    if h == nil then
        h = {ok = 0, failed = 0, lastError = nil, lastOk = 0}
        health[node.endpoint] = h
    end
    if fault == nil then
        h.ok = h.ok + 1
        h.lastOk = ngx_now()
    else
        h.failed = h.failed + 1
        h.lastError = err
        if node.dict ~= nil then
            node.dict:incr(____exports.NODE_FAILURES .. node.endpoint, 1, 0)
        end
    end
end
local function take(v, i, node, r, e, f)
    note(node, f, e)
    if r ~= nil then
        v.replies[i] = r
    else
        v.errors[i] = e or ("dlock: redis " .. node.endpoint) .. ": no reply"
        v.faults[i] = f or "failed"
    end
end
--- s for rkey on every master at once, each on its own auto-pipeline.
local function everywhere(conf, s, rkey, ...)
    local nodes = conf.nodes
    local v = {replies = {}, errors = {}, faults = {}}
    local threads = {}
    for i = 2, #nodes do
        threads[i] = spawn(
            pipelined,
            nodes[i],
            s,
            rkey,
            ...
        )
    end
    local r1, e1, f1 = pipelined(nodes[1], s, rkey, ...)
    take(
        v,
        1,
        nodes[1],
        r1,
        e1,
        f1
    )
    for i = 2, #nodes do
        local ok, r, e, f = thread_wait(threads[i])
        if ok then
            take(
                v,
                i,
                nodes[i],
                r,
                e,
                f
            )
        else
            take(
                v,
                i,
                nodes[i],
                nil,
                (("dlock: redis " .. nodes[i].endpoint) .. ": ") .. lua_tostring(r),
                "failed"
            )
        end
    end
    return v
end
--- The fault of a decision that failed for want of answers: "lost" when any master may have acted.
local function faultOf(conf, v)
    for i = 1, #conf.nodes do
        if v.faults[i] == "lost" then
            return "lost"
        end
    end
    return "failed"
end
--- Release (1: deleted somewhere, 0: not ours anywhere) once a majority answered.
local function decideRelease(conf, v)
    local deleted, answered = count(conf, v, 1)
    if answered >= majority(conf) then
        return deleted > 0 and 1 or 0, nil, nil
    end
    return nil, ((((((("dlock: redis " .. conf.endpoint) .. ": only ") .. lua_tostring(answered)) .. " of ") .. lua_tostring(#conf.nodes)) .. " masters answered the release (") .. errorsOf(conf, v)) .. ")", faultOf(conf, v)
end
--- Extend: 1 on a majority within the time; 0 when a majority can no longer say yes.
local function decideExtend(conf, v, ttl, started)
    local extended, answered = count(conf, v, 1)
    local n = #conf.nodes
    if extended >= majority(conf) and nowMs() - started + ____exports.drift(ttl) < ttl then
        return 1, nil, nil
    end
    if answered - extended > n - majority(conf) then
        return 0, nil, nil
    end
    return nil, ((((((((("dlock: redis " .. conf.endpoint) .. ": extended on ") .. lua_tostring(extended)) .. " of ") .. lua_tostring(n)) .. " masters, a majority is ") .. lua_tostring(majority(conf))) .. " (") .. errorsOf(conf, v)) .. ")", faultOf(conf, v)
end
--- Run s for rkey on the masters and decide by majority (ARGV[1] the token, ARGV[2] the ttl).
local function call(conf, s, rkey, ...)
    if not kindSupported(s) then
        return nil, ((("dlock: redis " .. conf.endpoint) .. ": the ") .. s.name) .. " script cannot run on a Redlock quorum", "failed"
    end
    local started = nowMs()
    local v = everywhere(conf, s, rkey, ...)
    if s == scripts.RELEASE then
        return decideRelease(conf, v)
    end
    local tok, ms = lua_select(1, ...)
    local ttl = lua_tonumber(ms) or 0
    if s == scripts.EXTEND then
        return decideExtend(conf, v, ttl, started)
    end
    return decideAcquire(
        conf,
        v,
        rkey,
        lua_tostring(tok),
        ttl,
        started
    )
end
--- roundtrip.many, shaped for ngx.thread.spawn.
local function batchOn(node, s, targets, ms)
    return many(node, s, targets, ms)
end
--- Each target on every master (one pipeline per master, all at once), decided per target.
local function batch(conf, s, targets, ms)
    local out = {replies = {}, errors = {}, faults = {}}
    if s ~= scripts.RELEASE and s ~= scripts.EXTEND then
        for i = 1, #targets do
            out.errors[i] = ((("dlock: redis " .. conf.endpoint) .. ": the ") .. s.name) .. " script cannot run on a Redlock quorum"
            out.faults[i] = "failed"
        end
        return out
    end
    local nodes = conf.nodes
    local started = nowMs()
    local threads = {}
    for j = 2, #nodes do
        threads[j] = spawn(
            batchOn,
            nodes[j],
            s,
            targets,
            ms
        )
    end
    local per = {}
    per[1] = many(nodes[1], s, targets, ms)
    for j = 2, #nodes do
        local ok, o = thread_wait(threads[j])
        per[j] = ok and o or ({replies = {}, errors = {}, faults = {}})
    end
    for i = 1, #targets do
        local v = {replies = {}, errors = {}, faults = {}}
        for j = 1, #nodes do
            local o = per[j]
            local r = o.replies[i]
            if r ~= nil then
                v.replies[j] = r
            else
                v.errors[j] = o.errors[i] or ("dlock: redis " .. nodes[j].endpoint) .. ": no reply"
                v.faults[j] = o.faults[i] or "failed"
            end
        end
        local res
        local err
        local fault
        if s == scripts.RELEASE then
            res, err, fault = decideRelease(conf, v)
        else
            res, err, fault = decideExtend(conf, v, ms ~= nil and ms[i] or 0, started)
        end
        if res ~= nil then
            out.replies[i] = res
        else
            out.errors[i] = err
            out.faults[i] = fault
        end
    end
    for j = 1, #nodes do
        local o = per[j]
        note(nodes[j], o.faults[1], o.errors[1])
    end
    return out
end
--- For status pages: per master, calls that worked and failed, the last error, seconds since the last answer.
local function describe(conf)
    local list = {}
    local nodes = conf.nodes
    for i = 1, #nodes do
        local n = nodes[i]
        local h = health[n.endpoint]
        local t = {}
        t.endpoint = n.endpoint
        if h ~= nil then
            t.ok = h.ok
            t.failed = h.failed
            t.last_error = h.lastError
            if h.lastOk > 0 then
                t.last_ok_age = math_floor((ngx_now() - h.lastOk) * 1000) / 1000
            end
        end
        list[#list + 1] = t
    end
    local t = {}
    t.masters = list
    t.majority = majority(conf)
    return t
end
local function validity(ttl)
    return ttl - ____exports.drift(ttl)
end
--- A fence counter per master, not one: the key stays where the other topologies keep it.
local function fenceKey(rkey)
    return rkey .. ":fence"
end
--- Failed calls per master, over every worker.
local function shared(conf, d)
    local t = {}
    local nodes = conf.nodes
    for i = 1, #nodes do
        local ep = nodes[i].endpoint
        local n = d:get(____exports.NODE_FAILURES .. ep)
        t[ep] = lua_type(n) == "number" and n or 0
    end
    return "redlock", t
end
local function servers(conf)
    return conf.nodes
end
--- What a quorum of independent masters cannot do. A fence counter per master
-- is not monotonic across majorities (two majorities share one master, but
-- not its counter), and a counting semaphore per master does not bound
-- holders (three holders can each own a majority of permits on three masters
-- with two permits each).
local REFUSES = {}
REFUSES.fencing = "dlock: fencing is refused with redis.redlock: fence counters on independent masters do not grow " .. "monotonically across majorities (use redis.sentinel or redis.cluster with replicas for fenced locks)"
REFUSES.semaphore = "dlock: semaphores (and concurrency guards) are refused with redis.redlock: counting permits on each " .. "master does not bound the holders of a majority"
REFUSES.idempotency = "dlock: idempotency guards are refused with redis.redlock: a stored response needs one place to live"
____exports.backend = {
    call = call,
    batch = batch,
    validity = validity,
    queues = false,
    refuses = REFUSES,
    fenceKey = fenceKey,
    shared = shared,
    describe = describe,
    servers = servers
}
return ____exports
