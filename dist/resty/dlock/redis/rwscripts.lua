-- Generated from src/resty/dlock/redis/rwscripts.ts by TypeScriptToLua: edit that file, not this one.
-- Shared locks: the scripts of readers (acquire(key, { shared = true })). A
-- writer is a plain lock and runs the plain lock's scripts (scripts.lua): this
-- module only teaches readers to live beside it. The layout:
--
--   <key>           the lock key, a plain string as ever. A writer holds it with
--                   its token; while readers hold it, it holds MARK, a value no
--                   token equals, with PX = the latest reader's expiry. Either
--                   way SET NX fails on it: node-redlock's (or any client's) lock
--                   on the same key and ours exclude each other both ways, and a
--                   writer's script sees "busy" without knowing readers exist.
--   <key>:readers   a sorted set: member = a reader's token, score = when its
--                   lease ends (Redis time, ms); expires with its last member.
--                   Only meaningful while <key> holds MARK: a reader that finds
--                   the key free clears it first, so a key deleted from under
--                   its readers (by hand, FLUSHDB) brings none of them back.
--   <key>:queue     the line of waiters, readers and writers together
--                   (scripts.lua). A reader's token starts with "r~" (no token
--                   of ours does otherwise: random tokens are hex, worker tokens
--                   start with a host name), so a ticket says which it is, and a
--                   writer's release can hand the key to a reader by token like
--                   to anyone (the reader turns the key into MARK when it comes).
--
-- Under Cluster all three share one slot (hash tags, as queueKey places them).
--
-- Rules (why no writer starves): a reader takes when no writer holds the key
-- and no live writer ticket was issued before its own (before everyone, for a
-- reader without a ticket): readers arriving while a writer waits queue
-- behind it. A writer takes (scripts.lua, unchanged) when the key is free and
-- it is first in line; readers keep the key from it. The last reader to leave
-- (release, drop) hands the key on as RELEASE_QUEUED does; readers at the head
-- of the line, whoever lets them in, go in together: each is reserved a place
-- among the readers for GRANT ms and told by name ("g" on the release
-- channel, as a handed key), so one wake-up per reader, no herd.
local _M = {}
local scripts = require("resty.dlock.redis.scripts")
local script = scripts.script
local GRANT = scripts.GRANT
local CHANNEL = scripts.CHANNEL
--- What the lock key holds while readers hold it: no token equals it (tokens have no "!").
_M.MARK = "dlock!shared"
--- What starts every reader's token.
_M.READER = "r~"
-- The readers' helpers, after scripts.LINE (clock(), head(), pass_on()), with R the readers' set.
local READERS = "local R = KEYS[2]\nlocal MARK = '" .. _M.MARK .. "'\nlocal function is_reader(m) return string.match(m, '^%d+ r~') ~= nil end\n-- Expired readers out; the lock key and the set expire with the latest reader\n-- left. False (and the set gone) when none is left: then the caller frees the key.\n-- The set's expiry is set first: PEXPIREAT of a time Redis's clock has reached\n-- deletes at once, and should the clock cross that ms between the two, the key\n-- must go with the set, never stay MARK without its readers.\nlocal function sync()\n  redis.call('ZREMRANGEBYSCORE', R, '-inf', now)\n  local last = redis.call('ZRANGE', R, -1, -1, 'WITHSCORES')\n  if not last[1] then\n    redis.call('DEL', R)\n    return false\n  end\n  redis.call('PEXPIREAT', R, last[2])\n  redis.call('PEXPIREAT', KEYS[1], last[2])\n  return true\nend\n-- A reader (token; live: its place has not run out) leaves: true when live\n-- readers remain (synced), false when none does (the set gone). The others are\n-- counted before it leaves: a set the script emptied cannot be touched again\n-- in a Cluster slot that migrates (\"non local key\").\nlocal function step_out(token, live)\n  local others = #redis.call('ZRANGE', R, '(' .. now, '+inf', 'BYSCORE', 'LIMIT', 0, 2)\n  if live then others = others - 1 end\n  if others <= 0 then\n    redis.call('DEL', R)\n    return false\n  end\n  redis.call('ZREM', R, token)\n  return sync()\nend\n-- The readers at the head of the line go in together: a place reserved for\n-- GRANT ms each, and word by name. The caller makes the key MARK and syncs.\nlocal function admit()\n  local n = 0\n  while true do\n    local h = head()\n    if not h or not is_reader(h) then return n end\n    local who = string.match(h, '^%d+ (.*)$')\n    redis.call('ZREM', Q, h)\n    redis.call('ZADD', R, now + " .. tostring(GRANT) .. ", who)\n    redis.pcall('PUBLISH', '" .. CHANNEL .. "' .. KEYS[1], 'g" .. tostring(GRANT) .. " ' .. who)\n    n = n + 1\n  end\nend\n-- The last reader left (the set gone): the key to the readers at the head of\n-- the line, or as RELEASE_QUEUED hands it on (1, or the token it went to). The\n-- key is not deleted first: a Cluster slot migrating refuses a key the script\n-- deleted (\"non local key\"); readers let in then still are (rare: they queue\n-- behind a writer).\nlocal function hand_on()\n  if admit() > 0 then\n    redis.call('SET', KEYS[1], MARK)\n    sync()\n    return 1\n  end\n  return pass_on()\nend\n"
-- KEYS[1] lock, KEYS[2] readers, (KEYS[3] fence counter,) the queue last;
-- ARGV as the lock's acquire (scripts.lua queuedAcquire): token, ttl ms, ms the
-- caller will wait, its ticket. TAKE is what taking the key returns.
local function readAcquire(take)
    return scripts.QUEUE .. scripts.LINE .. READERS .. "clock()\nlocal v = redis.pcall('GET', KEYS[1])\nif type(v) == 'table' then\n  return redis.error_reply('WRONGTYPE lock key ' .. KEYS[1] .. ' holds a ' .. redis.call('TYPE', KEYS[1]).ok .. ', not a lock')\nend\n" .. scripts.REJOIN .. "-- MARK with no live reader left (a reservation ran out): the key is free.\n-- A free key has no readers: whatever the set still holds is stale.\nif v == MARK and not sync() then\n  redis.call('DEL', KEYS[1])\n  v = false\nelseif not v then\n  redis.call('DEL', R)\nend\nlocal take = false\nif v == ARGV[1] then\n  take = true  -- handed to us by the previous holder\nelseif v == MARK and redis.call('ZSCORE', R, ARGV[1]) then\n  take = true  -- let in with the readers at the head of the line\nelseif not v or v == MARK then\n  -- no writer holds it: ours unless a live writer's ticket came before ours\n  take = true\n  for _, m in ipairs(redis.call('ZRANGE', Q, 0, -1)) do\n    if m == mine then break end\n    if not is_reader(m) and tonumber(string.match(m, '^(%d+) ')) > now then\n      take = false\n      break\n    end\n  end\nend\nif take then\n  if v ~= MARK then\n    if v then redis.call('DEL', R) end\n    redis.call('SET', KEYS[1], MARK)\n  end\n  redis.call('ZADD', R, now + tonumber(ARGV[2]), ARGV[1])\n  if mine then redis.call('ZREM', Q, mine) end\n  admit()  -- readers right behind us come along\n  sync()\n  if mine then redis.pcall('PUBLISH', '" .. CHANNEL .. "' .. KEYS[1], 'c' .. redis.call('PTTL', KEYS[1])) end\n  return " .. take .. "\nend\nif not v or v == MARK then\n  -- Not ours to take: a writer waits before us. Readers ahead of it go in now;\n  -- a free key goes to the writer at the head.\n  local h = head()\n  if h and h ~= mine then\n    if is_reader(h) then\n      admit()\n      if not v then redis.call('SET', KEYS[1], MARK) end\n      sync()\n    elseif not v then\n      pass_on()\n    end\n  end\nend\n" .. scripts.TICKET
