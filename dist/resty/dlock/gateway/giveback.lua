-- Generated from src/resty/dlock/gateway/giveback.ts by TypeScriptToLua: edit that file, not this one.
local _M = {}
local core = require("resty.dlock.core.rate")
local inflight = require("resty.dlock.gateway.inflight")
local capture = require("resty.dlock.gateway.idempotency.capture")
local fallback = require("resty.dlock.gateway.rate_local")
local request = require("resty.dlock.gateway.request")
local decide = core.decide
local request_id = request.id
local request_alive = request.alive
local get_phase = ngx.get_phase
local ngx_ = ngx
local give_back_here = fallback.giveBack
--- Rate guards (made before the workers fork).
local chargers = {}
--- Watch a rate guard's charges.
function _M.register(g)
    chargers[#chargers + 1] = g
end
--- A guard refuses the current request: earlier guards of it give back what they took. Never raises.
function _M.refused()
    local phase = get_phase()
    if phase ~= "access" and phase ~= "rewrite" then
        return
    end
    local rid = request_id()
    if rid == nil then
        return
    end
    local ctx = ngx_.ctx
    for i = 1, #chargers do
        local g = chargers[i]
        local m = g._seen[rid]
        if m ~= nil and m.ctx == ctx and request_alive(m) then
            local rkey = m.charged
            local here = m.chargedHere
            m.charged = nil
            m.chargedHere = nil
            if rkey ~= nil then
                decide(
                    g._conf,
                    rkey,
                    g._limits,
                    "-1",
                    g._cost
                )
            end
            if here ~= nil then
                give_back_here(g._dict, here, g._shares, g._cost)
            end
        end
    end
    inflight.refused(rid, ctx)
    capture.refused(rid, ctx)
end
return _M
