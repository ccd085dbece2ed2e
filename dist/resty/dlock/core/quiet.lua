-- Generated from src/resty/dlock/core/quiet.ts by TypeScriptToLua: edit that file, not this one.
-- Log lines that an outage would otherwise write once per lease or request
-- (a release or a renewal Redis did not answer, a cleanup given up, a full
-- shared dict, a key that cannot be computed): the first is logged at once,
-- then at most one per interval, saying how many it stands for. A thousand
-- requests in flight when Redis goes away make one line per worker and
-- interval, not a thousand; the guards' counters still count every one.
-- And where one pass settles many keys at once (a cleanup sweep, a dead
-- worker's leases), one line names a few of them and counts the rest.
local _M = {}
local clock = require("resty.dlock.core.clock")
local clock_now = clock.now
local lua_tostring = tostring
local NEVER = -math.huge
--- Seconds between two lines of one kind, per worker (gateway/key.lua has its own). Settable for tests.
local settings = {interval = 10}
local function make()
    return {at = NEVER, count = 0}
end
--- One more of q's kind: how many the line to log now stands for (this one
-- included), or 0 while the interval since the last line lasts (then nothing
-- is logged, and the next line counts this one too).
local function due(q, interval)
    q.count = q.count + 1
    local now = clock_now()
    if now - q.at < (interval or settings.interval) then
        return 0
    end
    local n = q.count
    q.at = now
    q.count = 0
    return n
end
--- due() for the line of `name` (a guard) in set qs.
local function dueFor(qs, name)
    local q = qs[name]
    if q == nil then
        q = make()
        qs[name] = q
    end
    return due(q)
end
--- Keys a tally names at most; the rest it counts.
local NAMED = 3
local function tally()
    return {count = 0, names = ""}
end
local function add(t, key)
    t.count = t.count + 1
    if t.count == 1 then
        t.names = key
    elseif t.count <= NAMED then
        t.names = t.names .. ", " .. key
    end
end
--- "a, b, c and 41 more".
local function named(t)
    if t.count <= NAMED then
        return t.names
    end
    return t.names .. " and " .. lua_tostring(t.count - NAMED) .. " more"
end
--- What a line standing for n says of the ones it stands for: " (and N more like it ...)", or "" for itself alone.
local function more(n)
    if n <= 1 then
        return ""
    end
    return " (and " .. lua_tostring(n - 1) .. " more like it in this worker since the last such line)"
end
-- Exported by name: this module's own uses of them are locals, not lookups in its exports table.
_M.make = make
_M.due = due
_M.dueFor = dueFor
_M.more = more
_M.tally = tally
_M.add = add
_M.named = named
_M.settings = settings
return _M
