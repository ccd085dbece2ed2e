--[[ Generated with https://github.com/TypeScriptToLua/TypeScriptToLua ]]
local ____exports = {}
local redis = require("resty.dlock.redis.client")
local scripts = require("resty.dlock.redis.scripts")
local single = require("resty.dlock.redis.single")
local ____bit = require("bit")
local band = ____bit.band
local bxor = ____bit.bxor
local lshift = ____bit.lshift
local rshift = ____bit.rshift
local byte = string.byte
local hashed = scripts.hashed
local find = string.find
local SLOTS = 16384
--- Shared dict keys (all workers): redirects followed, when a worker last read the slot map.
____exports.REDIRECTS = "c:redis:redirects:"
____exports.MAP_AT = "t:redis:slot_map:"
--- Seconds between two reads of the slot map prompted by errors.
local REFRESH_GAP = 0.1
--- Seconds between tries of a script Redis answered TRYAGAIN (its slot is migrating).
local TRYAGAIN_PAUSE = 0.02
local CRC = {}
for i = 0, 255 do
    local c = lshift(i, 8)
    for _ = 1, 8 do
        c = band(c, 32768) ~= 0 and band(
            bxor(
                lshift(c, 1),
                4129
            ),
            65535
        ) or band(
            lshift(c, 1),
            65535
        )
    end
    CRC[i] = c
end
--- The cluster slot of a key, as Redis computes it (CLUSTER KEYSLOT).
function ____exports.slot(key)
    local h = hashed(key)
    local crc = 0
    for i = 1, #h do
        crc = bxor(
            band(
                lshift(crc, 8),
                65535
            ),
            CRC[bxor(
                rshift(crc, 8),
                byte(h, i)
            )]
        )
    end
    return band(crc, SLOTS - 1)
end
--- Per worker, per cluster configuration (by pool name).
local clusters = {}
local function state(conf)
    local c = clusters[conf.pool]
    if c == nil then
        c = {
            slots = {},
            nodes = {},
            masters = {},
            at = 0,
            stale = true,
            tried = 0,
            refreshing = false,
            redirects = 0,
            refreshes = 0,
            lastError = nil
        }
        clusters[conf.pool] = c
    end
    return c
end
local function nodeOf(conf, c, host, port)
    local name = (host .. ":") .. tostring(port)
    local n = c.nodes[name]
    if n == nil then
        n = redis.node(conf, host, port)
        c.nodes[name] = n
    end
    return n
end
--- CLUSTER SLOTS from one node: the map, or an error.
local function readMap(conf, c, from)
    local red, cerr = redis.connect(from)
    if red == nil then
        return cerr
    end
    local ranges, err = red:cluster("slots")
    redis.done(red, from, ranges ~= nil)
    if type(ranges) ~= "table" then
        return (("dlock: redis " .. from.endpoint) .. ": CLUSTER SLOTS failed: ") .. tostring(err)
    end
    local slots = {}
    local masters = {}
    local seen = {}
    for ____, r in ipairs(ranges) do
        local first = r[1]
        local last = r[2]
        local m = r[3]
        local host = tostring(m[1])
        if host == "" or host == "?" then
            host = from.host
        end
        local n = nodeOf(conf, c, host, m[2])
        for s = first, last do
            slots[s] = n
        end
        if not (seen[n.endpoint] ~= nil) then
            seen[n.endpoint] = true
            masters[#masters + 1] = n.endpoint
        end
    end
    c.slots = slots
    c.masters = masters
    c.at = ngx.now()
    c.stale = false
    c.refreshes = c.refreshes + 1
    if conf.dict ~= nil then
        conf.dict:set(____exports.MAP_AT .. conf.endpoint, c.at)
    end
    return nil
end
--- Read the slot map again: from the masters known, then the seed nodes. One
-- coroutine per worker at a time; the others go on with the map they have
-- (a MOVED puts any of them right).
local function refresh(conf, c)
    if c.refreshing then
        return nil
    end
    c.refreshing = true
    c.tried = ngx.now()
    local errors = {}
    local asked = {}
    local candidates = {}
    for ____, ep in ipairs(c.masters) do
        local n = c.nodes[ep]
        if n ~= nil then
            candidates[#candidates + 1] = n
        end
    end
    for ____, n in ipairs(conf.nodes) do
        candidates[#candidates + 1] = n
    end
    local err = "no node to ask"
    for ____, n in ipairs(candidates) do
        if not (asked[n.endpoint] ~= nil) then
            asked[n.endpoint] = true
            err = readMap(conf, c, n)
            if err == nil then
                break
            end
            errors[#errors + 1] = err
        end
    end
    c.refreshing = false
    if err ~= nil then
        c.lastError = table.concat(errors, "; ")
        return ((("dlock: redis " .. conf.endpoint) .. ": no node gave the slot map (") .. c.lastError) .. ")"
    end
    return nil
end
--- The master of a slot, reading the map first when it is due.
local function route(conf, c, s)
    if c.stale and (c.at == 0 or ngx.now() - c.tried >= REFRESH_GAP) then
        local err = refresh(conf, c)
        if err ~= nil and c.at == 0 then
            return nil, err
        end
    end
    return c.slots[s] or conf.nodes[1], nil
end
--- Might this failure mean the map is wrong (a dead master, a lost slot)? Any
-- fault may: reading the map again costs one round trip per REFRESH_GAP.
local function suspicious(fault)
    return fault ~= nil and fault ~= "replicas"
end
--- Did the node answer (an error reply such as "ERR ..." or "WRONGTYPE ..."), rather than not being reached?
local function replied(node, err)
    local code = string.match(
        tostring(err),
        ("^dlock: redis " .. (string.gsub(node.endpoint, "%p", "%%%0"))) .. ": (%u%u+) "
    )
    return code ~= nil and code ~= "TLS"
end
--- args (the keys after the first, then the arguments) without the one at position `at`.
local function withoutKey(args, at)
    local out = {}
    for i = 1, #args do
        if i ~= at then
            out[#out + 1] = args[i]
        end
    end
    return out
end
--- Run s for rkey on the master of its slot, following MOVED and ASK.
function ____exports.call(conf, s, rkey, ...)
    local args = {...}
    local c = state(conf)
    local sl = ____exports.slot(rkey)
    local first, rerr = route(conf, c, sl)
    if first == nil then
        return nil, rerr, "failed"
    end
    local node = first
    local asking = false
    local script = s
    local rest = args
    for i = 0, conf.max_redirects do
        local res, err, fault = single.exec(
            node,
            asking,
            script,
            rkey,
            unpack(rest)
        )
        local tryagain = fault == "transient" and ({find(
            tostring(err),
            ": TRYAGAIN",
            1,
            true
        )}) ~= nil
        if tryagain and script.alone ~= nil then
            rest = withoutKey(rest, script.keys - 1)
            script = script.alone
        elseif tryagain and i < conf.max_redirects then
            ngx.sleep(TRYAGAIN_PAUSE)
        elseif fault ~= "redirect" then
            if suspicious(fault) then
                c.stale = true
            end
            if fault == "failed" and not replied(node, err) then
                return res, err, "transient"
            end
            return res, err, fault
        else
            local kind, ____, host, port = string.match(
                tostring(err),
                "(%u+) (%d+) (%S+):(%d+)$"
            )
            if kind == nil then
                return nil, err, "failed"
            end
            c.redirects = c.redirects + 1
            if conf.dict ~= nil then
                conf.dict:incr(____exports.REDIRECTS .. conf.endpoint, 1, 0)
            end
            node = nodeOf(
                conf,
                c,
                host,
                tonumber(port)
            )
            asking = kind == "ASK"
            if not asking then
                c.slots[sl] = node
                c.stale = true
            end
        end
    end
    return nil, string.format("dlock: redis %s: key %s redirected more than %d times (redis.cluster.max_redirects)", conf.endpoint, rkey, conf.max_redirects), "transient"
end
--- One pipeline per master for the targets whose slots it serves; a target
-- sent elsewhere (MOVED, ASK) is retried alone through call().
function ____exports.batch(conf, s, targets, ms)
    local out = {replies = {}, errors = {}, faults = {}}
    local c = state(conf)
    local groups = {}
    local order = {}
    for i = 1, #targets do
        local node, rerr = route(
            conf,
            c,
            ____exports.slot(targets[i].rkey)
        )
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
            local ____g_idx_0 = g.idx
            ____g_idx_0[#____g_idx_0 + 1] = i
        end
    end
    for ____, ep in ipairs(order) do
        local g = groups[ep]
        local sub = {}
        local subMs
        if ms ~= nil then
            subMs = {}
        end
        for ____, i in ipairs(g.idx) do
            sub[#sub + 1] = targets[i]
            if subMs ~= nil then
                subMs[#subMs + 1] = ms[i]
            end
        end
        local o = single.batch(g.node, s, sub, subMs)
        for j = 1, #g.idx do
            local i = g.idx[j]
            local fault = o.faults[j]
            if fault == "redirect" then
                local t = targets[i]
                local m
                if subMs ~= nil then
                    m = subMs[j]
                end
                local res, err, f = scripts.forTarget(
                    ____exports.call,
                    conf,
                    s,
                    t.rkey,
                    t.token,
                    m
                )
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
--- For status pages: the masters, the map's age, redirects followed (this worker).
function ____exports.describe(conf)
    local c = state(conf)
    local t = {}
    t.masters = c.masters
    t.slot_map_age = c.at > 0 and math.floor((ngx.now() - c.at) * 1000) / 1000 or nil
    t.slot_map_reads = c.refreshes
    t.redirects = c.redirects
    t.last_error = c.lastError
    return t
end
return ____exports
