-- Generated from src/resty/dlock/gateway/inflight.ts by TypeScriptToLua: edit that file, not this one.
-- The leases of in-flight gateway requests, per worker: found again by request (not by ngx.ctx,
-- which an internal redirect replaces), renewed while the request runs, and ended when the
-- request ends, however it ends:
-- - log() of any guard, or the module-level gateway.log(), in whatever location the request
--   finishes: release (or, dedup after a 2xx, hold the key);
-- - a client that went away while an upstream was working, or an upstream that timed out: the
--   backend may still be running, so the key is kept until its lease runs out, unrenewed;
-- - a request that ended without any log() (its final location has none): the keeper notices
--   it is gone and releases.
--
-- One keeper loop per worker watches every in-flight request, in rounds (the watchdog, one sweep
-- per worker too, renews their leases): a timer per request or per guard would exhaust
-- lua_max_pending_timers on a busy gateway, ngx.timer.every lets rounds overlap when Redis is slow,
-- and it stops when the worker starts exiting (nginx -s reload / quit) while that worker still
-- has requests running. The loop runs while there is anything to watch, also in an exiting
-- worker, and hands over to a fresh timer now and then. The log phase has no cosockets:
-- releases.lua puts a release into the worker's next pipeline (or queues it, and a hold, for a
-- timer); renewals.lua has the watchdog renew the leases meanwhile.
local _M = {}
local advice = require("resty.dlock.gateway.advice")
local loop = require("resty.dlock.core.loop")
local releases = require("resty.dlock.gateway.releases")
local renewals = require("resty.dlock.gateway.renewals")
local request = require("resty.dlock.core.request")
local upstream = require("resty.dlock.gateway.upstream")
local stats = require("resty.dlock.gateway.stats")
local subrequests = require("resty.dlock.gateway.subrequests")
local ngx = ngx
local math_min = math.min
local math_max = math.max
local request_id = request.id
local request_alive = request.alive
local request_here = request.here
local request_main = request.mainOf
local request_connection = request.connection
local answered = releases.answered
local advice_unlogged = advice.unlogged
local lua_pairs = pairs
--- In-flight requests of this worker that hold a guard's lease, by request id.
local requests = {}
local count = 0
local function endHeld(h, how, status)
    if h.done then
        return
    end
    h.done = true
    -- No more renewals: released or held below, or (aborted) kept until it runs out.
    local o = h.owner
    if o._renew then
        renewals.unwatch(h)
    end
    stats.adjust(o._dict, o.name, "in_flight", -1)
    if not o._release and not (how == "refused" and o._givesBack == true) then
        return
    end
    if how == "aborted" then
        -- The client went away while an upstream worked on the request; nginx cut
        -- that connection but the backend may still be running. Keep the key until
        -- its lease runs out (no more renewals) rather than let a retry in beside it.
        stats.incr(o._dict, o.name, "aborted")
        return
    end
    if how == "unlogged" then
        stats.incr(o._dict, o.name, "unlogged")
        advice_unlogged(o.name)
    end
    releases.done(h, how == "logged" and o._hold > 0 and status >= 200 and status < 300 and o._hold or 0)
end
local function endOne(rid, h, how, status)
    endHeld(h, how, status)
    local unlogged = h.owner._unlogged
    if how == "unlogged" and unlogged ~= nil then
        unlogged(rid)
    end
end
local function endReq(rid, req, how, status)
    requests[rid] = nil
    count = count - 1
    if req.conn ~= nil then
        subrequests.unlink(req.conn, rid)
    end
    endOne(rid, req, how, status)
    local more = req.more
    if more ~= nil then
        for i = 1, #more do
            endOne(rid, more[i], how, status)
        end
    end
end
--- The current request's record, after ending the one of a request that is gone and had its address; and its id.
local function current()
    local rid = request_id()
    if rid == nil then
        return nil, 0
    end
    local req = requests[rid]
    if req == nil then
        return nil, rid
    end
    if not request_alive(req) then
        -- A request that is gone had this address before us and ended unseen.
        endReq(rid, req, "unlogged", 0)
        return nil, rid
    end
    return req, rid
end
--- End the leases req (request rid) holds of `owner`, or of every guard when owner is nil.
local function endOwned(rid, req, owner, how, status)
    if owner == nil then
        endReq(rid, req, how, status)
        return
    end
    local open = 0
    if req.owner == owner then
        endHeld(req, how, status)
    elseif not req.done then
        open = open + 1
    end
    local more = req.more
    if more ~= nil then
        for i = 1, #more do
            local h = more[i]
            if h.owner == owner then
                endHeld(h, how, status)
            elseif not h.done then
                open = open + 1
            end
        end
    end
    if open == 0 then
        endReq(rid, req, how, status)
    end
