--[[ Generated with https://github.com/TypeScriptToLua/TypeScriptToLua ]]
local ____exports = {}
local takeback = require("resty.dlock.redis.takeback")
local semaphore = require("ngx.semaphore")
local sem_new = semaphore.new
local ngx_now = ngx.now
local timer_at = ngx.timer.at
local lua_pairs = pairs
local watcher = takeback.watcher
--- Calls of a worker that go out on connections of their own before the next
-- ones join a batch: at low load every call goes at once, as without
-- auto-pipelining; past it, a batch costs one round trip for all its calls.
____exports.DIRECT = 4
--- Seconds after a batch of several calls during which calls join batches even
-- with fewer than DIRECT on their way (as they do while a batch is open or on
-- its way): the callers a batch wakes all call again at once, and a
-- connection of its own for each of the first DIRECT costs more than their
-- place in the next batch.
____exports.LOADED = 0.002
local lanes = setmetatable({}, {__mode = "k"})
--- Per configuration of a factory (a server's, or the Cluster's or Redlock's its servers come from).
local groups = setmetatable({}, {__mode = "k"})
local function groupOf(conf)
    local owner = conf.parent or conf
    local g = groups[owner]
    if g == nil then
        g = {direct = {}, slots = 0, batching = 0, loaded = 0}
        groups[owner] = g
    end
    return g
end
function ____exports.laneOf(conf)
    local l = lanes[conf]
    if l == nil then
        local work = sem_new(0)
        if work == nil then
            return nil
        end
        l = {
            conf = conf,
            group = groupOf(conf),
            acquires = {},
            watching = false,
            batching = 0,
            open = nil,
            senders = 0,
            idle = 0,
            work = work,
            batched = 0,
            batches = 0
        }
        lanes[conf] = l
    end
    return l
end
--- Seconds a call may take: connect, two round trips (NOSCRIPT), a WAIT, and some.
function ____exports.patience(conf)
    return (conf.connect_timeout + 2 * conf.read_timeout + conf.replicas_timeout) / 1000 + 1
end
--- Calls of this worker on their way to the group's servers now (forgetting those whose time is up).
local function inFlight(g)
    local now = ngx_now()
    local n = g.batching
    for slot, ____until in lua_pairs(g.direct) do
        if ____until < now then
            g.direct[slot] = nil
        else
            n = n + 1
        end
    end
    return n
end
--- Count b, a batch of one about to go at once on a connection of its own, in lane.direct while on its way.
function ____exports.claim(lane, b)
    local g = lane.group
    g.slots = g.slots + 1
    local slot = g.slots
    g.direct[slot] = ngx_now() + ____exports.patience(lane.conf)
    if b.undos > 0 then
        lane.acquires[slot] = b
        if not lane.watching then
            lane.watching = (timer_at(takeback.WATCH, watcher, lane)) ~= nil
        end
    end
    return slot
end
function ____exports.unclaim(lane, slot)
    lane.group.direct[slot] = nil
    lane.acquires[slot] = nil
end
--- Would a call go out at once (few of this worker's calls on their way, none riding a batch)?
function ____exports.idle(lane)
    local g = lane.group
    return g.batching == 0 and lane.open == nil and ngx_now() >= g.loaded and inFlight(g) < ____exports.DIRECT
end
--- Calls sent in batches, batches, and batches on their way now, by this worker to conf's Redis.
function ____exports.stats(conf)
    local l = lanes[conf]
    if l == nil then
        return 0, 0, 0
    end
    return l.batched, l.batches, l.batching
end
return ____exports
