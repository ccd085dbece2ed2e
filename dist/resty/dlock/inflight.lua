--[[ Generated with https://github.com/TypeScriptToLua/TypeScriptToLua ]]
local ____exports = {}
local stats = require("resty.dlock.stats")
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
            if t.done then
            elseif ok then
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
local function drain(premature)
    while head <= tail do
        local f = queue[head]
        queue[head] = nil
        head = head + 1
        local ok
        local err
        if f.hold > 0 then
            ok, err = f.lease:extend(f.hold)
        else
            ok, err = f.lease:release()
        end
        if ok == nil and err ~= "not_owner" then
            stats.incr(f.owner.dict, f.owner.name, "redis_errors")
            ngx.log(
                ngx.WARN,
                "dlock: guard ",
                f.owner.name,
                ": releasing ",
                f.lease.key,
                " failed, it expires on its own: ",
                err
            )
        end
    end
    draining = draining - 1
end
--- The request is over (log phase): stop renewing, and release the lease, or
-- keep the key `hold` more ms, from a timer.
function ____exports.finish(owner, t, l, hold)
    if t ~= nil then
        t.done = true
        local ____opt_0 = tracked[owner.name]
        if ____opt_0 ~= nil then
            ____opt_0[t] = nil
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
