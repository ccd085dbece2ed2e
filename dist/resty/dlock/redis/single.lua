-- Generated from src/resty/dlock/redis/single.ts by TypeScriptToLua: edit that file, not this one.
-- One Redis server (standalone, unix socket, or the master Sentinel names):
-- a call rides the server's auto-pipeline (pipeline.lua), a batch is one
-- round trip (roundtrip.lua, targets.lua). The Cluster and Redlock backends talk to each of
-- their servers the same way.
local _M = {}
local pipeline = require("resty.dlock.redis.pipeline")
local perTarget = require("resty.dlock.redis.targets")
local function trusted(ttl)
    return ttl
end
--- The fence counter next to the lock key, where earlier versions kept it: fences never go back.
local function fenceKey(rkey)
    return rkey .. ":fence"
end
local function nothingShared()
    return nil, nil
end
local function nothingMore()
    return nil
end
local function itself(conf)
    return {conf}
end
_M.backend = {
    call = pipeline.call,
    post = pipeline.post,
    batch = perTarget.many,
    validity = trusted,
    queues = true,
    confirmsOwner = true,
    refuses = {},
    fenceKey = fenceKey,
    shared = nothingShared,
    describe = nothingMore,
    servers = itself
}
return _M
