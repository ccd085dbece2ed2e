-- Generated from src/resty/dlock/redis/slotmap.ts by TypeScriptToLua: edit that file, not this one.
-- The slot map of a Redis Cluster, per worker: which master serves each of
-- the 16384 slots (CLUSTER SLOTS), read from the masters known, then the seed
-- nodes; a key's slot (CRC16 of its hash tag). cluster.lua routes by it, and
-- patches it on MOVED. Each master is one configuration (its pools and its
-- auto-pipeline) for as long as the worker lives.
local _M = {}
local derived = require("resty.dlock.redis.derived")
local connection = require("resty.dlock.redis.connection")
local hints = require("resty.dlock.redis.hints")
local scripts = require("resty.dlock.redis.scripts")
local schema = require("resty.dlock.core.schema")
local clock = require("resty.dlock.core.clock")
local question = require("resty.dlock.core.question")
local bitop = require("bit")
local band = bitop.band
local bxor = bitop.bxor
local lshift = bitop.lshift
local rshift = bitop.rshift
local byte = string.byte
local hashed = scripts.hashed
local clock_now = clock.now
local underway = question.underway
local lua_type = type
local lua_tostring = tostring
local ngx_null = ngx.null
local tbl_concat = table.concat
local connect = connection.connect
local done = connection.done
local nodeConf = derived.node
local literal = schema.literal
local SLOTS = 16384
--- Shared dict keys (all workers): redirects followed, when a worker last read the slot map.
_M.REDIRECTS = "c:redis:redirects:"
_M.MAP_AT = "t:redis:slot_map:"
--- Seconds between two reads of the slot map prompted by errors.
local REFRESH_GAP = 0.1
-- CRC16-CCITT (XMODEM): what Redis Cluster hashes keys with. Table-driven.
local CRC = {}
for i = 0, 255 do
    local c = lshift(i, 8)
    for _ = 1, 8 do
        c = band(c, 32768) ~= 0 and band(bxor(lshift(c, 1), 4129), 65535) or band(lshift(c, 1), 65535)
    end
    CRC[i] = c
end
--- The cluster slot of a key, as Redis computes it (CLUSTER KEYSLOT).
function _M.slot(key)
    local h = hashed(key)
    local crc = 0
    for i = 1, #h do
        crc = bxor(band(lshift(crc, 8), 65535), CRC[bxor(rshift(crc, 8), byte(h, i))])
    end
    return band(crc, SLOTS - 1)
end
--- Per worker, per cluster (by pool name): one map, whichever factory read it.
local clusters = {}
function _M.state(conf)
    local c = clusters[conf.pool]
    if c == nil then
        c = {
            slots = {},
            addrs = {},
            masters = {},
            at = 0,
            stale = true,
            tried = 0,
            refreshing = nil,
            redirects = 0,
            refreshes = 0,
            lastError = nil
        }
        clusters[conf.pool] = c
    end
    return c
