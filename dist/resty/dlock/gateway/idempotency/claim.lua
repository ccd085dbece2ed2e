-- Generated from src/resty/dlock/gateway/idempotency/claim.ts by TypeScriptToLua: edit that file, not this one.
-- Claiming a key in Redis, and waiting for the first request's response when
-- the key is claimed already. The watch table (duplicates of one key waiting
-- in this worker) lives here: the store (capture.lua) wakes it through notify.
local _M = {}
local backend = require("resty.dlock.redis.backend")
local orphans = require("resty.dlock.core.orphans")
local records = require("resty.dlock.redis.records")
local breaker = require("resty.dlock.gateway.breaker")
local clock = require("resty.dlock.core.clock")
local late = require("resty.dlock.core.late")
local semaphore = require("ngx.semaphore")
local clock_now = clock.now
local clock_timeout = clock.timeout
local on_its_way = late.onItsWay
local ngx_update_time = ngx.update_time
local math_min = math.min
local lua_tostring = tostring
local lua_tonumber = tonumber
--- Shared dict mark of a claim whose holder has sent its whole response (the store is on its way).
local FINISHED = "idem:fin:"
local watches = {}
--- The watch of rkey is done with: later duplicates start a watch of their own.
local function close(rkey, w)
    if watches[rkey] == w then
        watches[rkey] = nil
    end
end
--- The stored record of rkey is known (or, rec nil, the claim was dropped): wake the waiters.
function _M.notify(rkey, rec)
    local w = watches[rkey]
    if w == nil or w.waiters == 0 then
        return
    end
    if rec ~= nil then
        w.rec = rec
        w.recAt = clock_now()
    end
    w.sem:post(w.waiters)
    close(rkey, w)
end
local function claim(g, rkey, tok, fp)
    local res, err, fault = backend.call(g._conf, records.IDEM_CLAIM, rkey, tok, g._lease, fp)
    if res == nil then
        if fault == "lost" then
            -- The claim may have landed with nobody to complete it: drop it (owner-checked) rather than
            -- let it refuse retries for a whole lease.
            orphans.adoptAcquire(g._conf, records.IDEM_RELEASE, rkey, tok)
        end
        return "error", nil, err
    end
    breaker.success(g._dict, g.name)
    if res == "OK" then
        return "claimed", nil, nil
    end
    local r = res
    local rec = {
        state = lua_tostring(r[1]),
        fp = lua_tostring(r[2]),
        status = lua_tonumber(r[3]) or 0,
        headers = lua_tostring(r[4]),
        body = lua_tostring(r[5])
    }
    return "record", rec, nil
end
--- Wait up to g._wait ms for the first request's response. Returns "record" with
-- it, "claimed" when the first request's claim was dropped and we took the key,
-- "timeout", or "error".
function _M.waitFor(g, rkey, tok, fp)
    local w = watches[rkey]
    if w == nil then
        local sem, serr = semaphore.new(0)
        if sem == nil then
            return "error", nil, "dlock: ngx.semaphore: " .. lua_tostring(serr)
        end
        w = {sem = sem, waiters = 0, pollingSince = nil, rec = nil, recAt = 0}
        watches[rkey] = w
    end
    w.waiters = w.waiters + 1
    local joined = clock_now()
    -- How long one poll (a Redis call) can take.
    local pollFor = (g._conf.connect_timeout + g._conf.read_timeout) / 1000
    local deadline = clock_now() * 1000 + g._wait
    local extended = false
    local pause = 5
    local what = "timeout"
    local found
    local err
    while true do
        if w.rec ~= nil and w.recAt >= joined then
            what = "record"
            found = w.rec
            break
        end
        ngx_update_time()
        local left = deadline - clock_now() * 1000
        local mark = nil
        if left <= 0 and not extended then
            mark = g._dict:get(FINISHED .. rkey)
        end
        if mark ~= nil then
            -- The first request's response went out from this nginx: it is being
            -- stored, which may take up to the lease (the store retries): a retry
            -- sent after it must get the replay, not a 409.
            extended = true
            deadline = clock_now() * 1000 + g._lease
            left = g._lease
        end
        if left <= 0 then
            break
        end
        if on_its_way(w.pollingSince, clock_now(), pollFor) then
            -- Another waiter of this worker asks Redis; it (or the store) wakes us.
            w.sem:wait(clock_timeout(math_min(left, 250) / 1000))
        else
            w.pollingSince = clock_now()
            local got, rec, cerr = claim(g, rkey, tok, fp)
            w.pollingSince = nil
            if got == "record" and rec.state ~= "running" then
                w.rec = rec
                w.recAt = clock_now()
                -- The others of this worker (ngx.semaphore refuses to post 0).
                if w.waiters > 1 then
                    w.sem:post(w.waiters - 1)
                end
                close(rkey, w)
                what = "record"
                found = rec
                break
            end
            if got ~= "record" then
                -- Claimed for ourselves, or Redis failed: another waiter polls from now on.
                if w.waiters > 1 then
                    w.sem:post(1)
                end
                what = got
                err = cerr
                break
            end
            w.sem:wait(clock_timeout(math_min(left, pause) / 1000))
            pause = math_min(pause * 2, 100)
        end
    end
    w.waiters = w.waiters - 1
    if w.waiters == 0 then
        close(rkey, w)
    end
    return what, found, err
end
-- Exported by name: this module's own uses of them are locals, not lookups in its exports table.
_M.FINISHED = FINISHED
_M.claim = claim
return _M
