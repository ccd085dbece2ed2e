--[[ Generated with https://github.com/TypeScriptToLua/TypeScriptToLua ]]
local ____exports = {}
local shake, handshake, init, isMaster, known
local check = require("resty.dlock.check")
local eviction = require("resty.dlock.eviction")
local sentinel = require("resty.dlock.sentinel")
--- One server of a cluster or a Redlock set: the settings of `conf` (credentials,
-- TLS, timeouts, pools per endpoint) for host:port alone.
function ____exports.node(conf, host, port)
    local endpoint = (host .. ":") .. tostring(port)
    local tls = ""
    if conf.ssl then
        tls = conf.ssl_verify and ("tls+verify=" .. (conf.server_name or "")) .. ":" or "tls:"
    end
    local pool = ((("dlock:" .. tls) .. endpoint) .. ":") .. tostring(conf.db)
    if conf.password ~= nil then
        pool = (pool .. ":") .. string.sub(
            ngx.md5(((conf.username or "") .. "\0") .. conf.password),
            1,
            16
        )
    end
    return {
        host = host,
        port = port,
        path = nil,
        username = conf.username,
        password = conf.password,
        db = conf.db,
        connect_timeout = conf.connect_timeout,
        read_timeout = conf.read_timeout,
        pool_size = conf.pool_size,
        backlog = conf.backlog,
        replicas = conf.replicas,
        replicas_timeout = conf.replicas_timeout,
        keepalive_timeout = conf.keepalive_timeout,
        ssl = conf.ssl,
        ssl_verify = conf.ssl_verify,
        server_name = conf.server_name,
        pool = pool,
        endpoint = endpoint,
        dict = conf.dict,
        sentinel = nil,
        topology = "standalone",
        nodes = nil,
        max_redirects = conf.max_redirects
    }
end
function shake(sock, serverName, verify)
    return sock:sslhandshake(nil, serverName, verify)
end
function handshake(red, conf)
    local sock = rawget(red, "_sock")
    if sock == nil then
        return ("dlock: redis " .. conf.endpoint) .. ": TLS: the Redis client has no socket"
    end
    local ok, session, err = pcall(shake, sock, conf.server_name, conf.ssl_verify)
    if not ok or session == nil then
        local why = session
        if ok then
            why = err
        end
        return (("dlock: redis " .. conf.endpoint) .. ": TLS handshake failed: ") .. check.text(why)
    end
    local pong, perr = red:ping()
    if pong ~= "PONG" then
        return (("dlock: redis " .. conf.endpoint) .. ": TLS handshake failed: ") .. tostring(perr or pong)
    end
    return nil
end
function init(red, conf)
    if conf.password ~= nil then
        local args = conf.username ~= nil and ({conf.username, conf.password}) or ({conf.password})
        local ok, err = red:auth(unpack(args))
        if not ok then
            return (((("dlock: redis " .. conf.endpoint) .. ": authentication failed for user ") .. (conf.username or "default")) .. ": ") .. tostring(err)
        end
    end
    if conf.db ~= 0 then
        local ok, err = red:select(conf.db)
        if not ok then
            return (((("dlock: redis " .. conf.endpoint) .. ": SELECT ") .. tostring(conf.db)) .. " failed: ") .. tostring(err)
        end
    end
    return nil
end
--- The server may no longer be the master (a connection error, READONLY,
-- LOADING): with Sentinel, ask the sentinels again on the next connection.
function ____exports.stale(conf)
    if conf.sentinel ~= nil then
        sentinel.forget(conf.pool)
    end
end
function isMaster(red, conf, host, port)
    local role, err = red:role()
    if type(role) == "table" and role[1] == "master" then
        return nil
    end
    sentinel.forget(conf.pool)
    local what = type(role) == "table" and "a " .. tostring(role[1]) or tostring(err)
    return ((((((("dlock: redis " .. conf.endpoint) .. ": ") .. host) .. ":") .. tostring(port)) .. " is ") .. what) .. ", not the master (a failover is under way); asking the sentinels again"
end
local function loadClient()
    for ____, name in ipairs({"resty.redis", "nginx.redis"}) do
        local ok, mod = pcall(require, name)
        if ok and type(mod) == "table" then
            return mod
        end
    end
    return nil
end
local client = loadClient()
local clientHasTimeouts = client ~= nil and rawget(client, "set_timeouts") ~= nil
local REDIS_OPTIONS = check.set(
    "host",
    "port",
    "path",
    "username",
    "password",
    "db",
    "connect_timeout",
    "read_timeout",
    "pool_size",
    "backlog",
    "keepalive_timeout",
    "ssl",
    "ssl_verify",
    "server_name",
    "replicas",
    "replicas_timeout",
    "sentinel",
    "cluster",
    "redlock"
)
local CLUSTER_OPTIONS = check.set("nodes", "max_redirects")
local MAX_MS = 3600000
--- Validate the `redis` option table of dlock.new and friends. `dict` is the
-- factory's lua_shared_dict: the eviction finding is shared there.
function ____exports.parse(v, dict)
    if client == nil then
        return nil, "dlock: no Redis client library: install lua-resty-redis (resty.redis) or Debian's lua-nginx-redis (nginx.redis)"
    end
    local o, oerr = check.options("redis", v, REDIS_OPTIONS)
    if o == nil then
        return nil, oerr
    end
    local host = "127.0.0.1"
    local port = 6379
    local path
    local sent
    local seeds
    local maxRedirects = 5
    local topology = "standalone"
    local exclusive = {
        "host",
        "port",
        "path",
        "sentinel",
        "cluster",
        "redlock"
    }
    for ____, a in ipairs({"sentinel", "cluster", "redlock"}) do
        if o[a] ~= nil then
            for ____, b in ipairs(exclusive) do
                if b ~= a and o[b] ~= nil and not (a == "sentinel" and b == "sentinel") then
                    return check.fail((("redis." .. a) .. " excludes redis.") .. b, o[b])
                end
            end
        end
    end
    if o.cluster ~= nil then
        local c, cerr = check.options("redis.cluster", o.cluster, CLUSTER_OPTIONS)
        if c == nil then
            return nil, cerr
        end
        local list, lerr = sentinel.parseNodes("redis.cluster.nodes", c.nodes)
        if list == nil then
            return nil, lerr
        end
        seeds = list
        if c.max_redirects ~= nil then
            local n, err = check.integer(
                "redis.cluster.max_redirects",
                c.max_redirects,
                1,
                16,
                "a positive integer"
            )
            if n == nil then
                return nil, err
            end
            maxRedirects = n
        end
        if o.db ~= nil and o.db ~= 0 then
            return check.fail("redis.db is refused with redis.cluster (Redis Cluster has one database)", o.db)
        end
        topology = "cluster"
    elseif o.redlock ~= nil then
        local list, lerr = sentinel.parseNodes("redis.redlock", o.redlock)
        if list == nil then
            return nil, lerr
        end
        if #list < 3 then
            return check.fail("redis.redlock needs at least 3 independent masters", #list)
        end
        seeds = list
        topology = "redlock"
    elseif o.sentinel ~= nil then
        if o.host ~= nil or o.port ~= nil or o.path ~= nil then
            return check.fail("redis.sentinel excludes redis.host, redis.port and redis.path", o.sentinel)
        end
        local sc, serr = sentinel.parse(o.sentinel)
        if sc == nil then
            return nil, serr
        end
        sent = sc
        topology = "sentinel"
    elseif o.path ~= nil then
        if o.host ~= nil or o.port ~= nil then
            return check.fail("redis.path excludes redis.host and redis.port", o.path)
        end
        local p, err = check.str("redis.path", o.path, 4096)
        if p == nil then
            return nil, err
        end
        if string.sub(p, 1, 5) ~= "unix:" then
            return check.fail("redis.path must start with \"unix:\"", p)
        end
        path = p
        topology = "unix"
    else
        if o.host ~= nil then
            local h, err = check.str("redis.host", o.host, 255)
            if h == nil then
                return nil, err
            end
            host = h
        end
        if o.port ~= nil then
            local p, err = check.integer(
                "redis.port",
                o.port,
                1,
                65535,
                "an integer port number"
            )
            if p == nil then
                return nil, err
            end
            port = p
        end
    end
    local username
    local password
    if o.username ~= nil then
        local u, err = check.str("redis.username", o.username, 1024)
        if u == nil then
            return nil, err
        end
        username = u
    end
    if o.password ~= nil then
        if type(o.password) ~= "string" then
            return nil, "dlock: redis.password must be a string, got a " .. type(o.password)
        end
        password = o.password
    end
    if username ~= nil and password == nil then
        return nil, "dlock: redis.username needs redis.password"
    end
    local ints = {}
    local defaults = {
        {
            "db",
            0,
            0,
            1000000,
            "a non-negative integer"
        },
        {
            "connect_timeout",
            1000,
            1,
            MAX_MS,
            "a positive integer of ms"
        },
        {
            "read_timeout",
            1000,
            1,
            MAX_MS,
            "a positive integer of ms"
        },
        {
            "pool_size",
            64,
            1,
            100000,
            "a positive integer"
        },
        {
            "keepalive_timeout",
            60000,
            0,
            MAX_MS,
            "a non-negative integer of ms"
        }
    }
    for ____, ____value in ipairs(defaults) do
        local name = ____value[1]
        local dflt = ____value[2]
        local min = ____value[3]
        local max = ____value[4]
        local unit = ____value[5]
        local v = o[name]
        if v == nil then
            ints[name] = dflt
        else
            local n, err = check.integer(
                "redis." .. name,
                v,
                min,
                max,
                unit
            )
            if n == nil then
                return nil, err
            end
            ints[name] = n
        end
    end
    local backlog
    if o.backlog ~= nil then
        local n, err = check.integer(
            "redis.backlog",
            o.backlog,
            0,
            100000,
            "a non-negative integer"
        )
        if n == nil then
            return nil, err
        end
        backlog = n
    end
    local replicas = 0
    if o.replicas ~= nil then
        local n, err = check.integer(
            "redis.replicas",
            o.replicas,
            0,
            100,
            "a non-negative integer"
        )
        if n == nil then
            return nil, err
        end
        replicas = n
    end
    local replicasTimeout = 50
    if o.replicas_timeout ~= nil then
        if replicas == 0 then
            return check.fail("redis.replicas_timeout needs redis.replicas > 0", o.replicas_timeout)
        end
        local n, err = check.integer(
            "redis.replicas_timeout",
            o.replicas_timeout,
            1,
            MAX_MS,
            "a positive integer of ms"
        )
        if n == nil then
            return nil, err
        end
        replicasTimeout = n
    end
    local ssl = false
    local sslVerify = false
    local serverName
    if o.ssl ~= nil then
        local b, err = check.bool("redis.ssl", o.ssl)
        if b == nil then
            return nil, err
        end
        ssl = b
    end
    if o.ssl_verify ~= nil then
        local b, err = check.bool("redis.ssl_verify", o.ssl_verify)
        if b == nil then
            return nil, err
        end
        sslVerify = b
    end
    if o.server_name ~= nil then
        local s, err = check.str("redis.server_name", o.server_name, 255)
        if s == nil then
            return nil, err
        end
        serverName = s
    end
    if not ssl and (sslVerify or serverName ~= nil) then
        return nil, "dlock: redis.ssl_verify and redis.server_name need redis.ssl = true"
    end
    local endpoint = path or (host .. ":") .. tostring(port)
    if sent ~= nil then
        endpoint = "sentinel " .. sent.master
    elseif seeds ~= nil then
        local names = {}
        for ____, n in ipairs(seeds) do
            names[#names + 1] = (n.host .. ":") .. tostring(n.port)
        end
        endpoint = (topology .. " ") .. table.concat(names, ",")
    end
    local db = ints.db
    local tls = ""
    if ssl then
        tls = sslVerify and ("tls+verify=" .. (serverName or "")) .. ":" or "tls:"
    end
    local pool = ((("dlock:" .. tls) .. endpoint) .. ":") .. tostring(db)
    if sent ~= nil then
        pool = (pool .. ":") .. sent.id
    end
    if password ~= nil then
        pool = (pool .. ":") .. string.sub(
            ngx.md5(((username or "") .. "\0") .. password),
            1,
            16
        )
    end
    local conf = {
        host = host,
        port = port,
        path = path,
        username = username,
        password = password,
        db = db,
        connect_timeout = ints.connect_timeout,
        read_timeout = ints.read_timeout,
        pool_size = ints.pool_size,
        backlog = backlog,
        replicas = replicas,
        replicas_timeout = replicasTimeout,
        keepalive_timeout = ints.keepalive_timeout,
        ssl = ssl,
        ssl_verify = sslVerify,
        server_name = serverName,
        pool = pool,
        endpoint = endpoint,
        dict = dict,
        sentinel = sent,
        topology = topology,
        nodes = nil,
        max_redirects = maxRedirects
    }
    if seeds ~= nil then
        local nodes = {}
        for ____, n in ipairs(seeds) do
            nodes[#nodes + 1] = ____exports.node(conf, n.host, n.port)
        end
        conf.nodes = nodes
    end
    if not (known[endpoint] ~= nil) then
        known[endpoint] = conf
    end
    return conf, nil
end
--- Per endpoint, the first configuration seen for it: what status pages show of the topology.
known = {}
--- The Redis endpoints factories of this worker were made for (bounded by distinct configurations).
function ____exports.endpoints()
    return known
end
--- A ready connection from the pool (or a fresh one, authenticated and with the
-- db selected). Errors name the endpoint: "dlock: redis 127.0.0.1:6379: connection refused".
function ____exports.connect(conf)
    local red, nerr = client:new()
    if red == nil then
        return nil, "dlock: redis client: " .. tostring(nerr)
    end
    if clientHasTimeouts then
        red:set_timeouts(conf.connect_timeout, conf.read_timeout, conf.read_timeout)
    else
        red:set_timeout(conf.connect_timeout)
    end
    local host = conf.host
    local port = conf.port
    local pool = conf.pool
    if conf.sentinel ~= nil then
        local m = sentinel.cached(conf.pool)
        if m == nil then
            local found, serr = sentinel.discover(conf.pool, conf.sentinel, client, conf.connect_timeout)
            if found == nil then
                return nil, serr
            end
            m = found
        end
        host = m.host
        port = m.port
        pool = (((conf.pool .. "@") .. host) .. ":") .. tostring(port)
    end
    local opts = {pool = pool, pool_size = conf.pool_size, backlog = conf.backlog}
    local ok, err = red:connect(conf.path or host, conf.path ~= nil and opts or port, opts)
    if ok == nil then
        ____exports.stale(conf)
        return nil, (("dlock: redis " .. conf.endpoint) .. ": ") .. tostring(err)
    end
    if not clientHasTimeouts then
        red:set_timeout(conf.read_timeout)
    end
    local reused = red:get_reused_times()
    if reused == 0 then
        local ierr
        if conf.ssl then
            ierr = handshake(red, conf)
        end
        if ierr == nil and conf.sentinel ~= nil then
            ierr = isMaster(red, conf, host, port)
        end
        if ierr == nil then
            ierr = init(red, conf)
        end
        if ierr == nil then
            ierr = eviction.check(red, conf)
        end
        if ierr ~= nil then
            red:close()
            return nil, ierr
        end
    end
    return red, nil
end
--- Hand the connection back. After a network error lua-resty-redis has already
-- closed the socket (a read timeout closes it), so only healthy ones are pooled.
function ____exports.done(red, conf, healthy)
    if healthy then
        red:set_keepalive(conf.keepalive_timeout, conf.pool_size)
    else
        red:close()
        ____exports.stale(conf)
    end
end
return ____exports
