--[[ Generated with https://github.com/TypeScriptToLua/TypeScriptToLua ]]
local ____exports = {}
local scripts = require("resty.dlock.redis.scripts")
local cluster = require("resty.dlock.redis.cluster")
local quorum = require("resty.dlock.redis.quorum")
local pipeline = require("resty.dlock.redis.pipeline")
local single = require("resty.dlock.redis.single")
--- Run script s with rkey as KEYS[1] (more keys, then arguments, follow in args).
function ____exports.call(conf, s, rkey, ...)
    local t = conf.topology
    if t == "cluster" then
        return cluster.call(conf, s, rkey, ...)
    end
    if t == "redlock" then
        return quorum.call(conf, s, rkey, ...)
    end
    return pipeline.call(conf, s, rkey, ...)
end
--- Run the single-key script s (ARGV[1] the token, ARGV[2] ms[i] when given) for
-- every target, in as few round trips as the topology allows.
function ____exports.batch(conf, s, targets, ms)
    local t = conf.topology
    if t == "cluster" then
        return cluster.batch(conf, s, targets, ms)
    end
    if t == "redlock" then
        return quorum.batch(conf, s, targets, ms)
    end
    return single.batch(conf, s, targets, ms)
end
--- Run a per-target script (release, extend, drop) for one target, as batch() would.
function ____exports.own(conf, s, rkey, token, ms)
    return scripts.forTarget(
        ____exports.call,
        conf,
        s,
        rkey,
        token,
        ms
    )
end
--- The key of the fence counter of lock key rkey. The acquire script touches
-- both, so under Cluster they must share a slot: a hash tag of the whole lock
-- key, unless it has one already (then the suffix keeps it). Elsewhere the
-- counter stays where earlier versions kept it, so fences never go back.
function ____exports.fenceKey(conf, rkey)
    if conf.topology == "cluster" and not scripts.tagged(rkey) then
        return ("{" .. rkey) .. "}:fence"
    end
    return rkey .. ":fence"
end
--- How long a lease taken at `sent` for ttl ms can be trusted, in ms. Redlock
-- subtracts its allowance for clock drift between the masters.
function ____exports.validity(conf, ttl)
    if conf.topology == "redlock" then
        return ttl - quorum.drift(ttl)
    end
    return ttl
end
--- What a topology cannot do safely, as the error new() returns; nil when it can.
-- A fence counter per Redlock master is not monotonic across majorities (two
-- majorities share one master, but not its counter), and a counting semaphore
-- per master does not bound holders (three holders can each own a majority of
-- permits on three masters with two permits each).
function ____exports.refuses(conf, what)
    if conf.topology ~= "redlock" then
        return nil
    end
    if what == "fencing" then
        return "dlock: fencing is refused with redis.redlock: fence counters on independent masters do not grow " .. "monotonically across majorities (use redis.sentinel or redis.cluster with replicas for fenced locks)"
    end
    if what == "semaphore" then
        return "dlock: semaphores (and concurrency guards) are refused with redis.redlock: counting permits on each " .. "master does not bound the holders of a majority"
    end
    return "dlock: idempotency guards are refused with redis.redlock: a stored response needs one place to live"
end
--- The dict key counting writes that fewer replicas than asked acknowledged in time.
____exports.SHORTFALLS = single.SHORTFALLS
--- Counters every worker adds to, for metrics: per label (a node, or the
-- endpoint itself), a value. Cluster: redirects followed and the age of the
-- newest slot map read; Redlock: failed calls per master.
function ____exports.shared(conf)
    local d = conf.dict
    if d == nil then
        return nil, nil
    end
    local t = {}
    if conf.topology == "cluster" then
        local n = d:get(cluster.REDIRECTS .. conf.endpoint)
        t.redirects = type(n) == "number" and n or 0
        local at = d:get(cluster.MAP_AT .. conf.endpoint)
        if type(at) == "number" then
            t.slot_map_age = ngx.now() - at
        end
        return "cluster", t
    end
    if conf.topology == "redlock" then
        for ____, node in ipairs(conf.nodes) do
            local n = d:get(quorum.NODE_FAILURES .. node.endpoint)
            t[node.endpoint] = type(n) == "number" and n or 0
        end
        return "redlock", t
    end
    return nil, nil
end
--- What status pages show of this endpoint's topology beyond its settings (per worker).
function ____exports.describe(conf)
    if conf.topology == "cluster" then
        return cluster.describe(conf)
    end
    if conf.topology == "redlock" then
        return quorum.describe(conf)
    end
    return nil
end
return ____exports
