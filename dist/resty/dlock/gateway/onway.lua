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
--- Dict keys: MARK followed by the Redis key.
local MARK = "o:"
--- The mark's value while the release is on its way, and once Redis answered it.
local SENT = 1
local ANSWERED = 0
--- Seconds a mark lasts whose release never heard back (a crashed worker): it goes by itself.
local SENT_TTL = 1
--- Seconds an answered release stays marked: a busy answer read just before
-- the release landed, and looked into just after it was answered, still
-- finds that it was (the mark, a number, is overwritten where it is).
local ANSWERED_TTL = 0.02
--- Seconds a refusal waits at most for a marked release.
local SETTLE = 0.1
--- Seconds between looks at the mark.
local LOOK = 0.001
--- A release of rkey is on its way (only into free memory: a mark never evicts a lease's record).
function _M.sent(dict, rkey)
    dict:safe_set(MARK .. rkey, SENT, SENT_TTL)
end
--- Redis answered the release of rkey (or it was given up).
function _M.settled(dict, rkey)
    dict:safe_set(MARK .. rkey, ANSWERED, ANSWERED_TTL)
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
    while (dict:get(k)) == SENT and clock_now() < deadline do
        clock_sleep(LOOK)
    end
    return true
end
return _M
