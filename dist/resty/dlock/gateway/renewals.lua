-- Generated from src/resty/dlock/gateway/renewals.ts by TypeScriptToLua: edit that file, not this one.
-- Renewals of the leases of in-flight requests: the watchdog (one sweep per
-- worker) extends them while their requests run, and tells the guard through
-- hooks made once per guard what each renewal found.
local _M = {}
local check = require("resty.dlock.core.check")
local stats = require("resty.dlock.gateway.stats")
local quiet = require("resty.dlock.core.quiet")
local watchdog = require("resty.dlock.core.watchdog")
local ngx_log = ngx.log
local ERR = ngx.ERR
local WARN = ngx.WARN
local quiet_due_for = quiet.dueFor
local quiet_more = quiet.more
--- Leases the watchdog renews for in-flight requests, and whose they are.
local heldOf = {}
--- Per guard, its line about renewals Redis did not answer (one per interval, not one per lease and sweep).
local unanswered = {}
--- Per guard, its line about leases the watchdog could not take on (no timer for it).
local unwatched = {}
--- Per guard, what the watchdog tells about its renewals.
local hooksOf = {}
-- Made once per guard, apart from watch(): a function that makes closures is
-- one LuaJIT does not compile, and would take its callers out of the trace.
local function makeHooks(owner)
    local hk = {
        renewed = function()
            stats.incr(owner._dict, owner.name, "renewed")
        end,
        lost = function(l)
            local h = heldOf[l]
            heldOf[l] = nil
            if h == nil or h.done then
                return
            end
            h.done = true
            stats.adjust(owner._dict, owner.name, "in_flight", -1)
            stats.incr(owner._dict, owner.name, "lost")
            ngx_log(
                ERR,
                "dlock: guard ",
                owner.name,
                ": lease on ",
                l.key,
                " lost while its request is in flight"
            )
        end,
        failed = function(l, err)
            -- A Redis hiccup: the next sweep tries again; if the lease runs out meanwhile, it is reported lost.
            stats.incr(owner._dict, owner.name, "redis_errors")
            local n = quiet_due_for(unanswered, owner.name)
            if n > 0 then
                ngx_log(
                    WARN,
                    "dlock: guard ",
                    owner.name,
                    ": renewing ",
                    l.key,
                    ": ",
                    check.reason(err),
                    quiet_more(n)
                )
            end
        end
    }
    hooksOf[owner] = hk
    return hk
end
--- Renew h's lease while its request runs: false when the watchdog cannot run
-- (no timer to be had), said once per guard, worker and interval.
function _M.watch(h)
    local owner = h.owner
    local err = watchdog.watch(h.lease, hooksOf[owner] or makeHooks(owner))
    if err == nil then
        heldOf[h.lease] = h
        return true
    end
    local n = quiet_due_for(unwatched, owner.name)
    if n > 0 then
        ngx_log(
            ERR,
            "dlock: guard ",
            owner.name,
            ": ",
            check.reason(err),
            ": requests go by on_error",
            quiet_more(n)
        )
    end
    return false
end
--- No more renewals of h's lease: its request is over.
function _M.unwatch(h)
    watchdog.unwatch(h.lease)
    heldOf[h.lease] = nil
end
return _M
