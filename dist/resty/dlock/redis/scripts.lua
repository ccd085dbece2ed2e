-- Generated from src/resty/dlock/redis/scripts.ts by TypeScriptToLua: edit that file, not this one.
-- The Redis scripts of locks and semaphores (script.lua says what a script
-- is; records.lua has those of idempotency records). They are sent as EVALSHA
-- with the SHA1 computed locally, and EVAL once on NOSCRIPT (roundtrip.lua). A
-- script touches one lock key and the keys built on it (its waiters' queue,
-- its fence counter), all in one Cluster slot.
local _M = {}
local base = require("resty.dlock.redis.script")
_M.hashed = base.hashed
_M.tagged = base.tagged
_M.queueKey = base.queueKey
_M.readersKey = base.readersKey
_M.forTarget = base.forTarget
-- What the scripts of shared locks' readers (rwscripts.lua) are made of too.
local script = base.script
_M.isOk = base.isOk
_M.isOkFenced = base.isOkFenced
_M.isOne = base.isOne
_M.FREES = base.FREES
-- The tail of both acquire scripts, when the key is taken: the holder's PTTL
-- (-1: the key has no TTL), or an error when someone else's data sits there.
local BUSY = "\nlocal t = redis.call('TYPE', KEYS[1]).ok\nif t ~= 'string' then\n  return redis.error_reply('WRONGTYPE lock key ' .. KEYS[1] .. ' holds a ' .. t .. ', not a lock')\nend\nreturn redis.call('PTTL', KEYS[1])\n"
--- KEYS[1] lock key, ARGV[1] token, ARGV[2] ttl ms.
-- Returns "OK" when acquired, else the holder's PTTL (-1: the key has no TTL).
-- A key of another type is an error, not "busy": someone else's data sits there.
_M.ACQUIRE = script("acquire", "\nif redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then\n  return 'OK'\nend" .. BUSY, 1, _M.isOk)
--- Fencing: as ACQUIRE, with KEYS[2] a counter that only grows (it never
-- expires). Returns { "OK", fence } when acquired: the fence is larger than
-- that of every earlier holder of the key, so a resource that remembers the
-- largest fence it has seen can turn away a holder whose lease ran out.
_M.ACQUIRE_FENCED = script("acquire", "\nif redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then\n  return { 'OK', redis.call('INCR', KEYS[2]) }\nend" .. BUSY, 2, _M.isOkFenced)
--- Releases are announced on CHANNEL .. <lock key>: waiters anywhere in the
-- fleet subscribe per key (wakeups.lua); with nobody subscribed, PUBLISH costs
-- Redis a hash lookup. redis.pcall: an ACL user without channel permissions
-- (Redis 7 users get none by default) still releases; its waiters poll.
_M.CHANNEL = "dlock:released:"
local PUBLISH = "redis.pcall('PUBLISH', '" .. _M.CHANNEL .. "' .. KEYS[1], '')\n"
--- KEYS[1] lock key, ARGV[1] token. 1 when deleted (and announced), 0 when the key is not ours.
_M.RELEASE = script(
    "release",
    "\nif redis.call('GET', KEYS[1]) == ARGV[1] then\n  redis.call('DEL', KEYS[1])\n  " .. PUBLISH .. "  return 1\nend\nreturn 0\n",
    1,
    nil,
    nil,
    _M.FREES
)
-- Waiting in line, fleet-wide (locks, except under Redlock). Waiters of a key
-- take a ticket in its queue, a sorted set next to the lock key: score = when
-- the ticket was issued (Redis time, us), member = "<deadline ms> <token>",
-- the deadline being when its waiter stops waiting. A release does not just
-- free the key: it hands it to the first live ticket's holder for GRANT ms
-- (SET key <its token> PX GRANT) and says so on the release channel
-- ("g<GRANT> <token>"), so exactly one waiter of the fleet comes for it and
-- nobody can cut in. The waiter claims it ("c<ttl>" on the channel: the
-- others know the key's new expiry without asking). A waiter that dies holding
-- a grant costs GRANT ms; one whose wait ends leaves its ticket behind until
-- its deadline, when it is skipped; dead workers' tickets are dropped by crash
-- recovery, abandoned ones by DROP. The queue key expires with its last
-- deadline, so nothing outlives the waiters.
--- ms a key handed to the first waiter in line stays reserved for it. A woken
-- waiter comes within a round trip; one without a live subscription polls at
-- most every 64 ms (core/retry.lua MAX_BACKOFF).
_M.GRANT = 100
-- The queue, the last key.
_M.QUEUE = "local Q = KEYS[#KEYS]\n"
-- The first live ticket of queue Q, dropping those of waiters that stopped waiting (a ticket
-- starts with its deadline, ms): the body of LINE's head() and the set's (multiscripts.lua), `now` set.
_M.FIRST_LIVE = "  while true do\n    local h = redis.call('ZRANGE', Q, 0, 0)[1]\n    if not h then return nil end\n    if tonumber(string.match(h, '^(%d+) ')) > now then return h end\n    redis.call('ZREM', Q, h)\n  end\n"
-- The first live ticket of queue Q, and handing the key to it (set over it: a Cluster slot that
-- migrates refuses a key deleted in the same script, "non local key"). Redis time is read (clock())
-- only when there is a queue, and scripts define these after their uncontended path: the
-- three closures cost Redis a fifth of an acquire (redis-benchmark, 7.8 against 6.2 us a
-- call), which an uncontended lock never needs.
_M.LINE = "local t, now\nlocal function clock()\n  t = redis.call('TIME')\n  now = t[1] * 1000 + math.floor(t[2] / 1000)\nend\nlocal function head()\n" .. _M.FIRST_LIVE .. "end\nlocal function pass_on()\n  local h = head()\n  if not h then\n    redis.call('DEL', KEYS[1])\n    redis.pcall('PUBLISH', '" .. _M.CHANNEL .. "' .. KEYS[1], '')\n    return 1\n  end\n  local who = string.match(h, '^%d+ (.*)$')\n  redis.call('SET', KEYS[1], who, 'PX', " .. tostring(_M.GRANT) .. ")\n  redis.call('ZREM', Q, h)\n  redis.pcall('PUBLISH', '" .. _M.CHANNEL .. "' .. KEYS[1], 'g" .. tostring(_M.GRANT) .. " ' .. who)\n  return who\nend\n"
-- A waiter back with its ticket (ARGV[4], "<issued> <deadline>") takes its old
-- place in line again (`mine`), unless its deadline has passed. After LINE and clock().
_M.REJOIN = "local mine\nif ARGV[4] ~= '' then\n  local issued, deadline = string.match(ARGV[4], '^(%d+) (%d+)$')\n  mine = deadline .. ' ' .. ARGV[1]\n  -- back in line at its old place, had its turn come and gone while it was away\n  if tonumber(deadline) > now and redis.call('ZADD', Q, 'NX', issued, mine) == 1 then\n    if redis.call('PTTL', Q) < tonumber(deadline) - now then redis.call('PEXPIRE', Q, tonumber(deadline) - now) end\n  end\nend\n"
-- The reply of an acquire that did not take the key: a waiter without a ticket
-- that will wait (ARGV[3] ms) joins the line and gets one; { PTTL of the holder,
-- ticket, place in line }. The end of a queued acquire's script.
_M.TICKET = "local ticket = ARGV[4]\nlocal wait = tonumber(ARGV[3])\nif ticket == '' and wait > 0 then\n  local issued = t[1] .. string.format('%06d', t[2])\n  ticket = issued .. ' ' .. (now + wait)\n  mine = (now + wait) .. ' ' .. ARGV[1]\n  redis.call('ZADD', Q, issued, mine)\n  if redis.call('PTTL', Q) < wait then redis.call('PEXPIRE', Q, wait) end\nend\nreturn { redis.call('PTTL', KEYS[1]), ticket, mine and redis.call('ZRANK', Q, mine) or -1 }\n"
-- A waiter that is gone leaves the line: its ticket (the member ending in its
-- token, ARGV[1]) is removed; `dropped` says whether it was there. After clock().
_M.LEAVE = "local tail = ' ' .. ARGV[1]\nlocal dropped = 0\nfor _, m in ipairs(redis.call('ZRANGE', Q, 0, -1)) do\n  if string.sub(m, -#tail) == tail then\n    dropped = redis.call('ZREM', Q, m)\n    break\n  end\nend\n"
-- KEYS[1] lock, (KEYS[2] fence counter,) the queue last; ARGV[1] token, ARGV[2]
-- ttl ms, ARGV[3] ms the caller will wait (0: take it or leave), ARGV[4] its
-- ticket ("<issued> <deadline>", "" before it has one). TAKE is what taking
-- the key returns.
local function queuedAcquire(take)
    return _M.QUEUE .. "if ARGV[4] == '' and redis.call('EXISTS', Q) == 0 and redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then\n  return " .. take .. "  -- nobody in line, and the key free\nend\n" .. _M.LINE .. "clock()\n" .. _M.REJOIN .. "local v = redis.pcall('GET', KEYS[1])\nif type(v) == 'table' then\n  return redis.error_reply('WRONGTYPE lock key ' .. KEYS[1] .. ' holds a ' .. redis.call('TYPE', KEYS[1]).ok .. ', not a lock')\nend\nlocal take = false\nif v == ARGV[1] then\n  take = true  -- handed to us by the previous holder\nelseif not v then\n  local h = head()\n  if h == nil or h == mine then take = true else pass_on() end\nend\nif take then\n  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])\n  if mine then\n    redis.call('ZREM', Q, mine)\n    redis.pcall('PUBLISH', '" .. _M.CHANNEL .. "' .. KEYS[1], 'c' .. ARGV[2])\n  end\n  return " .. take .. "\nend\n" .. _M.TICKET
end
--- Locks that queue (see above). Returns "OK" when taken; else { PTTL of the
-- holder (-1: no TTL), ticket, place } where the ticket ("" when not waiting)
-- is what the caller sends back with its next attempt, and place is how many
-- wait ahead of it (-1 without a ticket).
_M.ACQUIRE_QUEUED = script("acquire", queuedAcquire("'OK'"), 2, _M.isOk, _M.ACQUIRE)
--- As ACQUIRE_QUEUED, with KEYS[2] the fence counter (the queue KEYS[3]): { "OK", fence } when taken.
_M.ACQUIRE_QUEUED_FENCED = script(
    "acquire",
    queuedAcquire("{ 'OK', redis.call('INCR', KEYS[2]) }"),
    3,
    _M.isOkFenced,
    _M.ACQUIRE_FENCED
)
--- KEYS[1] lock key, KEYS[2] queue, ARGV[1] token. When deleted: the token of
-- the first waiter in line, handed the key, or 1 with nobody in line (then
-- nobody is told: waiters are in line); 0 when the key is not ours.
_M.RELEASE_QUEUED = script(
    "release",
    _M.QUEUE .. "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end\nif redis.call('EXISTS', Q) == 0 then return redis.call('DEL', KEYS[1]) end\n" .. _M.LINE .. "clock()\nreturn pass_on()\n",
    2,
    nil,
    _M.RELEASE,
    _M.FREES
)
--- KEYS[1] lock key, Q queue, ARGV[1] token: a waiter that is gone (gave
-- up, killed, its worker dead) or an acquire whose reply was lost. Its ticket
-- leaves the queue, and a key handed (or taken) by it is passed on: 1 or the
-- next waiter's token then (as RELEASE_QUEUED), else 0.
_M.DROP = script(
    "drop",
    _M.QUEUE .. _M.LINE .. "clock()\n" .. _M.LEAVE .. "if redis.call('GET', KEYS[1]) == ARGV[1] then\n  return pass_on()\nend\nreturn dropped\n",
    2,
    nil,
    _M.RELEASE,
    _M.FREES
)
--- KEYS[1] lock key, ARGV[1] token, ARGV[2] ttl ms. 1 when extended, 0 when not ours.
_M.EXTEND = script(
    "extend",
    "\nif redis.call('GET', KEYS[1]) == ARGV[1] then\n  return redis.call('PEXPIRE', KEYS[1], ARGV[2])\nend\nreturn 0\n",
    1,
    _M.isOne,
    nil,
    _M.FREES
)
-- Counting semaphore: a sorted set of holders, member = token, score = expiry
-- in Redis time (ms). Expired holders are pruned on every acquire, so a crashed
-- nginx never leaks capacity: its permits simply run out.
local NOW = "local t = redis.call('TIME')\nlocal now = t[1] * 1000 + math.floor(t[2] / 1000)\n"
--- KEYS[1] set, ARGV[1] token, ARGV[2] ttl ms, ARGV[3] permits.
-- "OK" when a permit was taken, else ms until the earliest permit expires.
_M.SEM_ACQUIRE = script("semaphore acquire", NOW .. "\nredis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)\nif redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[3]) then\n  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])\n  local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')\n  redis.call('PEXPIREAT', KEYS[1], last[2])\n  return 'OK'\nend\nlocal first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')\nreturn tonumber(first[2]) - now\n", 1, _M.isOk)
--- KEYS[1] set, ARGV[1] token. 1 when our live permit was returned (and announced), else 0.
_M.SEM_RELEASE = script(
    "semaphore release",
    NOW .. "\nlocal exp = redis.call('ZSCORE', KEYS[1], ARGV[1])\nif not exp then return 0 end\nredis.call('ZREM', KEYS[1], ARGV[1])\nif tonumber(exp) <= now then return 0 end\n" .. PUBLISH .. "return 1\n",
    1,
    nil,
    nil,
    _M.FREES
)
--- KEYS[1] set, ARGV[1] token, ARGV[2] ttl ms. 1 when our live permit was extended, else 0.
_M.SEM_EXTEND = script(
    "semaphore extend",
    NOW .. "\nlocal exp = redis.call('ZSCORE', KEYS[1], ARGV[1])\nif not exp or tonumber(exp) <= now then\n  redis.call('ZREM', KEYS[1], ARGV[1])\n  return 0\nend\nlocal until_ms = now + tonumber(ARGV[2])\nredis.call('ZADD', KEYS[1], 'XX', until_ms, ARGV[1])\nif redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then\n  redis.call('PEXPIREAT', KEYS[1], until_ms)\nend\nreturn 1\n",
    1,
    _M.isOne,
    nil,
    _M.FREES
)
-- What takes back each acquire whose caller is gone before its reply came:
-- the release (the drop for a lock that queues: it also leaves the line and
-- passes on a key handed to it).
_M.ACQUIRE.undo = _M.RELEASE
_M.ACQUIRE_FENCED.undo = _M.RELEASE
_M.ACQUIRE_QUEUED.undo = _M.DROP
_M.ACQUIRE_QUEUED_FENCED.undo = _M.DROP
_M.SEM_ACQUIRE.undo = _M.SEM_RELEASE
_M.script = script
_M.NOW = NOW
return _M
