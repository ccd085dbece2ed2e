-- Generated from src/resty/dlock/core/meter.ts by TypeScriptToLua: edit that file, not this one.
-- Per-factory instruments of the core API (locks, semaphores, the factories
-- under gateway guards), kept in the factory's shared dict so every worker
-- counts into the same numbers and the status endpoint reads them. Factories
-- of one name count together. Dict keys ("m:<name>:..."):
--   busy, timeout, error, lost   counters (lost: the watchdog found the lease gone,
--                                or its release found the key no longer ours)
--   w1..w11, ws                  acquire wait (s) of acquired leases: per-bucket counts, sum
--   h1..h11, hs                  lease hold (s), from acquire to confirmed release
--   held                         leases recorded now (the gauge), and
--   e<second>                    how many of them have their record expire in that second
--   swept                        the last second whose expiries left the gauge
-- Buckets are stored apart, not cumulative: one incr per observation; the
-- exposition adds them up. A lease that is never released (throttling, a
-- holder that forgot) leaves the gauge when its second has passed: the gauge
-- never drifts and is read without walking the dict (get_keys locks it).
-- Names: "m:n" how many, "m:#<i>" the i-th, "m:?<name>" known.
--
-- A worker counts in Lua first and adds its counts to the dict FLUSH seconds
-- later, in one incr per key that moved: an uncontended acquire + release
-- made eight dict calls for its instruments (each takes the zone's lock),
-- about a tenth of the library's CPU. A status page or a scrape adds the
-- serving worker's counts first; another worker's show up to FLUSH late. A
-- worker that crashes loses at most FLUSH seconds of its counts; the held
-- gauge still comes right, at the expiry second of the leases it recorded.
local _M = {}
local buckets = require("resty.dlock.core.buckets")
local check = require("resty.dlock.core.check")
local clock = require("resty.dlock.core.clock")
local dictcount = require("resty.dlock.core.dictcount")
local expiries = require("resty.dlock.core.expiries")
local quiet = require("resty.dlock.core.quiet")
local late = require("resty.dlock.core.late")
local clock_now = clock.now
local on_its_way = late.onItsWay
local ngx_log = ngx.log
local ERR = ngx.ERR
local get_phase = ngx.get_phase
local timer_at = ngx.timer.at
local worker_exiting = ngx.worker.exiting
local lua_pairs = pairs
local lua_next = next
local math_floor = math.floor
local str_find = string.find
local lua_type = type
local lua_ipairs = ipairs
local lua_tostring = tostring
local str_format = string.format
local quiet_due_for = quiet.dueFor
local quiet_more = quiet.more
local waitBucket = buckets.wait
local holdBucket = buckets.hold
--- Upper bounds (s) of the acquire-wait and hold-time buckets; the last bucket is +Inf.
local WAIT_BOUNDS = buckets.WAIT_BOUNDS
local HOLD_BOUNDS = buckets.HOLD_BOUNDS
--- Seconds a worker's counts wait before they are added to the dict.
local FLUSH = 0.25
--- Meters of this worker with counts to flush.
local dirty = {}
--- When the flush timer on its way was started (nil: none is).
local armed
--- "cannot defer the counts" lines, by why (one per why, worker and interval).
local undeferred = {}
--- Dicts of the factories made in this process, for status pages.
local dicts = {}
--- A factory name: letters, digits, '_', '-' and '.', at most 64 bytes (a label in metrics).
function _M.checkName(v)
    local n, err = check.str("name", v, 64)
    if n == nil then
        return nil, err
    end
    local bad = str_find(n, "[^%w_%-%.]")
    if bad ~= nil then
        return check.fail("name may hold letters, digits, '_', '-' and '.' only", n)
    end
    return n, nil
end
local function keysOf(p, n)
    local out = {}
    for i = 1, n do
        out[#out + 1] = p .. lua_tostring(i)
    end
    return out
end
--- The instruments of factory `name` in `dict`: made at new(), so that counting builds no key.
function _M.make(dict, name)
    local p = "m:" .. name .. ":"
    if (dict:safe_add("m:?" .. name, true)) then
        local i = dictcount.count(dict, "m:n", 1)
        if i ~= nil then
            dict:safe_set("m:#" .. lua_tostring(i), name)
        end
    end
    -- Swept up to the second before now: no record made from now on expires in it.
    dict:safe_add(p .. "swept", math_floor(clock_now()) - 1)
    dict:safe_add(p .. "held", 0)
    local known = false
    for _, d in lua_ipairs(dicts) do
        if d == dict then
            known = true
        end
    end
    if not known then
        dicts[#dicts + 1] = dict
    end
    return {
        name = name,
        dict = dict,
        busy = p .. "busy",
        timeout = p .. "timeout",
        error = p .. "error",
        lost = p .. "lost",
        wait = keysOf(p .. "w", #WAIT_BOUNDS + 1),
        waitSum = p .. "ws",
        hold = keysOf(p .. "h", #HOLD_BOUNDS + 1),
        holdSum = p .. "hs",
        held = p .. "held",
        exp = p .. "e",
        swept = p .. "swept",
        sweeping = p .. "sweeping",
        prefix = p,
        counts = {},
        seconds = {},
        dirty = false
    }
end
--- The dicts factories of this process count in.
function _M.known()
    return dicts
end
-- The dict key of an expiry second, in one format: a number turned into a
-- string and then joined would make two strings.
local SECOND = "%s%d"
--- Add m's expiry seconds to the dict, and to the held gauge the records they
-- moved; false when a sweep runs now (they wait for the next flush). A second
-- already swept took its records off the gauge as expired: moves into it are
-- dropped, moves out of it too (they were counted gone once).
local function flushSeconds(m)
    local dict = m.dict
    if (lua_next(m.seconds)) == nil then
        return true
    end
    if not dictcount.mark(dict, m.sweeping, true, 1) then
        return false
    end
    local mark = dict:get(m.swept)
    local last = lua_type(mark) == "number" and mark or 0
    local held = 0
    for s, n in lua_pairs(m.seconds) do
        m.seconds[s] = nil
        if n ~= 0 and s > last then
            dictcount.count(dict, str_format(SECOND, m.exp, s), n)
            held = held + n
        end
    end
    if held ~= 0 then
        dictcount.count(dict, m.held, held)
    end
    dict:delete(m.sweeping)
    expiries.sweep(dict, m.prefix)
    return true
end
-- The timer flush() arms runs it, and it flushes: declared ahead of flush(), set after it.
local flushLater
--- Is a flush timer on its way (not one nginx dropped, late.lua)?
local function isArmed()
    return on_its_way(armed, clock_now(), FLUSH)
end
--- Start the flush timer: nil, or why it cannot be had.
local function arm()
    local at = clock_now()
    local ok, err = timer_at(FLUSH, flushLater, at)
    if ok == nil then
        return lua_tostring(err)
    end
    armed = at
    return nil
end
--- Add this worker's counts to the dicts (before a status page reads them, and FLUSH after a count).
local function flush()
    local kept = 0
    for i = 1, #dirty do
        local m = dirty[i]
        dirty[i] = nil
        for k, n in lua_pairs(m.counts) do
            -- Counted keys stay, at 0: a meter counts into the same few keys again and again.
            if n ~= 0 then
                dictcount.count(m.dict, k, n)
                m.counts[k] = 0
            end
        end
        if flushSeconds(m) then
            m.dirty = false
        else
            kept = kept + 1
            dirty[kept] = m
        end
    end
    if kept > 0 and not isArmed() and get_phase() ~= "init" and not worker_exiting() then
        arm()
    end
end
flushLater = function(premature, at)
    -- One that ran so late that another was started in its place flushes too (no harm), and leaves that one armed.
    if armed == at then
        armed = nil
    end
    flush()
end
--- See that a flush comes: a timer, or (none to be had, or none in this phase) at once.
local function schedule()
    -- No timers in init_by_lua (an acquire there still counts) nor in an exiting worker: add them at once.
    if get_phase() ~= "init" and not worker_exiting() then
        local err = arm()
        if err == nil then
            return
        end
        -- Every count would say so, and none is lost: one line per why, worker and interval.
        local n = quiet_due_for(undeferred, err)
        if n > 0 then
            ngx_log(
                ERR,
                "dlock: cannot defer the counts of the lease metrics, adding them at once: ",
                err,
                quiet_more(n)
            )
        end
    end
    flush()
end
--- m has counts to flush: see that a flush comes.
local function touch(m)
    m.dirty = true
    dirty[#dirty + 1] = m
    if not isArmed() then
        schedule()
    end
end
--- Once an acquire: is the flush timer overdue (nginx dropped it)? Every meter
-- may be dirty by then, and a dirty meter's counts never touch() (they read no
-- clock, for the hot path): without this look the counts stayed in the worker.
local function overdue()
    if armed ~= nil and not isArmed() then
        schedule()
    end
end
--- Count n more of key k of meter m (in this worker, until the flush).
local function add(m, k, n)
    local c = m.counts
    c[k] = (c[k] or 0) + n
    if not m.dirty then
        touch(m)
    end
end
--- Move n records in (or out, n < 0) of expiry second s.
local function moveSecond(m, s, n)
    local secs = m.seconds
    secs[s] = (secs[s] or 0) + n
    if not m.dirty then
        touch(m)
    end
end
--- An acquire took a lease after `s` seconds.
function _M.acquired(m, s)
    overdue()
    add(m, m.wait[waitBucket(s)], 1)
    add(m, m.waitSum, s)
end
--- An acquire ended without a lease: "busy", "timeout", or anything else (an error).
function _M.refused(m, err)
    overdue()
    add(m, err == "busy" and m.busy or (err == "timeout" and m.timeout or m.error), 1)
end
--- A lease was released, confirmed, after `s` seconds held.
function _M.released(m, s)
    add(m, m.hold[holdBucket(s)], 1)
    add(m, m.holdSum, s)
end
function _M.lost(m)
    add(m, m.lost, 1)
end
--- A lease's record was made, expiring at epoch ms `expires`.
function _M.recorded(m, expires)
    moveSecond(m, math_floor(expires / 1000), 1)
end
--- A lease's record, expiring at epoch ms `expires`, was deleted before it expired.
function _M.forgotten(m, expires)
    moveSecond(m, math_floor(expires / 1000), -1)
end
--- A record's expiry moved (extend) from epoch ms `from` to `to`.
function _M.moved(m, from, to)
    local a = math_floor(from / 1000)
    local b = math_floor(to / 1000)
    if a == b then
        return
    end
    moveSecond(m, a, -1)
    moveSecond(m, b, 1)
end
-- Exported by name: this module's own uses of them are locals, not lookups in its exports table.
_M.flush = flush
_M.FLUSH = FLUSH
_M.WAIT_BOUNDS = WAIT_BOUNDS
_M.HOLD_BOUNDS = HOLD_BOUNDS
return _M
