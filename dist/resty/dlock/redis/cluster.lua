-- Generated from src/resty/dlock/redis/cluster.ts by TypeScriptToLua: edit that file, not this one.
-- Redis Cluster: each key goes to the master of its slot (slotmap.lua), on
-- that master's auto-pipeline: concurrent calls of a worker to one master
-- share round trips, as on a single server. MOVED (the slot lives elsewhere
-- now) patches the map, retries there and has the whole map read again on
-- the next call; ASK (the slot is being migrated and this key is already on
-- the target) retries on the target with ASKING, leaving the map alone. Both
-- are bounded by redis.cluster.max_redirects. Connection errors and
-- CLUSTERDOWN (a master died, its replica not promoted yet) have the map read
-- again too, at most every REFRESH_GAP seconds, so a failover is followed
-- without a reload.
local _M = {}
local argList = require("resty.dlock.redis.args")
local map = require("resty.dlock.redis.slotmap")
local pipeline = require("resty.dlock.redis.pipeline")
local roundtrip = require("resty.dlock.redis.roundtrip")
local perTarget = require("resty.dlock.redis.targets")
local scripts = require("resty.dlock.redis.scripts")
local clock = require("resty.dlock.core.clock")
local dictcount = require("resty.dlock.core.dictcount")
local pipelined = pipeline.call
local posted = pipeline.post
local alone = roundtrip.one
local migrating = roundtrip.migrating
local many = perTarget.many
local forTarget = scripts.forTarget
local tagged = scripts.tagged
local state = map.state
local route = map.route
local slot = map.slot
local nodeOf = map.nodeOf
local nodeAt = map.nodeAt
local known = map.known
local clock_now = clock.now
local clock_sleep = clock.sleep
local lua_tostring = tostring
local lua_type = type
local lua_tonumber = tonumber
local lua_unpack = unpack
local lua_select = select
local forward = argList.forward
local listOf = argList.listOf
local withoutKeys = argList.withoutKeys
local str_match = string.match
local str_gsub = string.gsub
local str_format = string.format
local math_floor = math.floor
--- Seconds between tries of a script Redis answered TRYAGAIN (its slot is migrating).
local TRYAGAIN_PAUSE = 0.02
--- Might this failure mean the map is wrong (a dead master, a lost slot)? Any
-- fault may: reading the map again costs one round trip per REFRESH_GAP.
local function suspicious(fault)
    return fault ~= nil and fault ~= "replicas"
end
--- Did the node answer (an error reply such as "ERR ..." or "WRONGTYPE ..."), rather than not being reached?
local function replied(node, err)
    local code = str_match(
        lua_tostring(err),
        "^dlock: redis " .. (str_gsub(node.endpoint, "%p", "%%%0")) .. ": (%u%u+) "
    )
    return code ~= nil and code ~= "TLS"
end
--- After a call that failed: follow MOVED and ASK, wait out TRYAGAIN, and say what a failure means.
local function follow(conf, c, sl, first, s, rkey, args, res0, err0, fault0)
    local node = first
    local asking = false
    local script = s
    local rest = args
    local res = res0
    local err = err0
    local fault = fault0
    for i = 0, conf.max_redirects do
        if i > 0 then
            if asking then
                res, err, fault = alone(node, true, script, rkey, lua_unpack(rest))
            else
                res, err, fault = pipelined(node, script, rkey, lua_unpack(rest))
            end
        end
        local tryagain = migrating(fault, err)
        if tryagain and script.alone ~= nil then
            -- The slot migrates and the lock key and its waiters' queue are not on one
            -- node: the form without the queues (the last keys; they wait till after).
            rest = withoutKeys(rest, script.alone.keys, script.keys - 1)
            script = script.alone
        elseif tryagain and i < conf.max_redirects then
            -- A multi-key script (the fenced acquire) while its slot migrates: the
            -- keys are split between the nodes for a moment. Ask the same node again.
            clock_sleep(TRYAGAIN_PAUSE)
        elseif fault ~= "redirect" then
            if suspicious(fault) then
                c.stale = true
            end
            if fault == "failed" and not replied(node, err) then
                -- The master could not be reached: most likely dead and about to be
                -- replaced by its replica. Nothing was sent; a waiting acquire tries again.
                return res, err, "transient"
            end
            return res, err, fault
        else
            local kind, _slot, host, port = str_match(lua_tostring(err), "(%u+) (%d+) (%S*):(%d+)$")
            if kind == nil then
                return nil, err, "failed"
            end
            c.redirects = c.redirects + 1
            if conf.dict ~= nil then
                dictcount.count(conf.dict, map.REDIRECTS .. conf.endpoint, 1)
            end
            -- No host (cluster-preferred-endpoint-type unknown-endpoint): the one that answered.
            node = nodeOf(conf, c, host == "" and node.host or host, lua_tonumber(port))
            asking = kind == "ASK"
            if not asking then
                c.slots[sl] = node.endpoint
                c.stale = true
            end
        end
    end
    -- A slot on the move (ASK, TRYAGAIN, MOVED in turn) is "not now": a waiting acquire tries again.
    return nil, str_format("dlock: redis %s: key %s redirected more than %d times (redis.cluster.max_redirects)", conf.endpoint, rkey, conf.max_redirects), "transient"
