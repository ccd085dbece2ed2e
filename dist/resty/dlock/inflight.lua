--[[ Generated with https://github.com/TypeScriptToLua/TypeScriptToLua ]]
local ____exports = {}
local renewed, failed
local lease = require("resty.dlock.lease")
local stats = require("resty.dlock.stats")
function renewed(owner, set, t, ok, err)
    if ok then
        t.renewedAt = ngx.now()
        stats.incr(owner.dict, owner.name, "renewed")
    elseif err == "not_owner" then
        set[t] = nil
        stats.incr(owner.dict, owner.name, "lost")
        ngx.log(
            ngx.ERR,
            "dlock: guard ",
            owner.name,
            ": lease on ",
            t.lease.key,
            " lost while its request is in flight"
        )
    else
        stats.incr(owner.dict, owner.name, "redis_errors")
        ngx.log(
            ngx.WARN,
            "dlock: guard ",
            owner.name,
            ": renewing ",
            t.lease.key,
            ": ",
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
        ": releasing ",
        what,
        " failed, it expires on its own: ",
        err
    )
end
--- Per guard name: the tracked leases of this worker (a set).
local tracked = {}
local queue = {}
local head = 1
local tail = 0
local draining = 0
local MAX_DRAINERS = 8
local function sweep(premature, owner)
    if premature then
        return
    end
    local set = tracked[owner.name]
    if set == nil then
        return
    end
    ngx.update_time()
    local due = ngx.now() - owner.ttl / 3000 * 0.9
    local batch = {}
    for t in pairs(set) do
        if t.renewedAt <= due then
            batch[#batch + 1] = t
        end
    end
    for ____, t in ipairs(batch) do
        if not t.done then
            local ok, err = t.lease:extend()
            if not t.done then
                renewed(
                    owner,
                    set,
                    t,
                    ok,
                    err
                )
            end
        end
    end
end
--- Register a request's lease for renewal (starts this worker's sweep for the guard on first use).
function ____exports.track(owner, l)
    local set = tracked[owner.name]
    if set == nil then
        set = {}
        tracked[owner.name] = set
        local ok, err = ngx.timer.every(owner.ttl / 3000, sweep, owner)
        if not ok then
            tracked[owner.name] = nil
            ngx.log(
                ngx.ERR,
                "dlock: guard ",
                owner.name,
                ": cannot start lease renewal: ",
                err
            )
        end
    end
    local t = {
        lease = l,
        renewedAt = ngx.now(),
        done = false
    }
    set[t] = true
    return t
end
local BATCH = 64
local function drain(premature)
    while head <= tail do
        local byOwner = {}
        for _ = 1, BATCH do
            if head > tail then
                break
            end
            local f = queue[head]
            queue[head] = nil
            head = head + 1
            if f.hold > 0 then
                local ok, err = f.lease:extend(f.hold)
                if ok == nil and err ~= "not_owner" then
                    failed(f.owner, f.lease.key, err)
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
            local n, err = lease.releaseAll(list)
            if n > 0 then
                failed(
                    owner,
                    tostring(n) .. " lease(s)",
                    err
                )
            end
        end
    end
    draining = draining - 1
end
--- The request is over (log phase): stop renewing, and release the lease, or
-- keep the key `hold` more ms, from a timer.
function ____exports.finish(owner, t, l, hold)
    if t ~= nil then
        t.done = true
        local set = tracked[owner.name]
        if set ~= nil then
            set[t] = nil
        end
    end
    tail = tail + 1
    queue[tail] = {owner = owner, lease = l, hold = hold}
    if draining < MAX_DRAINERS and draining < tail - head + 1 then
        local ok, err = ngx.timer.at(0, drain)
        if ok then
            draining = draining + 1
        elseif draining == 0 then
            ngx.log(
                ngx.ERR,
                "dlock: guard ",
                owner.name,
                ": cannot schedule releases (they expire on their own): ",
                err
            )
        end
    end
end
return ____exports
