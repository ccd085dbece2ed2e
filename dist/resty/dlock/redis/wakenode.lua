-- Generated from src/resty/dlock/redis/wakenode.ts by TypeScriptToLua: edit that file, not this one.
-- The node the wake-up subscriber (subscriber.lua) connects to. Under Cluster
-- and Redlock any node will do, and none is always up: it moves on to the
-- next when one cannot be reached, rather than leave the waiters polling.
local _M = {}
local connection = require("resty.dlock.redis.connection")
local derived = require("resty.dlock.redis.derived")
local map = require("resty.dlock.redis.slotmap")
local connect_to = connection.connect
local apart = derived.apart
local cluster_state = map.state
local nodeAt = map.nodeAt
--- Where the subscription may go: the endpoint; under Cluster any node (a
-- PUBLISH reaches them all), the masters of the slot map, then the seeds;
-- under Redlock any of its masters (a release publishes on each).
local function places(conf)
    if conf.nodes == nil then
        return {conf}
    end
    local out = {}
    if conf.topology == "cluster" then
        local c = cluster_state(conf)
        for i = 1, #c.masters do
            out[#out + 1] = nodeAt(conf, c, c.masters[i])
        end
    end
    for i = 1, #conf.nodes do
        out[#out + 1] = conf.nodes[i]
    end
    return out
end
--- A connection to the first place that takes one, starting at the one that served last (s.node).
function _M.connect(s)
    local list = places(s.conf)
    local start = 1
    for i = 1, #list do
        if list[i].endpoint == s.node then
            start = i
        end
    end
    local tried = {}
    local err
    for k = 0, #list - 1 do
        local n = list[(start - 1 + k) % #list + 1]
        if tried[n.endpoint] == nil then
            tried[n.endpoint] = true
            local red, cerr = connect_to(apart(n, "wakeups"))
            if red ~= nil then
                s.node = n.endpoint
                return red, nil
            end
            err = cerr
        end
    end
    return nil, err
end
return _M
