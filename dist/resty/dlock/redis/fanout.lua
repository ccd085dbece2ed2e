-- Generated from src/resty/dlock/redis/fanout.ts by TypeScriptToLua: edit that file, not this one.
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
        local job = addEncoded(
            b,
            s,
            rkey,
            rest,
            words
        )
        jobs[#jobs + 1] = job
        if joined[i] ~= nil then
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
                unclaim(
                    laneOf(confs[i]),
                    slot
                )
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
