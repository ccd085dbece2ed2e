-- Generated from src/resty/dlock/redis/sentinel.ts by TypeScriptToLua: edit that file, not this one.
-- Redis Sentinel: which server is the master of `redis.sentinel.master` now?
-- Asked of the sentinels in order (one that answers moves to the front), then
-- confirmed with ROLE on the server itself before use: a master just demoted by
-- a failover still answers, and must not take locks. The answer is cached per
-- worker and forgotten on connection errors, READONLY and LOADING, so after a
-- failover locks resume on the new master without an nginx reload.
local _M = {}
local schema = require("resty.dlock.core.schema")
local hints = require("resty.dlock.redis.hints")
local setup = require("resty.dlock.redis.setup")
local clock = require("resty.dlock.core.clock")
local question = require("resty.dlock.core.question")
local lua_tonumber = tonumber
local lua_tostring = tostring
local lua_type = type
local literal = schema.literal
local clock_now = clock.now
local ngx_null = ngx.null
local str_len = string.len
local str_sub = string.sub
local tbl_concat = table.concat
local tbl_insert = table.insert
local tbl_remove = table.remove
local underway = question.underway
local tls_port = hints.tlsPort
local away_why = hints.awayWhy
--- The `redis.sentinel` table (README's table is checked against it: spec/options_spec.lua).
_M.SENTINEL = {
    {name = "master", kind = "string", maxLen = 255, required = true},
    {name = "nodes", kind = "nodes", required = true},
    {name = "username", kind = "string", maxLen = 1024, requires = {{option = "password", must = "set"}}},
    {name = "password", kind = "string", secret = true},
    {name = "ssl", kind = "boolean", doc = "as `redis.ssl`"}
}
local validate = schema.compile("redis.sentinel", _M.SENTINEL)
--- The `redis.sentinel` option table.
function _M.parse(v)
    local o, err = validate(v)
    if o == nil then
        return nil, err
    end
    local names = {}
    for i = 1, #o.nodes do
        names[#names + 1] = o.nodes[i].host .. ":" .. lua_tostring(o.nodes[i].port)
    end
    -- A TLS setting of the sentinels' own is part of the id (the factory's is in its pool name already): a
    -- factory that reaches them otherwise never rides on another's answers, right or wrong.
    local id = tbl_concat(names, ",")
    if o.ssl ~= nil then
        id = id .. (o.ssl and "+tls" or "+plain")
    end
    return {
        master = o.master,
        id = id,
        nodes = o.nodes,
        credentials = setup.credentials(o.username, o.password),
        ssl = o.ssl
    }, nil
end
--- Seconds a worker trusts the sentinels' last answer. A failover is announced
-- by the sentinels at once, but the old master goes on taking writes for
-- several seconds before it is demoted: asking again every second moves every
-- worker to the new master within a second, without waiting for an error.
local FRESH = 1
--- Per worker: the master found for a sentinel set (by pool name), and when.
local masters = {}
--- Per worker: the question to a pool's sentinels on its way, if any. A timer
-- asks it (core/question.lua): a request that asked itself and went away in
-- the middle left it open for good, and its worker on the previous master,
-- taking locks there after a failover.
local questions = {}
--- The master to use now: the sentinels' answer of less than FRESH seconds ago;
-- or, while the worker is asking them again, the previous answer (one
-- question per worker and second, not one per request in flight). nil: ask
-- (discover).
function _M.cached(pool)
    local m = masters[pool]
    if m == nil then
        return nil
    end
    if clock_now() - m.at <= FRESH or underway(questions[pool]) then
        return m.node
    end
    return nil
end
--- The master the sentinels named last (however long ago), for status pages.
function _M.last(pool)
    local m = masters[pool]
    return m and m.node
end
--- Forget the master of this pool: the next connection asks the sentinels again.
function _M.forget(pool)
    masters[pool] = nil
end
local function ask(pool, s, open, timeout, tls)
    local errors = {}
    local ssl = s.ssl
    if ssl == nil then
        ssl = tls.ssl
    end
    for i = 1, #s.nodes do
        local node = s.nodes[i]
        local endpoint = node.host .. ":" .. lua_tostring(node.port)
        local red, sock, cerr = open(node.host, node.port, timeout)
        local why = lua_tostring(cerr)
        if red ~= nil then
            -- The sentinel's own TLS and credentials, in the order every server accepts.
            local serr = setup.run(red, sock, {
                endpoint = "sentinel " .. endpoint,
                host = node.host,
                ssl = ssl,
                ssl_verify = tls.ssl_verify,
                server_name = tls.server_name,
                client_cert = tls.client_cert,
                credentials = s.credentials,
                db = 0,
                asSentinel = true
            })
            if serr == nil then
                local addr, aerr = red:sentinel("get-master-addr-by-name", s.master)
                red:close()
                if lua_type(addr) == "table" then
                    local t = addr
                    local port = lua_tonumber(t[2])
                    if port ~= nil then
                        -- Ask this one first next time.
                        if i > 1 then
                            tbl_remove(s.nodes, i)
                            tbl_insert(s.nodes, 1, node)
                        end
                        local m = {host = literal(t[1]), port = port}
                        masters[pool] = {node = m, at = clock_now()}
                        return m, nil
                    end
                end
                if addr == ngx_null then
                    why = "does not know master " .. s.master
                else
                    local away = away_why(aerr, "redis.sentinel.password")
                    why = away ~= nil and away or lua_tostring(aerr or addr)
                end
            else
                red:close()
                -- setup's message names the sentinel already; keep only why.
                why = str_sub(serr, str_len("dlock: redis sentinel " .. endpoint .. ": ") + 1)
            end
        end
        errors[#errors + 1] = endpoint .. " " .. why .. tls_port(why, ssl, "redis.sentinel.ssl")
    end
    return nil, "dlock: redis sentinel " .. s.master .. ": no sentinel named the master (" .. tbl_concat(errors, "; ") .. ")"
end
local function askFor(a)
    return ask(a.pool, a.s, a.dial, a.timeout, a.tls)
end
--- Ask the sentinels for the master's address, over connections `dial` makes;
-- timeouts (ms) and TLS settings are the factory's. The question is a timer's,
-- asked once for every caller of the worker that waits for it; with no timer
-- to be had, the caller asks itself.
function _M.discover(pool, s, dial, timeout, tls)
    local q = questions[pool]
    if not underway(q) then
        -- Each sentinel: a connect, a handshake, AUTH and the question, each within timeout; and a second to start.
        local longest = #s.nodes * 4 * timeout / 1000 + 1
        q = question.start(longest, askFor, {pool = pool, s = s, dial = dial, timeout = timeout, tls = tls})
        if q == nil then
            return ask(pool, s, dial, timeout, tls)
        end
        questions[pool] = q
    end
    local m, err = question.answer(q, "redis sentinel " .. s.master)
    return m, err
end
return _M