end
--- Run s for rkey on the master of its slot; what went wrong is looked at in
-- follow(). Its arguments come as locals, read by call() before slot()'s loop:
-- the trace LuaJIT starts where that loop exits comes back here, and would
-- compile no `...` (args.lua). More than six come as a list.
local function routed(conf, s, rkey, list, n, a1, a2, a3, a4, a5, a6)
    local c = state(conf)
    local sl = slot(rkey)
    local node, rerr = route(conf, c, sl)
    if node == nil then
        return nil, rerr, "failed"
    end
    local res
    local err
    local fault
    if list == nil then
        res, err, fault = forward(pipelined, node, s, rkey, n, a1, a2, a3, a4, a5, a6)
    else
        res, err, fault = pipelined(node, s, rkey, lua_unpack(list))
    end
    if fault == nil then
        return res, err, fault
    end
    return follow(conf, c, sl, node, s, rkey, list or listOf(n, a1, a2, a3, a4, a5, a6), res, err, fault)
end
local function call(conf, s, rkey, ...)
    local n = lua_select("#", ...)
    if n > 6 then
        return routed(conf, s, rkey, {...}, n)
    end
    local a1, a2, a3, a4, a5, a6 = lua_select(1, ...)
    return routed(conf, s, rkey, nil, n, a1, a2, a3, a4, a5, a6)
end
--- Put s for rkey into the next pipeline to its slot's master (pipeline.post); nil while the slot map is being read.
local function postRouted(conf, s, rkey, list, n, a1, a2, a3, a4, a5, a6)
    local node = known(conf, state(conf), slot(rkey))
    if node == nil then
        return nil
    end
    if list ~= nil then
        return posted(node, s, rkey, lua_unpack(list))
    end
    return forward(posted, node, s, rkey, n, a1, a2, a3, a4, a5, a6)
end
local function post(conf, s, rkey, ...)
    local n = lua_select("#", ...)
    if n > 6 then
        return postRouted(conf, s, rkey, {...}, n)
    end
    local a1, a2, a3, a4, a5, a6 = lua_select(1, ...)
    return postRouted(conf, s, rkey, nil, n, a1, a2, a3, a4, a5, a6)
end
--- One pipeline per master for the targets whose slots it serves; a target
-- sent elsewhere (MOVED, ASK) or answered TRYAGAIN is retried alone through call().
local function batch(conf, s, targets, ms)
    local out = {replies = {}, errors = {}, faults = {}}
    local c = state(conf)
    local groups = {}
    local order = {}
    for i = 1, #targets do
        local node, rerr = route(conf, c, slot(targets[i].rkey))
        if node == nil then
            out.errors[i] = rerr
            out.faults[i] = "failed"
        else
            local g = groups[node.endpoint]
            if g == nil then
                g = {node = node, idx = {}}
                groups[node.endpoint] = g
                order[#order + 1] = node.endpoint
            end
            g.idx[#g.idx + 1] = i
        end
    end
    for k = 1, #order do
        local g = groups[order[k]]
        local sub = {}
        local subMs
        if ms ~= nil then
            subMs = {}
        end
        for j = 1, #g.idx do
            local i = g.idx[j]
            sub[#sub + 1] = targets[i]
            if subMs ~= nil then
                subMs[#subMs + 1] = ms[i]
            end
        end
        local o = many(g.node, s, sub, subMs)
        for j = 1, #g.idx do
            local i = g.idx[j]
            local fault = o.faults[j]
            -- A slot migrating answers TRYAGAIN to a script whose keys it holds in
            -- part: call() tries the form without the queue, as for a redirect.
            if fault == "redirect" or migrating(fault, o.errors[j]) then
                local t = targets[i]
                local m
                if subMs ~= nil then
                    m = subMs[j]
                end
                local res, err, f = forTarget(call, conf, s, t.rkey, t.token, m)
                if res ~= nil then
                    out.replies[i] = res
                else
                    out.errors[i] = err
                    out.faults[i] = f
                end
            elseif fault ~= nil then
                if suspicious(fault) then
                    c.stale = true
                end
                out.errors[i] = o.errors[j]
                out.faults[i] = fault
            else
                out.replies[i] = o.replies[j]
            end
        end
    end
    return out
end
local function trusted(ttl)
    return ttl
end
--- The acquire script touches the lock key and its fence counter, so they
-- must share a slot: a hash tag of the whole lock key, unless it has one
-- already (then the suffix keeps it).
local function fenceKey(rkey)
    return tagged(rkey) and rkey .. ":fence" or "{" .. rkey .. "}:fence"
end
--- Redirects followed and the age of the newest slot map read, over every worker.
local function shared(conf, d)
    local t = {}
    local n = d:get(map.REDIRECTS .. conf.endpoint)
    t.redirects = lua_type(n) == "number" and n or 0
    local at = d:get(map.MAP_AT .. conf.endpoint)
    if lua_type(at) == "number" then
        t.slot_map_age = clock_now() - at
    end
    return "cluster", t
end
--- For status pages: the masters, the map's age, redirects followed (this worker).
local function describe(conf)
    local c = state(conf)
    local t = {}
    t.masters = c.masters
    t.slot_map_age = c.at > 0 and math_floor((clock_now() - c.at) * 1000) / 1000 or nil
    t.slot_map_reads = c.refreshes
    t.redirects = c.redirects
    t.last_error = c.lastError
    return t
end
--- The masters of the last map read.
local function servers(conf)
    local c = state(conf)
    local out = {}
    for i = 1, #c.masters do
        out[#out + 1] = nodeAt(conf, c, c.masters[i])
    end
    return out
end
_M.backend = {
    call = call,
    post = post,
    batch = batch,
    validity = trusted,
    queues = true,
    confirmsOwner = true,
    refuses = {},
    fenceKey = fenceKey,
    shared = shared,
    describe = describe,
    servers = servers
}
return _M
