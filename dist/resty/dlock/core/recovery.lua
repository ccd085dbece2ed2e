-- Generated from src/resty/dlock/core/recovery.ts by TypeScriptToLua: edit that file, not this one.
-- Crash recovery: a worker that dies without running its Lua (SIGKILL, a
-- segfault, the OOM killer) leaves its leases taken in Redis until their ttl
-- runs out. nginx starts a replacement at once; that worker reads the dead
-- one's records from the shared dict (they carry its pid, the key and the
-- token) and releases them, owner-checked, so a successor that already took
-- a key is never touched. Every factory made in this process is registered
-- with what its records need: the dict, the prefix, the Redis it uses and its
-- release script. The leases of a whole nginx that died (the dict dies with
-- it) still expire by their ttl.
--
-- A worker that exits gracefully (nginx -s reload, -s quit) is no crash:
-- what it leaves recorded is kept on purpose until its ttl (a client abort
-- while the backend works, a throttle, a dedup hold, a Lua caller's lease),
-- and a sweep after it is gone (the next reload's workers) must not release
-- it. As it begins to exit, nginx fires its pending timers early: one of
-- them marks its pid in every dict ("x:<pid>"), and sweeps pass marked pids
-- by; the mark goes once the worker is gone and nothing of it is left.
--
-- Run from init_worker_by_lua (dlock.init_worker()), and otherwise at a
-- worker's first acquire.
local _M = {}
local backend = require("resty.dlock.redis.backend")
local script = require("resty.dlock.redis.script")
local check = require("resty.dlock.core.check")
local ledger = require("resty.dlock.core.ledger")
local meter = require("resty.dlock.core.meter")
local quiet = require("resty.dlock.core.quiet")
local ffi = require("ffi")
pcall(ffi.cdef, "int kill(int pid, int sig);")
local ngx_get_phase = ngx.get_phase
local worker_pid = ngx.worker.pid
local timer_at = ngx.timer.at
local timer_every = ngx.timer.every
local ngx_log = ngx.log
local WARN = ngx.WARN
local NOTICE = ngx.NOTICE
local lua_tostring = tostring
local lua_pcall = pcall
local lua_pairs = pairs
local lua_ipairs = ipairs
local math_min = math.min
local lockKey = script.lockKey
local quiet_tally = quiet.tally
local quiet_add = quiet.add
local quiet_named = quiet.named
local lua_tonumber = tonumber
local str_sub = string.sub
local ESRCH = 3
--- Registered factories whose dead workers' leases this worker has not looked for yet.
local pending = {}
--- The dicts of every registered factory: where an exiting worker leaves its mark.
local dicts = {}
--- The mark of a worker that began a graceful exit: "x:<pid>".
local EXITED = "x:"
--- Remember a factory: its dead workers' leases can be released.
function _M.register(store, kind)
    pending[#pending + 1] = {store = store, kind = kind}
    dicts[store.dict] = true
end
--- Stores whose dead workers' leases run out by their ttl: a guard's (the backend may still run their requests).
local kept = {}
--- A guard's factory: a worker that dies leaves its requests' leases to their
-- ttl, as a client's abort does (nginx cut the upstream connections, the
-- application behind them goes on); its waiters' tickets are dropped.
function _M.keep(store)
    kept[store] = true
end
--- Period of the exit watch: it is there to be fired early. A repeating timer,
-- re-armed by nginx itself: a re-arm from Lua fails when the worker's timers
-- are at lua_max_pending_timers, and the watch would be gone for good.
local WATCH = 86400
local watching = false
--- The exit watch's timer: fired early (premature) as the worker begins a graceful exit.
local function exiting(premature)
    if not premature then
        return
    end
    local mark = EXITED .. lua_tostring(worker_pid())
    -- safe_set: a full dict drops the mark (its leases are then released as a crash's), never a record.
    for d in lua_pairs(dicts) do
        d:safe_set(mark, true)
    end
end
--- Is there no process with this pid (kill(pid, 0) says ESRCH)?
local function dead(pid)
    local libc = ffi.C
    return libc.kill(pid, 0) ~= 0 and ffi.errno() == ESRCH
end
--- Seconds before the first retry of a give-back, doubling up to RETRY_MAX while Redis does not take it.
local RETRY_FIRST = 0.5
local RETRY_MAX = 4
--- Give back, in one batch, what dead workers of factory f left: leases (its
-- release script) or tickets (its drop). Returns the items Redis did not take;
-- `first`: the first try, which says why (the retries say nothing until they succeed).
local function giveBack(dict, f, s, items, first)
    local targets = {}
    for _, it in lua_ipairs(items) do
        targets[#targets + 1] = it.target
    end
    local out = backend.batch(f.store.redis, s, targets)
    local released = 0
    -- What Redis would not take: one line for the batch, not one per key.
    local failed = quiet_tally()
    local left = {}
    local why
    for i = 1, #items do
        local it = items[i]
        if out.replies[i] ~= nil then
            local expires = ledger.forget(dict, it.rec, it.target.token)
            -- A lease's record leaves the held gauge; a waiter's ticket was never in it.
            if expires ~= nil and s ~= f.kind.drop then
                meter.forgotten(f.store.meter, expires)
            end
            if out.replies[i] ~= 0 then
                released = released + 1
            end
        else
            quiet_add(failed, it.target.rkey)
            left[#left + 1] = it
            why = why or out.errors[i]
        end
    end
    if failed.count > 0 and first then
        ngx_log(
            WARN,
            "dlock: recovery: ",
            s == f.kind.drop and "dropping the tickets for " or "releasing ",
            failed.count,
            " key(s) of dead worker(s) failed (",
            quiet_named(failed),
            "): ",
            check.reason(why),
            " (tried again until Redis takes it or their ttl runs out)"
        )
    end
    if released > 0 then
        ngx_log(
            NOTICE,
            "dlock: recovery: ",
            s == f.kind.drop and "dropped the tickets (or passed on the keys) of " or "released ",
            released,
            s == f.kind.drop and " waiter(s)" or " lease(s)",
            " of dead worker(s) on ",
            f.store.redis.endpoint
        )
    end
    return left
end
--- Another try at what Redis did not take, for the items still recorded (a
-- record leaves the dict when its lease's ttl is over: Redis has let it go by
-- then). A worker exiting tries once more, and leaves the rest to their ttl.
local function retry(premature, r, delay)
    local still = {}
    for _, it in lua_ipairs(r.items) do
        if (ledger.holder(r.dict, it.rec)) ~= nil then
            still[#still + 1] = it
        end
    end
    if #still == 0 then
        return
    end
    local left = giveBack(r.dict, r.f, r.s, still, false)
    if premature or #left == 0 then
        return
    end
    local next = math_min(delay * 2, RETRY_MAX)
    local ok, err = timer_at(next, retry, {dict = r.dict, f = r.f, s = r.s, items = left}, next)
    if not ok then
        ngx_log(
            WARN,
            "dlock: recovery: cannot retry giving back ",
            #left,
            " key(s) of dead worker(s): ",
            err
        )
    end
end
--- What Redis did not take at the first try, tried again soon.
local function later(dict, f, s, items)
    if #items == 0 then
        return
    end
    local ok, err = timer_at(RETRY_FIRST, retry, {dict = dict, f = f, s = s, items = items}, RETRY_FIRST)
    if not ok then
        ngx_log(
            WARN,
            "dlock: recovery: cannot retry giving back ",
            #items,
            " key(s) of dead worker(s): ",
            err
        )
    end
end
local function add(todo, f, r)
    local t = todo[f]
    if t == nil then
        t = {}
        todo[f] = t
    end
    t[#t + 1] = {rec = r.rec, target = {rkey = r.rkey, token = r.token}}
end
--- Could a factory of store s have taken record r (its key and server)?
local function keyOf(s, r)
    local p = s.prefix
    return (p .. r.key == r.rkey or (lockKey(p, r.key, p .. r.key, s.redis.slotted)) == r.rkey) and (r.space == "" or r.space == s.redis.keyspace)
end
--- Could f have taken record r (its key, kind and server)? Owner-checked: a factory that never had it just hears "not ours".
local function mayOwn(f, r)
    return f.kind.shared == r.shared and keyOf(f.store, r)
end
--- Could a guard's factory (kept), of this sweep or an earlier one, have taken r?
local function keptOne(r)
    for s in lua_pairs(kept) do
        if keyOf(s, r) then
            return true
        end
    end
    return false
end
--- The leases (and waiters' tickets) of dead workers recorded in the dicts of these factories, given back.
local function sweep(premature, factories)
    if premature then
        return
    end
    local byDict = {}
    for _, f in lua_ipairs(factories) do
        local list = byDict[f.store.dict]
        if list == nil then
            list = {}
            byDict[f.store.dict] = list
        end
        list[#list + 1] = f
    end
    for dict, list in lua_pairs(byDict) do
        local records, exits = ledger.records(dict, EXITED)
        local deadPids = {}
        local recorded = {}
        -- Per factory (that is, per Redis and script), the leases to release and the tickets to drop.
        local leases = {}
        local tickets = {}
        for _, r in lua_ipairs(records) do
            local isDead = deadPids[r.pid]
            if isDead == nil then
                -- Gone after a graceful exit (its mark): what it left, it left on purpose.
                isDead = r.pid ~= worker_pid() and (dict:get(EXITED .. lua_tostring(r.pid))) == nil and dead(r.pid)
                deadPids[r.pid] = isDead
            end
            recorded[r.pid] = true
            -- A lease a guard's factory may have taken is left to its ttl, whatever else shares its keys.
            if isDead and (r.waiting or not keptOne(r)) then
                for _, f in lua_ipairs(list) do
                    if mayOwn(f, r) then
                        if not r.waiting then
                            add(leases, f, r)
                        elseif f.kind.drop ~= nil then
                            add(tickets, f, r)
                        end
                    end
                end
            end
        end
        for _, k in lua_ipairs(exits) do
            local pid = lua_tonumber(str_sub(k, #EXITED + 1))
            if pid ~= nil and recorded[pid] == nil and pid ~= worker_pid() and dead(pid) then
                dict:delete(k)
            end
        end
        for f, items in lua_pairs(leases) do
            later(dict, f, f.kind.release, giveBack(dict, f, f.kind.release, items, true))
        end
        for f, items in lua_pairs(tickets) do
            later(dict, f, f.kind.drop, giveBack(dict, f, f.kind.drop, items, true))
        end
    end
end
--- Look for leases of dead workers, once per worker and factory: from
-- init_worker, and at an acquire after a factory was made. Cheap when there
-- is nothing new. Returns an error when the timer cannot be started.
function _M.start()
    -- The exit watch: from init_worker only, in the worker's own VM (a request's
    -- VM under lua_code_cache off must end with its last timer).
    if not watching and ngx_get_phase() == "init_worker" then
        watching = (timer_every(WATCH, exiting)) == true
    end
    if #pending == 0 then
        return nil
    end
    -- No timers before the workers exist (ngx.timer.at raises "no request"
    -- there): the factories stay pending, for each worker to sweep once it runs.
    if ngx_get_phase() == "init" then
        return "dlock: init_worker is not available in the init phase (no timers): call it from init_worker_by_lua"
    end
    local batch = pending
    pending = {}
    -- A pid of ours that an exited worker had before (pids come round again): our crash is a crash.
    local mine = EXITED .. lua_tostring(worker_pid())
    for _, f in lua_ipairs(batch) do
        f.store.dict:delete(mine)
    end
    local called, ok, err = lua_pcall(timer_at, 0, sweep, batch)
    if not called or not ok then
        pending = batch
        -- pcall failed: its error is in ok's place; timer_at failed: in err's.
        local why = err
        if not called then
            why = ok
        end
        return "dlock: cannot start the recovery sweep: " .. lua_tostring(why)
    end
    return nil
end
return _M
