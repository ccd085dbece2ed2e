-- Generated from src/resty/dlock/core/letgo.ts by TypeScriptToLua: edit that file, not this one.
-- Letting a lease go where nginx allows no cosockets (log, header filter):
-- lua-resty-lock's unlock works in every phase, and the compat face must too.
-- Nobody waits for Redis there: the release rides the worker's next pipeline
-- (lease.post), or goes from a timer when it cannot. What Redis does not
-- confirm goes to the cleanup sweep, which retries until the key expires.
-- (The gateway ends its leases through a queue of its own: gateway/releases.lua.)
local _M = {}
local lease = require("resty.dlock.core.lease")
local quiet = require("resty.dlock.core.quiet")
local settle = require("resty.dlock.core.settle")
local lease_post = lease.post
local lease_posted = lease.posted
local timer_at = ngx.timer.at
local ngx_log = ngx.log
local ERR = ngx.ERR
local quiet_due = quiet.due
local quiet_more = quiet.more
--- The line about releases no timer could be had for: one per interval, not one per lease.
local unscheduled = quiet.make()
--- A timer's: release l; what Redis does not confirm goes to the sweep.
local function releaseNow(_premature, l)
    local ok, err = l:release()
    if ok == nil and err ~= "not_owner" then
        settle.orphan(l)
    end
end
--- Release l from a timer, where cosockets work.
local function later(l)
    local ok, err = timer_at(0, releaseNow, l)
    if ok then
        return
    end
    -- The sweep takes it once it has a timer of its own; else the key runs out by its ttl.
    settle.orphan(l)
    local n = quiet_due(unscheduled)
    if n > 0 then
        ngx_log(
            ERR,
            "dlock: cannot schedule a release (left to the cleanup sweep, or to its ttl): ",
            err,
            quiet_more(n)
        )
    end
end
--- A posted release was answered (in the sender's timer: nothing here may wait).
local function answered(j)
    local p = j.post
    local ok, err = lease_posted(p.lease, j)
    -- Not confirmed (Redis failed, a Cluster slot moved): once more from a timer, which follows redirects.
    if ok == nil and err ~= "not_owner" then
        later(p.lease)
    end
end
--- Release l without waiting for Redis, from any phase: the key is on its way out.
function _M.letGo(l)
    local j = lease_post(l)
    if j == nil then
        later(l)
        return
    end
    local p = {answered = answered, lease = l}
    j.post = p
end
return _M
