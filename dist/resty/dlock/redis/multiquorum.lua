-- Generated from src/resty/dlock/redis/multiquorum.ts by TypeScriptToLua: edit that file, not this one.
-- acquire_all under redis.redlock: the set's script (multiscripts.lua, keys
-- alone: Redlock locks do not queue) runs on every master at once, each master
-- taking every key or none, and the outcome is the majority's, as quorum.lua
-- decides a single key's: taken when a majority took the whole set within the
-- validity time (ttl minus the time it took minus the drift allowance), else
-- given back, owner-checked, on every master that took it. Sound for the
-- reason a single key is: whoever takes one of the keys after us needs it on
-- a majority, and any majority meets ours on a master where the key is ours
-- until it expires. Goes through backend.call and backend.batch on each
-- master's own (standalone) configuration, nothing else of the transport.
local _M = {}
local backend = require("resty.dlock.redis.backend")
local scripts = require("resty.dlock.redis.scripts")
local single = require("resty.dlock.redis.single")
local clock = require("resty.dlock.core.clock")
local clock_now = clock.now
local ngx_update_time = ngx.update_time
local thread_spawn = ngx.thread.spawn
local thread_wait = ngx.thread.wait
local math_floor = math.floor
local str_format = string.format
local table_sort = table.sort
local table_concat = table.concat
local lua_type = type
local lua_tostring = tostring
local lua_unpack = unpack
local function nowMs()
    ngx_update_time()
    return clock_now() * 1000
end
local function callOn(node, s, rkey, args)
    return single.backend.call(node, s, rkey, lua_unpack(args))
end
--- Run the set's acquire script s (rkey its first key, args the rest) on every
-- master of conf and decide: "OK" when a majority took every key in time;
-- { i, pttl } (busy: the first busy key's index as the masters said, and when
-- enough holders expire that the masters that answered could make a majority)
-- when a master that answered refused and no majority took the set; else an
-- error: "lost" when a master that did not answer, or could not give the keys
-- back, may hold them (the caller has them cleaned up everywhere), "transient"
-- otherwise. A busy answer says "lost" as its fault for the same reasons.
function _M.call(conf, s, rkey, args, rkeys, tok, ttl)
    local nodes = conf.nodes
    local n = #nodes
    local need = math_floor(n / 2) + 1
    local started = nowMs()
    local threads = {}
    for j = 2, n do
        threads[j] = thread_spawn(callOn, nodes[j], s, rkey, args)
    end
    local replies = {}
    local faults = {}
    local errors = {}
    for j = 1, n do
        local r
        local e
        local f
        if j == 1 then
            r, e, f = callOn(nodes[1], s, rkey, args)
        else
            local ok, r2, e2, f2 = thread_wait(threads[j])
            if ok then
                r, e, f = r2, e2, f2
            else
                r, e, f = nil, "dlock: redis " .. nodes[j].endpoint .. ": " .. lua_tostring(r2), "failed"
            end
        end
        if r ~= nil then
            replies[j] = r
        else
            faults[j] = f or "failed"
            errors[#errors + 1] = e or "dlock: redis " .. nodes[j].endpoint .. ": no reply"
        end
    end
    local took = 0
    for j = 1, n do
        if replies[j] == "OK" then
            took = took + 1
        end
    end
    local elapsed = nowMs() - started
    local drift = ttl - backend.validity(conf, ttl)
    if took >= need and elapsed + drift < ttl then
        return "OK", nil, nil
    end
    -- Not ours: give back what masters took, owner-checked.
    local undone = true
    local unknown = false
    local targets = {}
    for i = 1, #rkeys do
        targets[i] = {rkey = rkeys[i], token = tok}
    end
    for j = 1, n do
        if replies[j] == "OK" then
            local out = single.backend.batch(nodes[j], scripts.RELEASE, targets)
            for i = 1, #targets do
                if out.replies[i] == nil then
                    undone = false
                end
            end
        elseif faults[j] == "lost" then
            unknown = true
        end
    end
    local pttls = {}
    local first
    for j = 1, n do
        local r = replies[j]
        if lua_type(r) == "table" then
            local t = r
            if first == nil then
                first = t[1]
            end
            pttls[#pttls + 1] = t[2]
        end
    end
    local errs = #errors > 0 and " (" .. table_concat(errors, "; ") .. ")" or ""
    if #pttls > 0 and took < need then
        -- Someone else holds a key of the set where masters answered, and no
        -- majority said yes: busy, whatever the silent masters did (keys one of
        -- them took for us are a minority's, never a lease; fault "lost": the
        -- caller has them cleaned up). Told "lost", a waiting acquire_all ended at
        -- once while one master was paused.
        table_sort(pttls)
        local expire = need - took
        if expire > #pttls then
            expire = #pttls
        end
        local busy = {}
        busy[1] = first
        busy[2] = pttls[expire]
        return busy, nil, (not undone or unknown) and "lost" or nil
    end
    if not undone or unknown then
        return nil, str_format(
            "dlock: redis %s: took the keys on %d of %d masters, and some may still hold them%s",
            conf.endpoint,
            took,
            n,
            errs
        ), "lost"
    end
    if took >= need then
        return nil, str_format("dlock: redis %s: took the keys on a majority, but only after %d ms of a %d ms ttl", conf.endpoint, elapsed, ttl), "transient"
    end
    return nil, str_format(
        "dlock: redis %s: took the keys on %d of %d masters, a majority is %d%s",
        conf.endpoint,
        took,
        n,
        need,
        errs
    ), "transient"
end
return _M
