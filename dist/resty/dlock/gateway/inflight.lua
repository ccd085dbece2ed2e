--[[ Generated with https://github.com/TypeScriptToLua/TypeScriptToLua ]]
local ____exports = {}
local hold, releaseList, drain, raised, schedule, failed, queue, head, tail, draining, MAX_DRAINERS, BATCH, DRAIN_ROUNDS, heldOf
local check = require("resty.dlock.core.check")
local batch = require("resty.dlock.core.batch")
local loop = require("resty.dlock.core.loop")
local request = require("resty.dlock.gateway.request")
local stats = require("resty.dlock.gateway.stats")
local watchdog = require("resty.dlock.core.watchdog")
function hold(f)
    local ok, err = f.lease:extend(f.hold)
    if ok == nil and err ~= "not_owner" then
        failed(f.owner, "holding " .. f.lease.key, err)
    end
end
function releaseList(owner, list)
    local n, err = batch.releaseAll(list)
    if n > 0 then
        failed(
            owner,
            ("releasing " .. tostring(n)) .. " lease(s)",
            err
        )
    end
end
function drain(premature)
    for _ = 1, DRAIN_ROUNDS do
        if head > tail then
            break
        end
        local byOwner = {}
        for _ = 1, BATCH do
            if head > tail then
                break
            end
            local f = queue[head]
            queue[head] = nil
            head = head + 1
            if f.hold > 0 then
                local ok, err = pcall(hold, f)
                if not ok then
                    raised(err)
                end
            else
                local list = byOwner[f.owner]
                if list == nil then
                    list = {}
                    byOwner[f.owner] = list
                end
                list[#list + 1] = f.lease
            end
        end
        for owner, list in pairs(byOwner) do
            local ok, err = pcall(releaseList, owner, list)
            if not ok then
                raised(err)
            end
        end
    end
    draining = draining - 1
    schedule()
end
function raised(err)
    ngx.log(
        ngx.ERR,
        "dlock: gateway release queue: ",
        check.text(err)
    )
end
function schedule()
    if head > tail or draining >= MAX_DRAINERS or draining >= tail - head + 1 then
        return
    end
    local ok, err = ngx.timer.at(0, drain)
    if ok then
        draining = draining + 1
    elseif draining == 0 then
        ngx.log(
            ngx.ERR,
            "dlock: gateway: cannot schedule ",
            tail - head + 1,
            " release(s), they expire on their own: ",
            err
        )
    end
end
function failed(owner, what, err)
    stats.incr(owner.dict, owner.name, "redis_errors")
    ngx.log(
        ngx.WARN,
        "dlock: guard ",
        owner.name,
        ": ",
        what,
        " failed (retried until Redis answers or the lease expires): ",
        check.reason(err)
    )
end
--- In-flight requests of this worker that hold a guard's lease, by request id.
local requests = {}
local count = 0
queue = {}
head = 1
tail = 0
draining = 0
MAX_DRAINERS = 8
BATCH = 64
DRAIN_ROUNDS = 32
--- Queue the end of a lease for a timer: release it, or keep it `hold` more ms.
function ____exports.enqueue(owner, l, hold)
    tail = tail + 1
    queue[tail] = {owner = owner, lease = l, hold = hold}
    schedule()
end
local warnedUnlogged = {}
local function endHeld(h, how, status)
    if h.done then
        return
    end
    h.done = true
    watchdog.unwatch(h.lease)
    heldOf[h.lease] = nil
    local o = h.owner
    stats.adjust(o.dict, o.name, "in_flight", -1)
    if not o.release then
        return
    end
    if how == "aborted" then
        stats.incr(o.dict, o.name, "aborted")
        return
    end
    if how == "unlogged" then
        stats.incr(o.dict, o.name, "unlogged")
        if not (warnedUnlogged[o.name] ~= nil) then
            warnedUnlogged[o.name] = true
            ngx.log(
                ngx.WARN,
                "dlock: guard ",
                o.name,
                ": a request ended without log() (its final location runs none, ",
                "e.g. after error_page, try_files or X-Accel-Redirect); its lease was released late and a client abort ",
                "could not be seen: add log_by_lua_block { require(\"resty.dlock.gateway\").log() } at http level"
            )
        end
    end
    ____exports.enqueue(o, h.lease, how == "logged" and o.hold > 0 and status >= 200 and status < 300 and o.hold or 0)
end
local function endReq(rid, req, how, status)
    requests[rid] = nil
    count = count - 1
    for ____, h in ipairs(req.held) do
        endHeld(h, how, status)
        if how == "unlogged" and h.owner.unlogged ~= nil then
            h.owner.unlogged(rid)
        end
    end
end
--- How the current request (in its log phase) ended: aborted by the client while an upstream worked, or logged.
local function outcome()
    if ngx.var.request_completion ~= "OK" then
        local upstream = ngx.var.upstream_addr
        if upstream ~= nil and upstream ~= "" then
            return "aborted"
        end
    end
    return "logged"
end
--- The current request (log phase) is over: end the leases it holds of `owner`,
-- or of every guard when owner is nil.
function ____exports.finish(owner)
    local rid = request.id()
    if rid == nil then
        return
    end
    local req = requests[rid]
    if req == nil then
        return
    end
    if not request.alive(req.anchor) then
        endReq(rid, req, "unlogged", 0)
        return
    end
    local how = outcome()
    local status = ngx.status
    if owner == nil then
        endReq(rid, req, how, status)
        return
    end
    local open = 0
    for ____, h in ipairs(req.held) do
        if h.owner == owner then
            endHeld(h, how, status)
        elseif not h.done then
            open = open + 1
        end
    end
    if open == 0 then
        requests[rid] = nil
        count = count - 1
    end
end
--- In access: does the current request hold a lease of `owner` already? True
-- when it passes the guard again after an internal redirect (try_files to a
-- named location with the same guard, error_page...): it must not queue
-- behind itself. A request that is gone and had the same address is ended here.
function ____exports.holds(owner)
    local rid = request.id()
    if rid == nil then
        return false
    end
    local req = requests[rid]
    if req == nil then
        return false
    end
    if not request.alive(req.anchor) then
        endReq(rid, req, "unlogged", 0)
        return false
    end
    for ____, h in ipairs(req.held) do
        if h.owner == owner and not h.done then
            return true
        end
    end
    return false
end
--- Seconds between keeper rounds: a sixth of the shortest ttl, within these bounds.
local MIN_TICK = 0.05
local MAX_TICK = 0.5
local tick = MAX_TICK
--- Leases the watchdog renews for in-flight requests, and whose they are.
heldOf = {}
--- Per guard, what the watchdog tells about its renewals.
local hooksOf = {}
local function hooks(owner)
    local hk = hooksOf[owner]
    if hk == nil then
        hk = {
            renewed = function()
                stats.incr(owner.dict, owner.name, "renewed")
            end,
            lost = function(l)
                local h = heldOf[l]
                heldOf[l] = nil
                if h == nil or h.done then
                    return
                end
                h.done = true
                stats.adjust(owner.dict, owner.name, "in_flight", -1)
                stats.incr(owner.dict, owner.name, "lost")
                ngx.log(
                    ngx.ERR,
                    "dlock: guard ",
                    owner.name,
                    ": lease on ",
                    l.key,
                    " lost while its request is in flight"
                )
            end,
            failed = function(l, err)
                stats.incr(owner.dict, owner.name, "redis_errors")
                ngx.log(
                    ngx.WARN,
                    "dlock: guard ",
                    owner.name,
                    ": renewing ",
                    l.key,
                    ": ",
                    check.reason(err)
                )
            end
        }
        hooksOf[owner] = hk
    end
    return hk
end
--- One round: end the requests that are gone (the watchdog renews the leases of the others).
local function round()
    local gone = {}
    for rid, req in pairs(requests) do
        if not request.alive(req.anchor) then
            gone[#gone + 1] = rid
        end
    end
    for ____, rid in ipairs(gone) do
        local req = requests[rid]
        if req ~= nil and not request.alive(req.anchor) then
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
    tick = math.min(
        tick,
        math.max(MIN_TICK, owner.ttl / 6000)
    )
    local err = loop.start(keeper)
    if err ~= nil then
        ngx.log(
            ngx.ERR,
            "dlock: guard ",
            owner.name,
            ": ",
            check.reason(err)
        )
    end
end
local warnedBlind = false
--- In access: the current request now holds `l` for `owner`.
function ____exports.track(owner, l, anchor)
    if anchor.ref < 0 and not warnedBlind then
        warnedBlind = true
        ngx.log(ngx.WARN, "dlock: gateway: this ngx_lua does not let us see when a request is over: only log() ", "ends a lease, so put log_by_lua_block { require(\"resty.dlock.gateway\").log() } at http level")
    end
    local req = requests[anchor.id]
    if req == nil or req.anchor.ctx ~= anchor.ctx then
        if req ~= nil then
            endReq(anchor.id, req, "unlogged", 0)
        end
        req = {anchor = anchor, held = {}}
        requests[anchor.id] = req
        count = count + 1
    end
    local h = {owner = owner, lease = l, done = false}
    local ____req_held_0 = req.held
    ____req_held_0[#____req_held_0 + 1] = h
    stats.adjust(owner.dict, owner.name, "in_flight", 1)
    if owner.renew then
        heldOf[l] = h
        local werr = watchdog.watch(
            l,
            hooks(owner)
        )
        if werr ~= nil then
            ngx.log(
                ngx.ERR,
                "dlock: guard ",
                owner.name,
                ": ",
                check.reason(werr)
            )
        end
    end
    keep(owner)
end
return ____exports
