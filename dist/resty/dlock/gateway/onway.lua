-- Generated from src/resty/dlock/gateway/onway.ts by TypeScriptToLua: edit that file, not this one.
-- Releases on their way. A guard's release leaves after the response: the log
-- phase has no cosockets, so it rides the worker's next pipeline (or the
-- release queue's timer). A client's next request, sent once it has the
-- answer and taken by another worker, could reach Redis first and be refused
-- busy by its own request before it. So the worker that sends a release marks
-- its key in the shared dict until Redis has answered (and a moment after),
-- and a guard that would refuse at once (busy, no wait) while its key is
-- marked waits for the answer (a round trip; at most SETTLE) and tries once
-- more. Across nginx
-- instances no mark is seen: there the window stays one Redis round trip.
local _M = {}
local clock = require("resty.dlock.core.clock")
local clock_now = clock.now
local clock_sleep = clock.sleep
--- Dict keys: MARK followed by the Redis key; the value, how many releases of it are on their way.
local MARK = "o:"
--- Seconds a mark lasts whose releases never heard back (a crashed worker): it goes by itself.
local SENT_TTL = 1
--- Seconds a mark stays once its last release was answered: a busy answer
-- read just before that release landed, and looked into just after it was
-- answered, still finds that it was.
local ANSWERED_TTL = 0.02
--- Seconds a refusal waits at most for a marked release.
local SETTLE = 0.1
--- Seconds between looks at the mark.
local LOOK = 0.001
--- A release of rkey is on its way. A count, not a flag: at a Redis a round
-- trip away, the answer to a client's previous release comes just after its
-- last one was sent, and must not clear that one's mark. Only into free
-- memory: a mark never evicts a lease's record (incr adds no key).
function _M.sent(dict, rkey)
    local k = MARK .. rkey
    local ok, err = dict:safe_add(k, 1, SENT_TTL)
    if ok == true or err ~= "exists" then
        return
    end
    local n = dict:incr(k, 1)
    -- An answered mark, kept a moment, is on its way again: for as long as a release may take.
    if n == 1 then
        dict:expire(k, SENT_TTL)
    end
end
--- Redis answered a release of rkey (or it was given up).
function _M.settled(dict, rkey)
    local k = MARK .. rkey
    local n = dict:incr(k, -1)
    if n == nil or n > 0 then
        return
    end
    if n < 0 then
        dict:safe_set(k, 0, ANSWERED_TTL)
    else
        dict:expire(k, ANSWERED_TTL)
    end
end
--- Was a release of rkey on its way when its key was found busy? Then wait
-- until Redis answered it (at most SETTLE s): true, and a refusal is worth
-- one more try.
function _M.awaited(dict, rkey)
    local k = MARK .. rkey
    local v = dict:get(k)
    if v == nil then
        return false
    end
    local deadline = clock_now() + SETTLE
    while clock_now() < deadline do
        local n = dict:get(k)
        if n == nil or n <= 0 then
            break
        end
        clock_sleep(LOOK)
    end
    return true
end
return _M