end
--- A reader's acquire (KEYS[1] lock, KEYS[2] readers, KEYS[3] queue; ARGV
-- token, ttl, wait, ticket). Replies as scripts.ACQUIRE_QUEUED. No `alone`
-- form: without its readers a reader cannot take anything (under a Cluster
-- slot migration, TRYAGAIN is retried while the wait allows).
_M.READ_ACQUIRE = script("shared acquire", readAcquire("'OK'"), 3, scripts.isOk)
--- As READ_ACQUIRE, with KEYS[3] the fence counter (the queue KEYS[4]): { "OK", fence } when taken.
_M.READ_ACQUIRE_FENCED = script(
    "shared acquire",
    readAcquire("{ 'OK', redis.call('INCR', KEYS[3]) }"),
    4,
    scripts.isOkFenced
)
-- The readers' scripts on the lock key and its readers alone (KEYS[1], KEYS[2]):
-- a Cluster slot migrating (script.lua `alone`). A key freed wakes every waiter,
-- who take turns meanwhile. In a migrating slot a key the script deleted cannot
-- be touched again ("non local key"): leave() counts the readers left first
-- (two live ones at most: beside ours, one more is enough; ZRANGE, which the
-- README's least-privilege ACL rule allows, where ZCOUNT is not in it).
local ALONE = "local R = KEYS[2]\n" .. scripts.NOW .. "local function leave()\n  local others = #redis.call('ZRANGE', R, '(' .. now, '+inf', 'BYSCORE', 'LIMIT', 0, 2)\n  local exp = redis.call('ZSCORE', R, ARGV[1])\n  if exp and tonumber(exp) > now then others = others - 1 end\n  if others <= 0 then\n    redis.call('DEL', R, KEYS[1])\n    redis.pcall('PUBLISH', '" .. CHANNEL .. "' .. KEYS[1], '')\n    return\n  end\n  redis.call('ZREM', R, ARGV[1])\n  redis.call('ZREMRANGEBYSCORE', R, '-inf', now)\n  local last = redis.call('ZRANGE', R, -1, -1, 'WITHSCORES')\n  redis.call('PEXPIREAT', R, last[2])\n  redis.call('PEXPIREAT', KEYS[1], last[2])\nend\nlocal v = redis.call('GET', KEYS[1])\n"
local READ_RELEASE_ALONE = script(
    "shared release",
    ALONE .. "if v ~= '" .. _M.MARK .. "' then return 0 end\nlocal exp = redis.call('ZSCORE', R, ARGV[1])\nleave()\nreturn (exp and tonumber(exp) > now) and 1 or 0\n",
    2,
    nil,
    nil,
    scripts.FREES
)
local READ_DROP_ALONE = script(
    "shared drop",
    ALONE .. "if v == ARGV[1] then\n  redis.call('DEL', R, KEYS[1])\n  redis.pcall('PUBLISH', '" .. CHANNEL .. "' .. KEYS[1], '')\n  return 1\nend\nif v == '" .. _M.MARK .. "' and redis.call('ZSCORE', R, ARGV[1]) then\n  leave()\n  return 1\nend\nreturn 0\n",
    2,
    nil,
    nil,
    scripts.FREES
)
--- KEYS[1] lock, KEYS[2] readers, KEYS[3] queue; ARGV[1] token. 1 when our live
-- reader's place was given back; the last reader out hands the key on (then
-- the token of the writer it went to, as RELEASE_QUEUED); 0 when not ours (or
-- run out: then it is only tidied away). A MARK left with no live reader, ours
-- or not, is freed: a writer would otherwise find the key busy until it expires.
_M.READ_RELEASE = script(
    "shared release",
    scripts.QUEUE .. scripts.LINE .. READERS .. "clock()\nif redis.call('GET', KEYS[1]) ~= MARK then return 0 end\nlocal exp = redis.call('ZSCORE', R, ARGV[1])\nlocal live = exp ~= false and tonumber(exp) > now\nif step_out(ARGV[1], live) then return live and 1 or 0 end\nif redis.call('EXISTS', Q) == 0 then\n  redis.call('DEL', KEYS[1])\n  return live and 1 or 0\nend\nlocal r = hand_on()\nif live then return r end\nreturn 0\n",
    3,
    nil,
    READ_RELEASE_ALONE,
    scripts.FREES
)
local EXTEND = "local R = KEYS[2]\nif redis.call('GET', KEYS[1]) ~= '" .. _M.MARK .. "' then return 0 end\nlocal t = redis.call('TIME')\nlocal now = t[1] * 1000 + math.floor(t[2] / 1000)\nlocal exp = redis.call('ZSCORE', R, ARGV[1])\nif not exp or tonumber(exp) <= now then\n  redis.call('ZREM', R, ARGV[1])\n  return 0\nend\nredis.call('ZADD', R, 'XX', now + tonumber(ARGV[2]), ARGV[1])\nlocal last = redis.call('ZRANGE', R, -1, -1, 'WITHSCORES')\nredis.call('PEXPIREAT', R, last[2])\nredis.call('PEXPIREAT', KEYS[1], last[2])\nreturn 1\n"
--- KEYS[1] lock, KEYS[2] readers, KEYS[3] queue; ARGV[1] token, ARGV[2] ttl ms.
-- 1 when our live reader's lease now ends ttl ms from now (the key follows the
-- latest reader), else 0. KEYS[3] is not read: the form without it is the same script.
_M.READ_EXTEND = script(
    "shared extend",
    EXTEND,
    3,
    scripts.isOne,
    script("shared extend", EXTEND, 2, scripts.isOne, nil, scripts.FREES),
    scripts.FREES
)
--- KEYS[1] lock, KEYS[2] readers, KEYS[3] queue; ARGV[1] token: a reader that
-- is gone (gave up, its reply lost). Its ticket leaves the line; a key handed
-- to it, or its place among the readers (taken or reserved), is given back,
-- the last reader's handing the key on. Replies as scripts.DROP.
_M.READ_DROP = script(
    "shared drop",
    scripts.QUEUE .. scripts.LINE .. READERS .. "clock()\n" .. scripts.LEAVE .. "local v = redis.call('GET', KEYS[1])\nif v == ARGV[1] then\n  redis.call('DEL', R)\n  return hand_on()\nend\nlocal exp = v == MARK and redis.call('ZSCORE', R, ARGV[1])\nif exp then\n  if step_out(ARGV[1], tonumber(exp) > now) then return 1 end\n  return hand_on()\nend\nreturn dropped\n",
    3,
    nil,
    READ_DROP_ALONE,
    scripts.FREES
)
_M.READ_ACQUIRE.undo = _M.READ_DROP
_M.READ_ACQUIRE_FENCED.undo = _M.READ_DROP
return _M
