--[[ Generated with https://github.com/TypeScriptToLua/TypeScriptToLua ]]
local ____exports = {}
local failed, raised, hold, holdSafely, releaseList, drain, schedule, ngx_log, ERR, WARN, timer_at, thread_spawn, thread_wait, lua_pcall, lua_pairs, lua_tostring, qOwner, qLease, qHold, head, tail, draining, MAX_DRAINERS, BATCH, DRAIN_ROUNDS
local check = require("resty.dlock.core.check")
local lease = require("resty.dlock.core.lease")
local stats = require("resty.dlock.gateway.stats")
function failed(owner, what, err)
    stats.incr(owner.dict, owner.name, "redis_errors")
    ngx_log(
        WARN,
        "dlock: guard ",
        owner.name,
        ": ",
        what,
        " failed (retried until Redis answers or the lease expires): ",
        check.reason(err)
    )
end
function raised(err)
    ngx_log(
        ERR,
        "dlock: gateway release queue: ",
        check.text(err)
    )
end
function hold(owner, l, ms)
    local ok, err = l:extend(ms)
    if ok == nil and err ~= "not_owner" then
        failed(owner, "holding " .. l.key, err)
    end
end
function holdSafely(owner, l, ms)
    local ok, err = lua_pcall(hold, owner, l, ms)
    if not ok then
        raised(err)
    end
end
function releaseList(owner, list)
    local n, err = lease.releaseAll(list)
    if n > 0 then
        failed(
            owner,
            ("releasing " .. lua_tostring(n)) .. " lease(s)",
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
        local threads
        for _ = 1, BATCH do
            if head > tail then
                break
            end
            local owner = qOwner[head]
            local l = qLease[head]
            local ms = qHold[head]
            qOwner[head] = nil
            qLease[head] = nil
            qHold[head] = nil
            head = head + 1
            if ms > 0 then
                local co = thread_spawn(holdSafely, owner, l, ms)
                if co == nil then
                    holdSafely(owner, l, ms)
                else
                    if threads == nil then
                        threads = {}
                    end
                    threads[#threads + 1] = co
                end
            else
                local list = byOwner[owner]
                if list == nil then
                    list = {}
                    byOwner[owner] = list
                end
                list[#list + 1] = l
            end
        end
        for owner, list in lua_pairs(byOwner) do
            local ok, err = lua_pcall(releaseList, owner, list)
            if not ok then
                raised(err)
            end
        end
        if threads ~= nil then
            for i = 1, #threads do
                thread_wait(threads[i])
            end
        end
    end
    draining = draining - 1
    schedule()
end
function schedule()
    local backlog = tail - head + 1
    if backlog <= 0 or draining >= MAX_DRAINERS or draining * BATCH >= backlog then
        return
    end
    local ok, err = timer_at(0, drain)
    if ok then
        draining = draining + 1
    elseif draining == 0 then
        ngx_log(
            ERR,
            "dlock: gateway: cannot schedule ",
            backlog,
            " release(s), they expire on their own: ",
            err
        )
    end
end
ngx_log = ngx.log
ERR = ngx.ERR
WARN = ngx.WARN
timer_at = ngx.timer.at
thread_spawn = ngx.thread.spawn
thread_wait = ngx.thread.wait
lua_pcall = pcall
lua_pairs = pairs
lua_tostring = tostring
qOwner = {}
qLease = {}
qHold = {}
head = 1
tail = 0
draining = 0
MAX_DRAINERS = 8
BATCH = 64
DRAIN_ROUNDS = 32
--- Queue the end of a lease for a timer: release it, or keep it `hold` more ms.
function ____exports.enqueue(owner, l, holdMs)
    tail = tail + 1
    qOwner[tail] = owner
    qLease[tail] = l
    qHold[tail] = holdMs
    schedule()
end
return ____exports
