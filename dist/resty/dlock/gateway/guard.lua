-- Generated from src/resty/dlock/gateway/guard.ts by TypeScriptToLua: edit that file, not this one.
-- A guard of mode dedup, concurrency, throttle or mutex at work: access()
-- decides for a request, log() ends what it took. Made by gateway.new
-- (gateway.lua), which checks the options and builds the lock underneath.
local _M = {}
local meter = require("resty.dlock.core.meter")
local shared = require("resty.dlock.gateway.common")
local digest = require("resty.dlock.gateway.digest")
local inflight = require("resty.dlock.gateway.inflight")
local lockLocal = require("resty.dlock.gateway.lock_local")
local onway = require("resty.dlock.gateway.onway")
local stats = require("resty.dlock.gateway.stats")
local breaker = require("resty.dlock.gateway.breaker")
local request = require("resty.dlock.core.request")
local seen = require("resty.dlock.gateway.seen")
local read_body = ngx.req.read_body
local hashed = digest.key
local incr = stats.incr
local meter_refused = meter.refused
-- Read per request by mutex guards with shared methods (readers).
local req_get_method = ngx.req.get_method
local request_id = request.id
local request_anchor = request.anchor
local seen_find = seen.find
local seen_put = seen.put
--- Keep the request g refuses, for refusedHere() should an error_page bring it back.
local function remember(g)
    local an = request_anchor()
    if an ~= nil then
        seen_put(g._refused, an)
    end
end
--- Refuse a request Redis decided against: the guards it passed before give back what they took.
local function reject(g, status, retryAfterMs)
    remember(g)
    return shared.refuse(g._headers, status, retryAfterMs)
end
--- Refuse a request because Redis failed (or the breaker is open).
local function rejectDown(g, status, retryAfterMs)
    remember(g)
    return shared.refuseDown(g._headers, status, retryAfterMs)
end
local function onRedisFailure(g, key)
    if g._fallback ~= nil then
        lockLocal.access(g, g._fallback, key, rejectDown)
        return
    end
    if not breaker.failedOpen(g) then
        rejectDown(g, g._errorStatus, nil)
    end
end
--- Must this request do without Redis? The breaker open; or half open and this
-- is not the request that asks Redis whether it is back (with a local
-- fallback, a timer of this nginx asks it, and no request).
local function skipsRedis(g, fallback)
    if fallback ~= nil then
        return breaker.breakerOpen(g._dict, g.name) or not lockLocal.probe(g, fallback)
    end
    return breaker.skips(g._dict, g.name, g._probeFor)
end
--- Did this guard refuse this request already? An error_page for its status
-- brings it back (a busy page under the guarded location): it passes to
-- that page, as nginx's limit_req and limit_conn decide once per request,
-- instead of waiting a second time and answering with nginx's own page.
local function refusedHere(g)
    if g._refused.count == 0 then
        return false
    end
    local rid = request_id()
    return rid ~= nil and seen_find(g._refused, rid) ~= nil
end
--- The metatable of every guard of these modes (its __index, the methods, is set once they are).
local mt = {}
local guardMethods = {
    access = function(self)
        if shared.misused(self, mt, "access") then
            return
        end
        if not shared.decides(self.name) then
            return
        end
        if refusedHere(self) then
            return
        end
        if self._readBody then
            -- A permit held while a slow client trickles its body in would starve the key.
            read_body()
        end
        local raw = shared.keyOf(self, self._key)
        if raw == nil then
            return
        end
        -- Client-controlled: hash it, so any size and any bytes map to a bounded key.
        local key = hashed("", raw)
        if inflight.holds(self, key) then
            -- The same request again, after an internal redirect: it holds the key already.
            return
        end
        local fallback = self._fallback
        if skipsRedis(self, fallback) then
            incr(self._dict, self.name, "short_circuited")
            onRedisFailure(self, key)
            return
        end
        -- Readers share the key (gateway option shared).
        local reads = self._sharedMethods ~= nil and self._sharedMethods[req_get_method()] ~= nil
        local locks = self._locks
        -- A try first, without joining a line: the wait (and its turn in this worker) only when the key is held.
        -- Its busy answer is not metered: what follows it is the request's outcome.
        local tryOpts = reads and self._sharedTry or self._tryOpts
        local l, err, retryAfter = locks:_try(key, tryOpts)
        if l == nil and err == "busy" then
            if self._wait > 0 then
                incr(self._dict, self.name, "waited")
                l, err, retryAfter = locks:acquire(key, reads and self._sharedWait or self._waitOpts)
            elseif onway.awaited(self._dict, locks._store.prefix .. key) then
                -- Held by a request of this nginx that has ended, its release on its way (onway.lua): once more.
                l, err, retryAfter = locks:acquire(key, tryOpts)
            else
                meter_refused(locks._store.meter, "busy")
            end
        end
        if l ~= nil then
            breaker.success(self._dict, self.name)
            incr(self._dict, self.name, "acquired")
            if inflight.track(self, l) ~= false then
                return
            end
            -- No watchdog (no timer to be had): the lease was let go, and on_error decides, as without Redis.
            onRedisFailure(self, key)
            return
        end
        if err == "busy" or err == "timeout" then
            breaker.success(self._dict, self.name)
            incr(self._dict, self.name, err == "busy" and "rejected" or "timed_out")
            reject(self, self._rejectStatus, retryAfter)
            return
        end
        breaker.redisFailed(self, err)
        onRedisFailure(self, key)
    end,
    log = function(self)
        if shared.misused(self, mt, "log") then
            return
        end
        inflight.finish(self)
        if self._fallback ~= nil then
            lockLocal.finish(self, self._fallback)
        end
    end
}
mt.__index = guardMethods
-- Exported by name: the methods read it as a local on every request, not through the exports table.
_M.mt = mt
return _M
