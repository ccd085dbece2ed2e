-- Generated from src/resty/dlock/redis/lanes.ts by TypeScriptToLua: edit that file, not this one.
-- The lanes of auto-pipelining (pipeline.lua): per server configuration and
-- worker, what is on its way there now (calls on connections of their own,
-- batches), so that a call knows whether to go at once or join a batch.
local _M = {}
local takeback = require("resty.dlock.redis.takeback")
local clock = require("resty.dlock.core.clock")
local late = require("resty.dlock.core.late")
local semaphore = require("ngx.semaphore")
local sem_new = semaphore.new
local clock_now = clock.now
local on_its_way = late.onItsWay
local timer_at = ngx.timer.at
local lua_pairs = pairs
local watcher = takeback.watcher
local NONE = -math.huge
--- Calls of a worker that go out on connections of their own before the next
-- ones join a batch: at low load every call goes at once, as without
-- auto-pipelining; past it, a batch costs one round trip for all its calls.
local DIRECT = 4
--- Seconds after a batch of several calls during which calls join batches even
-- with fewer than DIRECT on their way (as they do while a batch is open or on
-- its way): the callers a batch wakes all call again at once, and a
-- connection of its own for each of the first DIRECT costs more than their
-- place in the next batch.
_M.LOADED = 0.002
-- Per configuration (a factory's), not per pool: two factories on one pool may
-- differ in timeouts or replicas, and a batch runs with its callers' settings.
-- Weak keys: a factory dropped takes its lane along.
local lanes = setmetatable({}, {__mode = "k"})
function _M.laneOf(conf)
    local l = lanes[conf]
    if l == nil then
        local work = sem_new(0)
        if work == nil then
            return nil
        end
        l = {
            conf = conf,
            direct = {},
            acquires = {},
            watching = NONE,
            slots = 0,
            batching = 0,
            open = nil,
            senders = 0,
            summoned = NONE,
            idle = 0,
            work = work,
            spare = {},
            spares = 0,
            loaded = 0,
            batched = 0,
            batches = 0
        }
        lanes[conf] = l
    end
    return l
end
--- Semaphores a lane keeps for its next batches.
local SPARE = 4
--- A semaphore for the lane's next batch: one a batch before it was done with,
-- else a new one; nil when none can be made. A semaphore per batch cost the
-- collector a finalizer each, and a finalizer aborts whatever trace LuaJIT is
-- recording at that moment.
function _M.semaphoreOf(lane)
    local sem
    if lane.spares > 0 then
        sem = lane.spare[lane.spares]
        lane.spare[lane.spares] = nil
        lane.spares = lane.spares - 1
    end
    -- One with a resource left over would wake a caller before its answer.
    if sem == nil or sem:count() ~= 0 then
        sem = sem_new(0)
    end
    return sem
end
--- Keep the semaphore of a batch whose callers were all woken (count() 0 after
-- the post: each waits in its queue with a resource of its own). The next
-- batch's callers queue behind them, first in, first woken, and find none left.
function _M.recycle(lane, sem)
    if lane.spares < SPARE then
        lane.spares = lane.spares + 1
        lane.spare[lane.spares] = sem
    end
end
--- Seconds a call may take: connect, two round trips (NOSCRIPT), a WAIT, and some.
local function patience(conf)
    return (conf.connect_timeout + 2 * conf.read_timeout + conf.replicas_timeout) / 1000 + 1
end
--- Calls of this worker on their way to this Redis now (forgetting those whose time is up).
local function inFlight(lane)
    local now = clock_now()
    local n = lane.batching
    for slot, due in lua_pairs(lane.direct) do
        if due < now then
            lane.direct[slot] = nil
        else
            n = n + 1
        end
    end
    return n
end
--- Count b, a batch of one about to go at once on a connection of its own, in lane.direct while on its way.
function _M.claim(lane, b)
    lane.slots = lane.slots + 1
    local slot = lane.slots
    local now = clock_now()
    lane.direct[slot] = now + patience(lane.conf)
    if b.undos > 0 then
        lane.acquires[slot] = b
        -- None on its way (or running), or one nginx dropped: start one.
        if not on_its_way(lane.watching, now, takeback.WATCH) and (timer_at(takeback.WATCH, watcher, lane, now)) ~= nil then
            lane.watching = now
        end
    end
    return slot
end
function _M.unclaim(lane, slot)
    lane.direct[slot] = nil
    lane.acquires[slot] = nil
end
--- Would a call go out at once (few of this worker's calls on their way, none riding a batch)?
function _M.idle(lane)
    return lane.batching == 0 and lane.open == nil and clock_now() >= lane.loaded and inFlight(lane) < DIRECT
end
--- Calls sent in batches, batches, and batches on their way now, by this worker to conf's Redis.
function _M.stats(conf)
    local l = lanes[conf]
    if l == nil then
        return 0, 0, 0
    end
    return l.batched, l.batches, l.batching
end
-- Exported by name: this module's own uses of them are locals, not lookups in its exports table.
_M.DIRECT = DIRECT
_M.patience = patience
_M.inFlight = inFlight
return _M
