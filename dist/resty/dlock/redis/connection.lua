-- Generated from src/resty/dlock/redis/connection.ts by TypeScriptToLua: edit that file, not this one.
-- The one way a connection to Redis is made and handed back: the client
-- library, the pool, a fresh connection's setup (TLS, AUTH, SELECT: setup.lua;
-- ROLE behind Sentinel: master.lua; the eviction check), and the client's socket, which
-- the transport (roundtrip.lua, pipeline.lua) and the wake-up subscriber read
-- and write themselves. Sentinels are reached through open() below.
local _M = {}
local clock = require("resty.dlock.core.clock")
local schema = require("resty.dlock.core.schema")
local redis = require("resty.dlock.redis.client")
local eviction = require("resty.dlock.redis.eviction")
local hints = require("resty.dlock.redis.hints")
local master = require("resty.dlock.redis.master")
local sentinel = require("resty.dlock.redis.sentinel")
local setup = require("resty.dlock.redis.setup")
local client = redis.library
local hasTimeouts = redis.hasTimeouts
local lua_tostring = tostring
local lua_rawget = rawget
local sentinel_cached = sentinel.cached
local sentinel_discover = sentinel.discover
local sentinel_forget = sentinel.forget
local setup_run = setup.run
local tls_port = hints.tlsPort
local unconnected = hints.unconnected
local unreachableSocket = hints.unreachableSocket
local announced_by = hints.announced
local eviction_check = eviction.check
local named = schema.named
local thread_spawn = ngx.thread.spawn
local thread_wait = ngx.thread.wait
local thread_kill = ngx.thread.kill
local lua_pcall = pcall
local clock_now = clock.now
local semaphore = require("ngx.semaphore")
local sem_new = semaphore.new
--- Per pool (an address and how it is reached) or sentinel, when a connect to
-- it was last refused. For REFUSED s after that the same refusal is answered
-- without dialing: a server that is gone is not dialed again by every call (dozens
-- a millisecond, each an [error] line of nginx's). Only a refusal counts: a
-- timeout took its time already, and a guard's breaker takes it from there.
local refusedAt = {}
local REFUSED = 0.1
local REFUSED_ERR = "connection refused"
--- Did `at` refuse a connect less than REFUSED s ago? (An older refusal is forgotten.)
local function refusedLately(at)
    local refused = refusedAt[at]
    if refused == nil then
        return false
    end
    if clock_now() - refused < REFUSED then
        return true
    end
    refusedAt[at] = nil
    return false
end
--- The server may no longer be the master (a connection error, READONLY,
-- LOADING): with Sentinel, ask the sentinels again on the next connection.
local function stale(conf)
    if conf.sentinel ~= nil then
        sentinel_forget(conf.pool)
    end
end
--- The client's cosocket. Both lua-resty-redis 0.27 and 0.33 keep it in the
-- private `_sock` field; this is the one place that knows.
local function socket(red)
    -- A local, then the return: a trace that starts here cannot return through a
    -- tail call into a builtin, and LuaJIT would blacklist this (core/clock.lua).
    local sock = lua_rawget(red, "_sock")
    return sock
end
local function connectThen(red, target, portOrOpts, opts, done)
    local ok, err = red:connect(target, portOrOpts, opts)
    done:post(1)
    return ok, err
end
-- Semaphores of connects that ended in time, each with no resource left.
local spare = {}
local spares = 0
local SPARES = 64
--- red.connect, bounded by `timeout` (ms) as a whole where nginx resolves the
-- host: its resolver waits up to resolver_timeout (30 s unless set), which
-- the socket's connect timeout does not cover, so a DNS server that stops
-- answering would hold each fresh connection, and the request behind it, that
-- long. The connect runs in a light thread, killed at the timeout (nginx then
-- drops the query). A pooled connection, found before any resolving, comes
-- back before the thread yields; an address connects as it is.
local function dial(red, target, portOrOpts, opts, timeout)
    if not named(target) then
        return red:connect(target, portOrOpts, opts)
    end
    local done
    if spares > 0 then
        done = spare[spares]
        spare[spares] = nil
        spares = spares - 1
    else
        done = sem_new(0)
    end
    -- ngx.thread.spawn raises where there are no light threads: connect unbounded there.
    local spawned, co = lua_pcall(thread_spawn, connectThen, red, target, portOrOpts, opts, done)
    if not spawned then
        return red:connect(target, portOrOpts, opts)
    end
    local thread = co
    local posted = done:wait(timeout / 1000)
    if not posted then
        local killed = thread_kill(thread)
        if killed ~= nil then
            return nil, "timeout: " .. target .. " was not resolved and connected within connect_timeout (" .. lua_tostring(timeout) .. " ms): nginx's resolver may not be answering (it waits up to its resolver_timeout)"
        end
        -- It ended as the wait did: its outcome stands, and its post is left on the semaphore.
        done = nil
    end
    if done ~= nil and spares < SPARES then
        spares = spares + 1
        spare[spares] = done
    end
    local ran, ok, err = thread_wait(thread)
    -- A raise in the thread leaves its message where the result would be.
    if not ran then
        return nil, lua_tostring(ok)
    end
    return ok, err
end
--- A fresh, unpooled connection to a sentinel (sentinel.lua sets it up with the
-- sentinels' own credentials): the client and its socket, or the error.
local function open(host, port, timeout)
    local at = "sentinel " .. host .. ":" .. lua_tostring(port)
    if refusedLately(at) then
        return nil, nil, unconnected(REFUSED_ERR)
    end
    local red, nerr = client:new()
    if red == nil then
        return nil, nil, lua_tostring(nerr)
    end
    red:set_timeout(timeout)
    local ok, err = dial(red, host, port, nil, timeout)
    if ok == nil then
        if err == REFUSED_ERR then
            refusedAt[at] = clock_now()
        end
        return nil, nil, unconnected(err)
    end
    return red, socket(red), nil
end
--- A connect to host:port failed with err: the error that names the endpoint (and, behind Sentinel, the master).
local function unreached(conf, host, port, err)
    stale(conf)
    local why = unconnected(err)
    if conf.sentinel ~= nil then
        -- The master the sentinels named: which one, for an operator reading this during a failover.
        return nil, "dlock: redis " .. conf.endpoint .. ": master " .. host .. ":" .. lua_tostring(port) .. ": " .. why .. announced_by(why, hints.BY_SENTINELS)
    end
    return nil, "dlock: redis " .. conf.endpoint .. ": " .. why .. announced_by(why, conf.announced)
end
--- A ready connection from the pool (or a fresh one, authenticated and with the
-- db selected). Errors name the endpoint: "dlock: redis 127.0.0.1:6379: connection refused".
function _M.connect(conf)
    local host = conf.host
    local port = conf.port
    local pool = conf.pool
    if conf.sentinel ~= nil then
        local m = sentinel_cached(conf.pool)
        if m == nil then
            local found, serr = sentinel_discover(conf.pool, conf.sentinel, open, conf.connect_timeout, conf)
            if found == nil then
                return nil, serr
            end
            m = found
        end
        host = m.host
        port = m.port
        -- One pool per master: connections to a demoted one are never handed out again.
        pool = conf.pool .. "@" .. host .. ":" .. lua_tostring(port)
    end
    if refusedLately(pool) then
        return unreached(conf, host, port, REFUSED_ERR)
    end
    local red, nerr = client:new()
    if red == nil then
        return nil, "dlock: redis client: " .. lua_tostring(nerr)
    end
    -- Never touch red.set_timeouts on 0.27: its __index would turn the name into a Redis command.
    if hasTimeouts then
        red:set_timeouts(conf.connect_timeout, conf.read_timeout, conf.read_timeout)
    else
        red:set_timeout(conf.connect_timeout)
    end
    local opts = {pool = pool, pool_size = conf.pool_size, backlog = conf.backlog}
    local ok
    local err
    if conf.path ~= nil then
        ok, err = red:connect(conf.path, opts)
        if ok == nil then
            return nil, "dlock: redis " .. conf.endpoint .. ": " .. unreachableSocket(err)
        end
    else
        ok, err = dial(red, host, port, opts, conf.connect_timeout)
    end
    if ok == nil then
        if err == REFUSED_ERR then
            refusedAt[pool] = clock_now()
        end
        return unreached(conf, host, port, err)
    end
    if not hasTimeouts then
        red:set_timeout(conf.read_timeout)
    end
    local reused = red:get_reused_times()
    if reused == 0 then
        -- TLS, AUTH and SELECT first: a server with a password answers anything else with NOAUTH.
        local ierr = setup_run(
            red,
            socket(red),
            conf.sentinel ~= nil and master.setupOf(conf, host, port) or conf
        )
        if ierr == nil and conf.sentinel ~= nil then
            ierr = master.isMaster(red, conf, host, port)
        end
        -- With Sentinel, each master it names is checked on its own: a failover can
        -- land on a server configured differently.
        if ierr == nil then
            ierr = eviction_check(red, conf.sentinel ~= nil and master.confOf(conf, host, port) or conf)
        end
        if ierr ~= nil then
            red:close()
            return nil, ierr .. tls_port(ierr, conf.ssl, "redis.ssl")
        end
    end
    return red, nil
end
--- Let the next read on red wait `ms` longer than read_timeout: a WAIT blocks in Redis for up to replicas_timeout.
function _M.readLonger(red, conf, ms)
    if hasTimeouts then
        red:set_timeouts(conf.connect_timeout, conf.read_timeout, conf.read_timeout + ms)
    else
        red:set_timeout(conf.read_timeout + ms)
    end
end
--- Hand the connection back. After a network error lua-resty-redis has already
-- closed the socket (a read timeout closes it), so only healthy ones are pooled.
function _M.done(red, conf, healthy)
    if healthy then
        red:set_keepalive(conf.keepalive_timeout, conf.pool_size)
    else
        red:close()
        stale(conf)
    end
end
-- Exported by name: this module's own uses of them are locals, not lookups in its exports table.
_M.socket = socket
_M.stale = stale
return _M