end
--- Per configuration (a factory's), its own configuration of each master:
-- with the factory's timeouts and replicas, and an auto-pipeline of its own,
-- as a single server's configuration has. Weak keys: a factory dropped takes
-- them along.
local views = setmetatable({}, {__mode = "k"})
--- conf's configuration of the master at endpoint ep ("host:port", an address the map holds).
local function nodeAt(conf, c, ep)
    local view = views[conf]
    if view == nil then
        view = {}
        views[conf] = view
    end
    local n = view[ep]
    if n == nil then
        local a = c.addrs[ep]
        n = nodeConf(conf, a.host, a.port, hints.BY_CLUSTER)
        view[ep] = n
    end
    return n
end
--- conf's configuration of the master at host:port (an IPv6 address bare, as CLUSTER SLOTS and MOVED give it, or in brackets).
local function nodeOf(conf, c, bare, port)
    local host = literal(bare)
    local ep = host .. ":" .. lua_tostring(port)
    if c.addrs[ep] == nil then
        c.addrs[ep] = {host = host, port = port}
    end
    return nodeAt(conf, c, ep)
end
--- CLUSTER SLOTS from one node: the map, or an error.
local function readMap(conf, c, from)
    local red, cerr = connect(from)
    if red == nil then
        return cerr
    end
    local ranges, err = red:cluster("slots")
    done(red, from, ranges ~= nil)
    if lua_type(ranges) ~= "table" then
        return "dlock: redis " .. from.endpoint .. ": CLUSTER SLOTS failed: " .. lua_tostring(err)
    end
    local slots = {}
    local masters = {}
    local seen = {}
    local list = ranges
    for i = 1, #list do
        local r = list[i]
        local first = r[1]
        local last = r[2]
        local m = r[3]
        local named = m[1]
        local host = named == ngx_null and "" or lua_tostring(named)
        -- A node that does not know its own address says "" (or, with
        -- cluster-preferred-endpoint-type unknown-endpoint, null): it is the one we asked.
        if host == "" or host == "?" then
            host = from.host
        end
        local n = nodeOf(conf, c, host, m[2])
        for s = first, last do
            slots[s] = n.endpoint
        end
        if seen[n.endpoint] == nil then
            seen[n.endpoint] = true
            masters[#masters + 1] = n.endpoint
        end
    end
    c.slots = slots
    c.masters = masters
    c.at = clock_now()
    c.stale = false
    c.refreshes = c.refreshes + 1
    if conf.dict ~= nil then
        conf.dict:safe_set(_M.MAP_AT .. conf.endpoint, c.at)
    end
    return nil
end
--- Read the slot map again: from the masters known, then the seed nodes. nil, or why no node gave it.
local function readAny(conf, c)
    local errors = {}
    local asked = {}
    local candidates = {}
    for i = 1, #c.masters do
        candidates[#candidates + 1] = nodeAt(conf, c, c.masters[i])
    end
    local seeds = conf.nodes
    for i = 1, #seeds do
        candidates[#candidates + 1] = seeds[i]
    end
    for i = 1, #candidates do
        local n = candidates[i]
        if asked[n.endpoint] == nil then
            asked[n.endpoint] = true
            local err = readMap(conf, c, n)
            if err == nil then
                return true, nil
            end
            errors[#errors + 1] = err
        end
    end
    if #errors == 0 then
        errors[#errors + 1] = "no node to ask"
    end
    c.lastError = tbl_concat(errors, "; ")
    return nil, "dlock: redis " .. conf.endpoint .. ": no node gave the slot map (" .. c.lastError .. ")"
end
--- The question's timer reads the map with these.
local function readFor(r)
    return readAny(r.conf, r.c)
end
--- Read the slot map again, once per worker at a time: in a timer
-- (core/question.lua), so that a caller that goes away in the middle does not
-- leave the map unread for good. The caller that starts the read, and any
-- caller with no map yet, waits for it; the others go on with the map they
-- have (a MOVED puts any of them right).
local function refresh(conf, c)
    local q = c.refreshing
    if underway(q) then
        if c.at ~= 0 then
            return nil
        end
    else
        c.tried = clock_now()
        -- Each node: a connect, a handshake, AUTH and CLUSTER SLOTS; and a second to start.
        local longest = (#c.masters + #conf.nodes) * (conf.connect_timeout + 3 * conf.read_timeout) / 1000 + 1
        q = question.start(longest, readFor, {conf = conf, c = c})
        if q == nil then
            local _read, inPlace = readAny(conf, c)
            return inPlace
        end
        c.refreshing = q
    end
    local _read, err = question.answer(q, "redis " .. conf.endpoint .. ": reading the slot map")
    return err
end
--- The master of slot s by the map as it is, without reading it again: nil while it is stale or no master serves s.
function _M.known(conf, c, s)
    if c.stale then
        return nil
    end
    local ep = c.slots[s]
    return ep ~= nil and nodeAt(conf, c, ep) or nil
end
--- The master of a slot, reading the map first when it is due.
function _M.route(conf, c, s)
    if c.stale and (c.at == 0 or clock_now() - c.tried >= REFRESH_GAP) then
        local err = refresh(conf, c)
        if err ~= nil and c.at == 0 then
            return nil, err
        end
    end
    -- A slot no master serves (the map is being read, or the cluster lost it):
    -- a seed will answer MOVED or CLUSTERDOWN.
    local ep = c.slots[s]
    return ep ~= nil and nodeAt(conf, c, ep) or conf.nodes[1], nil
end
-- Exported by name: this module's own uses of them are locals, not lookups in its exports table.
_M.nodeAt = nodeAt
_M.nodeOf = nodeOf
return _M
