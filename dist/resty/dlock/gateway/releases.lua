--[[ Generated with https://github.com/TypeScriptToLua/TypeScriptToLua ]]
local ____exports = {}
local failed, raised, finish, finishSafely, drain, schedule, ngx_log, ERR, WARN, timer_at, thread_spawn, thread_wait, lua_pcall, lua_tostring, qOwner, qLease, qHold, head, tail, draining, MAX_DRAINERS, BATCH, DRAIN_ROUNDS
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
function finish(owner, l, ms)
    if ms > 0 then
        local ok, err = l:extend(ms)
        if ok == nil and err ~= "not_owner" then
            failed(owner, "holding " .. l.key, err)
        end
        return
    end
    local ok, err = l:release()
    if ok ~= nil or err == "not_owner" then
        return
    end
    local n, berr = lease.releaseAll({l})
    if n > 0 then
        failed(
            owner,
            ("releasing " .. lua_tostring(n)) .. " lease(s)",
            berr
        )
    end
end
function finishSafely(owner, l, ms)
    local ok, err = lua_pcall(finish, owner, l, ms)
    if not ok then
        raised(err)
    end
end
function drain(premature)
    local threads = {}
    for _ = 1, DRAIN_ROUNDS do
        if head > tail then
            break
        end
        local n = 0
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
            local co = thread_spawn(finishSafely, owner, l, ms)
            if co == nil then
                finishSafely(owner, l, ms)
            else
                n = n + 1
                threads[n] = co
            end
        end
        for i = 1, n do
            thread_wait(threads[i])
            threads[i] = nil
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
