-- Generated from src/resty/dlock/redis/fanout.ts by TypeScriptToLua: edit that file, not this one.
-- A call on several servers at once (a Redlock quorum): each as
-- pipeline.call would send it, at once on a connection of its own or in the
-- server's next batch, every one on its way before any reply is awaited, with
-- no light thread.
local _M = {}
local command = require("resty.dlock.redis.command")
local lanes = require("resty.dlock.redis.lanes")
local pipeline = require("resty.dlock.redis.pipeline")
local roundtrip = require("resty.dlock.redis.roundtrip")
local encoded = command.encoded
local addEncoded = command.addEncoded
local batchOf = command.batchOf
local send = roundtrip.send
local finish = roundtrip.finish
local laneOf = lanes.laneOf
local claim = lanes.claim
local unclaim = lanes.unclaim
local idle = lanes.idle
local laneFor = pipeline.laneFor
local joinable = pipeline.joinable
local awaited = pipeline.awaited
--- Run s for rkey on every server of `confs` at once: the calls, aligned with confs.
function _M.fanout(confs, s, rkey, ...)
    local n = #confs
    -- Encoded once for every server; and no vararg inside the loop, where a
    -- trace starting at the loop cannot read them (NYI: bytecode 71, VARG).
    local rest, words = encoded(...)
    local jobs = {}
    local own = {}
    local reds = {}
    local slots = {}
    local joined = {}
    for i = 1, n do
        local conf = confs[i]
        local lane = laneFor(conf)
        local b
        if lane ~= nil and not idle(lane) then
            b = joinable(lane)
            if b ~= nil then
                joined[i] = b
            end
        end
        if b == nil then
            b = batchOf(nil, false)
            own[i] = b
        end
        local job = addEncoded(b, s, rkey, rest, words)
        jobs[#jobs + 1] = job
        if joined[i] ~= nil then
            -- Its caller comes back for it after the replies of the others, maybe
            -- after this batch's callers were woken: not one to take back (settle).
            -- (Nor is one of a caller killed meanwhile: it is left to its ttl.)
            job.back = true
            if s.undo ~= nil then
                b.undos = b.undos - 1
            end
        else
            if lane ~= nil then
                slots[i] = claim(lane, b)
            end
            local red = send(conf, b)
            if red ~= nil then
                reds[i] = red
            end
        end
    end
    for i = 1, n do
        local b = own[i]
        if b ~= nil then
            local red = reds[i]
            if red ~= nil then
                finish(confs[i], b, red)
            end
            local slot = slots[i]
            if slot ~= nil then
                unclaim(laneOf(confs[i]), slot)
            end
        end
    end
    for i = 1, n do
        local b = joined[i]
        if b ~= nil then
            awaited(confs[i], b, jobs[i])
        end
    end
    return jobs
end
return _M