end
--- The current request (log phase) is over: end the leases it holds of
-- `owner`, or of every guard when owner is nil; and those its subrequests
-- took (they have no log phase of their own).
function _M.finish(owner)
    local req, rid = current()
    local subs
    if subrequests.any() then
        subs = subrequests.of(request_connection())
    end
    if req == nil and subs == nil then
        return
    end
    local how = upstream.aborted() and "aborted" or "logged"
    local status = ngx.status
    if req ~= nil then
        endOwned(rid, req, owner, how, status)
    end
    if subs == nil then
        return
    end
    local i = #subs
    while i >= 1 do
        local sid = subs[i]
        local sub = requests[sid]
        if sub ~= nil then
            endOwned(sid, sub, owner, how, status)
        end
        i = i - 1
    end
end
--- In access: does the current request hold `owner`'s lease on key already?
-- True when it passes the guard again after an internal redirect (try_files
-- to a named location with the same guard, error_page...) on the same key: it
-- must not queue behind itself. A redirect that changed its key ($uri, the
-- arguments) finds false: the key it is now under is taken like any other.
-- key nil: any key of owner's (an idempotency claim is the request's, whatever its location).
-- A request that is gone and had the same address is ended here.
function _M.holds(owner, key)
    local req = current()
    if req == nil then
        return false
    end
    if req.owner == owner and not req.done and (key == nil or req.lease.key == key) then
        return true
    end
    local more = req.more
    if more ~= nil then
        for i = 1, #more do
            local h = more[i]
            if h.owner == owner and not h.done and (key == nil or h.lease.key == key) then
                return true
            end
        end
    end
    return false
end
--- A later guard refused request rid in the pass that took its leases (giveback.lua): a throttle gives its key back.
function _M.refused(rid, ctx)
    local req = requests[rid]
    -- Taken in an earlier pass (before an internal redirect): the request may have run.
    if req == nil or req.ctx ~= ctx or not request_alive(req) then
        return
    end
    if req.owner._givesBack == true then
        endHeld(req, "refused", 0)
    end
    local more = req.more
    if more == nil then
        return
    end
    for i = 1, #more do
        if more[i].owner._givesBack == true then
            endHeld(more[i], "refused", 0)
        end
    end
end
-- ------------------------------------------------------------ the keeper
--- Seconds between keeper rounds: a sixth of the shortest ttl, within these bounds.
local MIN_TICK = 0.05
local MAX_TICK = 0.5
local tick = MAX_TICK
--- One round: end the requests that are gone (the watchdog renews the leases of the others).
local function round()
    local gone = {}
    for rid, req in lua_pairs(requests) do
        if not request_alive(req) then
            gone[#gone + 1] = rid
        end
    end
    for i = 1, #gone do
        local rid = gone[i]
        local req = requests[rid]
        if req ~= nil and not request_alive(req) then
            endReq(rid, req, "unlogged", 0)
        end
    end
end
local keeper = {
    name = "gateway keeper",
    busy = function() return count > 0 end,
    tick = function() return tick end,
    round = round,
    running = false
}
local function keep(owner)
    tick = math_min(tick, math_max(MIN_TICK, owner._ttl / 6000))
    if keeper.running then
        return
    end
    local err = loop.start(keeper)
    if err ~= nil then
        advice.noKeeper(owner.name, err)
    end
end
--- Is req, at the current request's address, gone and ended unseen? Not this
-- one after a redirect to another guard (a new ngx.ctx, the same live request),
-- unless nginx hides whether a request lives.
local function ended(req, ctx)
    return req.ref < 0 and req.ctx ~= ctx or req.ref >= 0 and not request_alive(req)
end
--- In access: the current request now holds `l` for `owner`. Returns the
-- request's anchor; nil outside a request (then nothing is tracked); false
-- when the lease cannot be renewed (it is let go: the guard's on_error decides).
function _M.track(owner, l)
    local rid, ctx, ref = request_here()
    if rid == nil then
        return nil
    end
    if ref < 0 then
        advice.blind()
    end
    local req = requests[rid]
    if req ~= nil and ended(req, ctx) then
        endReq(rid, req, "unlogged", 0)
        req = nil
    end
    local h
    if req == nil then
        local conn = request_main()
        req = {
            id = rid,
            ctx = ctx,
            ref = ref,
            owner = owner,
            lease = l,
            done = false,
            answered = answered,
            more = nil,
            conn = conn
        }
        requests[rid] = req
        count = count + 1
        if conn ~= nil then
            subrequests.link(conn, rid)
        end
        h = req
    else
        h = {owner = owner, lease = l, done = false, answered = answered}
        if req.more == nil then
            req.more = {}
        end
        req.more[#req.more + 1] = h
    end
    stats.adjust(owner._dict, owner.name, "in_flight", 1)
    keep(owner)
    -- Unrenewed, it would run out under the running request and let a second one in.
    if owner._renew and not renewals.watch(h) then
        endHeld(h, "logged", 0)
        return false
    end
    return req
end
return _M
