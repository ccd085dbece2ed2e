-- Generated from src/resty/dlock/gateway/giveback.ts by TypeScriptToLua: edit that file, not this one.
-- What a request that a guard refuses gives back of what the guards before
-- it took. Guards are called one after another (per client, then per API
-- key), so a rate guard has charged its limit before a later guard refuses;
-- nginx's limit_req charges no limit when a later one refuses, nor does
-- lua-resty-limit-traffic's combine(), and a client refused by its API key's
-- limit must not use up its address' limit with the refusals. The earlier
-- rate guards' charges are given back (one script call each, on the refusing
-- path only), and a throttle passed earlier releases its key
-- (inflight.refused()): the request never ran.
--
-- Only when Redis decided the refusal (or the request was at fault): a
-- refusal because Redis failed gives nothing back, as no request should wait
-- for a Redis that just failed another guard. And only in the pass through
-- the location's rewrite and access phases that took what is given back: a
-- request refused after an internal redirect (error_page, X-Accel-Redirect,
-- ngx.exec) may have run already, and a guard in content_by_lua may follow
-- the application's work. An idempotency claim taken in that pass is not
-- completed by the refusal (its response is no answer of the application's):
-- the claim is dropped, so a retry runs. What cannot be given back stays
-- charged: never more admitted than the limit.
local _M = {}
local core = require("resty.dlock.core.rate")
local inflight = require("resty.dlock.gateway.inflight")
local capture = require("resty.dlock.gateway.idempotency.capture")
local fallback = require("resty.dlock.gateway.rate_local")
local request = require("resty.dlock.core.request")
local decide = core.decide
local request_id = request.id
local request_alive = request.alive
local get_phase = ngx.get_phase
local ngx = ngx
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
    local ctx = ngx.ctx
    for i = 1, #chargers do
        local g = chargers[i]
        local m = g._seen.byId[rid]
        if m ~= nil and m.ctx == ctx and request_alive(m) then
            local rkey = m.charged
            local here = m.chargedHere
            m.charged = nil
            m.chargedHere = nil
            if rkey ~= nil then
                decide(g._conf, rkey, g._limits, "-1", g._cost)
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
