--[[ Generated with https://github.com/TypeScriptToLua/TypeScriptToLua ]]
local ____exports = {}
local check = require("resty.dlock.core.check")
local token = require("resty.dlock.core.token")
local shared = require("resty.dlock.gateway.common")
local inflight = require("resty.dlock.gateway.inflight")
local keys = require("resty.dlock.gateway.key")
local stats = require("resty.dlock.gateway.stats")
local ngx_header = ngx.header
local ngx_exit = ngx.exit
local ngx_log = ngx.log
local ERR = ngx.ERR
local read_body = ngx.req.read_body
local sha1_bin = ngx.sha1_bin
local math_max = math.max
local math_ceil = math.ceil
local hex = token.hex
local incr = stats.incr
local lua_pairs = pairs
local function reject(g, status, retryAfterMs)
    if retryAfterMs ~= nil then
        ngx_header["Retry-After"] = math_max(
            1,
            math_ceil(retryAfterMs / 1000)
        )
    end
    if g.headers ~= nil then
        for k, v in lua_pairs(g.headers) do
            ngx_header[k] = v
        end
    end
    return ngx_exit(status)
end
local function onRedisFailure(g)
    if g.onError == "allow" then
        incr(g.dict, g.name, "failed_open")
        return
    end
    incr(g.dict, g.name, "failed_closed")
    reject(g, g.errorStatus, nil)
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
        local raw, kerr = keys.value(self)
        if raw == nil then
            if kerr ~= nil then
                incr(self.dict, self.name, "key_errors")
                keys.failed(self.name, kerr, self.errorWhat)
                if self.onError == "deny" then
                    reject(self, self.errorStatus, nil)
                end
                return
            end
            incr(self.dict, self.name, "missing_key")
            keys.note(self.name, self, false, self.missingWhat)
            if self.onMissing == "reject" then
                reject(self, self.missingStatus, nil)
            end
            return
        end
        keys.note(self.name, self, true, self.missingWhat)
        if stats.breakerOpen(self.dict, self.name) then
            incr(self.dict, self.name, "short_circuited")
            onRedisFailure(self)
            return
        end
        local key = hex(sha1_bin(raw))
        local l, err, retryAfter = self.locks:acquire(key, self.tryOpts)
        if l == nil and err == "busy" and self.wait > 0 then
            incr(self.dict, self.name, "waited")
            l, err, retryAfter = self.locks:acquire(key, self.waitOpts)
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
        incr(self.dict, self.name, "redis_errors")
        stats.failure(self.dict, self.name, self.breakerFailures, self.breakerCooldown)
        ngx_log(
            ERR,
            "dlock: guard ",
            self.name,
            ": ",
            check.reason(err)
        )
        onRedisFailure(self)
    end,
    log = function(self)
        inflight.finish(self)
    end
}
--- The metatable of every guard of these modes.
____exports.mt = {__index = guardMethods}
return ____exports
