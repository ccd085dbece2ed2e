-- Generated from src/resty/dlock/redis/backend.ts by TypeScriptToLua: edit that file, not this one.
-- The one way into Redis: run this script for this key (call), or this script
-- for many keys (batch). Where the key lives is the backend's business, chosen
-- once per configuration (parse), never per call:
--   standalone, unix, sentinel   one server (single.lua; Sentinel only changes its address)
--   cluster                      the master of the key's slot (cluster.lua)
--   redlock                      a majority of independent masters (quorum.lua)
-- Each talks to its servers the one way (pipeline.lua and roundtrip.lua over
-- connection.lua), and every backend answers with the same outcomes and faults.
local _M = {}
local redis = require("resty.dlock.redis.client")
local scripts = require("resty.dlock.redis.scripts")
local cluster = require("resty.dlock.redis.cluster")
local quorum = require("resty.dlock.redis.quorum")
local replicas = require("resty.dlock.redis.replicas")
local single = require("resty.dlock.redis.single")
local BY_TOPOLOGY = {}
BY_TOPOLOGY.standalone = single.backend
BY_TOPOLOGY.unix = single.backend
BY_TOPOLOGY.sentinel = single.backend
BY_TOPOLOGY.cluster = cluster.backend
BY_TOPOLOGY.redlock = quorum.backend
--- Status pages list every configuration parsed, also those made without a factory (redis.parse).
local function backendOf(conf)
    return conf.backend or BY_TOPOLOGY[conf.topology]
end
--- The `redis` option table of a factory (redis.parse), with the backend that will serve it.
function _M.parse(v, dict)
    local conf, err = redis.parse(v, dict)
    if conf == nil then
        return nil, err
    end
    conf.backend = BY_TOPOLOGY[conf.topology]
    return conf, nil
end
--- Run script s with rkey as KEYS[1] (more keys, then arguments, follow in args).
function _M.call(conf, s, rkey, ...)
    return conf.backend.call(conf, s, rkey, ...)
end
--- Run the single-key script s (ARGV[1] the token, ARGV[2] ms[i] when given) for
-- every target, in as few round trips as the topology allows.
function _M.batch(conf, s, targets, ms)
    return conf.backend.batch(conf, s, targets, ms)
end
--- Run a per-target script (release, extend, drop) for one target, as batch() would.
function _M.own(conf, s, rkey, token, ms)
    return scripts.forTarget(conf.backend.call, conf, s, rkey, token, ms)
end
--- Put script s for rkey into the next pipeline to its server, without waiting
-- for the reply (see pipeline.post), from any phase: the call, whose `post`
-- hears its outcome, or nil when it cannot go that way (then call() it from a timer).
function _M.post(conf, s, rkey, ...)
    return conf.backend.post(conf, s, rkey, ...)
end
--- As post(), for a per-target script (a release) for one target, with the keys and arguments own() sends.
function _M.postOwn(conf, s, rkey, token)
    return scripts.forTarget(conf.backend.post, conf, s, rkey, token)
end
--- The key of the fence counter of lock key rkey.
function _M.fenceKey(conf, rkey)
    return conf.backend.fenceKey(rkey)
end
--- How long a lease taken for ttl ms can be trusted, in ms (Redlock subtracts its allowance for clock drift).
function _M.validity(conf, ttl)
    return conf.backend.validity(ttl)
end
--- Do waiters of a lock line up in Redis? (Not under Redlock: a queue on every master has no one order.)
function _M.queues(conf)
    return conf.backend.queues
end
--- Does a release's "deleted" answer prove the key was still the lease's? (Not a Redlock quorum's.)
function _M.confirmsOwner(conf)
    return conf.backend.confirmsOwner
end
--- What a topology cannot do safely, as the error new() returns; nil when it can.
function _M.refuses(conf, what)
    return conf.backend.refuses[what]
end
--- The dict key counting writes that fewer replicas than asked acknowledged in time.
_M.SHORTFALLS = replicas.SHORTFALLS
--- Counters every worker adds to, for metrics: per label (a node, or the
-- endpoint itself), a value. Cluster: redirects followed and the age of the
-- newest slot map read; Redlock: failed calls per master.
function _M.shared(conf)
    local d = conf.dict
    if d == nil then
        return nil, nil
    end
    return backendOf(conf).shared(conf, d)
end
--- What status pages show of this endpoint's topology beyond its settings (per worker).
function _M.describe(conf)
    return backendOf(conf).describe(conf)
end
return _M
