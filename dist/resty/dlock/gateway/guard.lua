--[[ Generated with https://github.com/TypeScriptToLua/TypeScriptToLua ]]
local ____exports = {}
local shared = require("resty.dlock.gateway.common")
local digest = require("resty.dlock.gateway.digest")
local inflight = require("resty.dlock.gateway.inflight")
local lockLocal = require("resty.dlock.gateway.lock_local")
local stats = require("resty.dlock.gateway.stats")
local read_body = ngx.req.read_body
local hashed = digest.key
local incr = stats.incr
local req_get_method = ngx.req.get_method
local function reject(g, status, retryAfterMs)
    return shared.refuse(g.headers, status, retryAfterMs)
end
local function onRedisFailure(g, key)
    if g["local"] ~= nil then
        lockLocal.access(g, g["local"], key, reject)
        return
    end
    if not stats.failedOpen(g) then
        reject(g, g.errorStatus, nil)
    end
end
local guardMethods = {
    access = function(self)
        if not shared.decides(self.name) then
            return
        end
        if inflight.holds(self) then
            return
        end
        if self.readBody then
            read_body()
        end
        local raw = shared.keyOf(self, self)
        if raw == nil then
            return
        end
        local key = hashed("", raw)
        if stats.breakerOpen(self.dict, self.name) or self["local"] ~= nil and not lockLocal.probe(self, self["local"]) then
            incr(self.dict, self.name, "short_circuited")
            onRedisFailure(self, key)
            return
        end
        local reads = self.sharedMethods ~= nil and self.sharedMethods[req_get_method()] ~= nil
        local ____self_1 = self.locks
        local ____self_1_acquire_2 = ____self_1.acquire
        local ____reads_0
        if reads then
            ____reads_0 = self.sharedTry
        else
            ____reads_0 = self.tryOpts
        end
        local l, err, retryAfter = ____self_1_acquire_2(____self_1, key, ____reads_0)
        if l == nil and err == "busy" and self.wait > 0 then
            incr(self.dict, self.name, "waited")
            local ____self_4 = self.locks
            local ____self_4_acquire_5 = ____self_4.acquire
            local ____reads_3
            if reads then
                ____reads_3 = self.sharedWait
            else
                ____reads_3 = self.waitOpts
            end
            l, err, retryAfter = ____self_4_acquire_5(____self_4, key, ____reads_3)
        end
        if l ~= nil then
            stats.success(self.dict, self.name)
            incr(self.dict, self.name, "acquired")
            inflight.track(self, l)
            return
        end
        if err == "busy" or err == "timeout" then
            stats.success(self.dict, self.name)
            incr(self.dict, self.name, err == "busy" and "rejected" or "timed_out")
            reject(self, self.rejectStatus, retryAfter)
            return
        end
        stats.redisFailed(self, err)
        onRedisFailure(self, key)
    end,
    log = function(self)
        inflight.finish(self)
        if self["local"] ~= nil then
            lockLocal.finish(self, self["local"])
        end
    end
}
--- The metatable of every guard of these modes.
____exports.mt = {__index = guardMethods}
return ____exports
