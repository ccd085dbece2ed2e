-- Generated from src/resty/dlock/redis/client.ts by TypeScriptToLua: edit that file, not this one.
-- The `redis` option table: what a factory's Redis is and how to reach it (a RedisConf),
-- and the client library. Configurations derived from it: derived.lua; connections:
-- connection.lua; the backend, once: backend.lua.
local _M = {}
local check = require("resty.dlock.core.check")
local clientcert = require("resty.dlock.redis.clientcert")
local derived = require("resty.dlock.redis.derived")
local setup = require("resty.dlock.redis.setup")
local schema = require("resty.dlock.core.schema")
local sentinel = require("resty.dlock.redis.sentinel")
local lua_tostring = tostring
local lua_require = require
local lua_pcall = pcall
local lua_rawget = rawget
local lua_type = type
local literal = schema.literal
local tbl_concat = table.concat
local str_format = string.format
local crc32_long = ngx.crc32_long
local function loadClient()
    -- OpenResty ships resty.redis; Debian ships the same library (0.27) as nginx.redis.
    local names = {"resty.redis", "nginx.redis"}
    for i = 1, #names do
        local ok, mod = lua_pcall(lua_require, names[i])
        if ok and lua_type(mod) == "table" then
            return mod
        end
    end
    return nil
end
--- The client library (connection.lua uses it); nil when neither is installed.
_M.library = loadClient()
-- set_timeouts arrived in lua-resty-redis 0.28 (with its `ssl` options, which 0.27
-- silently ignores: TLS is done on the socket, in setup.lua, for both).
_M.hasTimeouts = _M.library ~= nil and lua_rawget(_M.library, "set_timeouts") ~= nil
local MAX_MS = 3600000
--- Cluster: MOVED/ASK redirections followed per call when redis.cluster.max_redirects is not given.
local MAX_REDIRECTS = 5
--- The `redis.cluster` table (README's tables are checked against these: spec/options_spec.lua).
_M.CLUSTER = {{name = "nodes", kind = "nodes", required = true}, {
    name = "max_redirects",
    kind = "integer",
    min = 1,
    max = 16,
    unit = "a positive integer",
    default = MAX_REDIRECTS
}}
local clusterOptions = schema.compile("redis.cluster", _M.CLUSTER)
--- ssl_verify and server_name mean nothing without TLS: one message for both.
local NEEDS_SSL = {option = "ssl", must = "true", shared = {"ssl_verify", "server_name"}}
--- A client certificate is presented in a TLS handshake: none without TLS.
local CERT_NEEDS_SSL = {option = "ssl", must = "true", shared = {"ssl_client_cert", "ssl_client_priv_key"}}
--- Longest PEM text (or path) of a certificate chain or a key.
local MAX_PEM = 1048576
-- One address per factory: host and port, a socket path, sentinels, a cluster or Redlock masters.
_M.REDIS = {
    {name = "sentinel", kind = "table", table = sentinel.parse, excludes = {"host", "port", "path", "cluster", "redlock"}},
    {name = "cluster", kind = "table", table = clusterOptions, excludes = {"host", "port", "path", "sentinel", "redlock"}},
    {
        name = "redlock",
        kind = "nodes",
        min = 3,
        unit = "independent masters",
        excludes = {"host", "port", "path", "sentinel", "cluster"}
    },
    {
        name = "path",
        kind = "string",
        maxLen = 4096,
        prefix = "unix:",
        excludes = {"host", "port"},
        excludesAsOne = true
    },
    {name = "host", kind = "string", maxLen = 255, host = true, default = "127.0.0.1"},
    {
        name = "port",
        kind = "integer",
        min = 1,
        max = 65535,
        unit = "an integer port number",
        default = 6379
    },
    {name = "username", kind = "string", maxLen = 1024, requires = {{option = "password", must = "set"}}},
    {name = "password", kind = "string", secret = true},
    {
        name = "db",
        kind = "integer",
        min = 0,
        max = 1000000,
        unit = "a non-negative integer",
        default = 0,
        idle = 0,
        requires = {{option = "cluster", must = "unset", why = "Redis Cluster has one database"}}
    },
    {
        name = "connect_timeout",
        kind = "integer",
        min = 1,
        max = MAX_MS,
        unit = "a positive integer of ms",
        default = 1000
    },
    {
        name = "read_timeout",
        kind = "integer",
        min = 1,
        max = MAX_MS,
        unit = "a positive integer of ms",
        default = 1000
    },
    {
        name = "pool_size",
        kind = "integer",
        min = 1,
        max = 100000,
        unit = "a positive integer",
        default = 64
    },
    {
        name = "keepalive_timeout",
        kind = "integer",
        min = 0,
        max = MAX_MS,
        unit = "a non-negative integer of ms",
        default = 60000
    },
    {
        name = "backlog",
        kind = "integer",
        min = 0,
        max = 100000,
        unit = "a non-negative integer"
    },
    {
        name = "replicas",
        kind = "integer",
        min = 0,
        max = 100,
        unit = "a non-negative integer",
        default = 0,
        idle = 0,
        requires = {{option = "redlock", must = "unset", why = "a Redlock majority is its replication: WAIT does not apply"}}
    },
    {
        name = "replicas_timeout",
        kind = "integer",
        min = 1,
        max = MAX_MS,
        unit = "a positive integer of ms",
        default = 50,
        requires = {{option = "replicas", must = "positive"}}
    },
    {name = "auto_pipeline", kind = "boolean", default = true},
    {name = "ssl", kind = "boolean", default = false},
    {
        name = "ssl_verify",
        kind = "boolean",
        default = false,
        idle = false,
        requires = {NEEDS_SSL}
    },
    {
        name = "server_name",
        kind = "string",
        maxLen = 255,
        requires = {NEEDS_SSL},
        doc = "the host name"
    },
    {name = "ssl_client_cert", kind = "string", maxLen = MAX_PEM, requires = {{option = "ssl_client_priv_key", must = "set"}, CERT_NEEDS_SSL}},
    {
        name = "ssl_client_priv_key",
        kind = "string",
        maxLen = MAX_PEM,
        secret = true,
        requires = {{option = "ssl_client_cert", must = "set"}, CERT_NEEDS_SSL}
    }
}
local redisOptions = schema.compile("redis", _M.REDIS)
--- Per endpoint, the first configuration seen for it: what status pages show of the topology.
local known = {}
--- Validate the `redis` option table of dlock.new and friends. `dict` is the
-- factory's lua_shared_dict: the eviction finding is shared there.
function _M.parse(v, dict)
    if _M.library == nil then
        return nil, "dlock: no Redis client library: install lua-resty-redis (resty.redis) or Debian's lua-nginx-redis (nginx.redis)"
    end
    local o, oerr = redisOptions(v)
    if o == nil then
        return nil, oerr
    end
    local topology = "standalone"
    local seeds
    local maxRedirects = MAX_REDIRECTS
    if o.cluster ~= nil then
        topology = "cluster"
        seeds = o.cluster.nodes
        maxRedirects = o.cluster.max_redirects
    elseif o.redlock ~= nil then
        topology = "redlock"
        seeds = o.redlock
        -- One server named twice would count twice toward a majority it alone decides.
        local seen = {}
        for i = 1, #seeds do
            local n = seeds[i]
            local name = n.host .. ":" .. lua_tostring(n.port)
            if seen[name] ~= nil then
                return check.fail("redis.redlock names " .. name .. " twice: its masters must be independent", name)
            end
            seen[name] = true
        end
    elseif o.sentinel ~= nil then
        topology = "sentinel"
    elseif o.path ~= nil then
        topology = "unix"
    end
    local sent = o.sentinel
    -- An IPv6 address in brackets, as nginx connects to it and as "host:port" names it.
    local host = literal(o.host)
    local endpoint = o.path or host .. ":" .. lua_tostring(o.port)
    if sent ~= nil then
        endpoint = "sentinel " .. sent.master
    elseif seeds ~= nil then
        local names = {}
        for i = 1, #seeds do
            names[#names + 1] = seeds[i].host .. ":" .. lua_tostring(seeds[i].port)
        end
        endpoint = topology .. " " .. tbl_concat(names, ",")
    end
    local cert
    if o.ssl_client_cert ~= nil then
        local c, cerr = clientcert.load(o.ssl_client_cert, o.ssl_client_priv_key)
        if c == nil then
            return nil, cerr
        end
        cert = c
    end
    local pool = "dlock:" .. derived.tlsTag(o, cert) .. endpoint .. ":" .. lua_tostring(o.db)
    if sent ~= nil then
        pool = pool .. ":" .. sent.id
        -- Two factories asking the same sentinels with other credentials share no answers.
        if sent.credentials ~= nil then
            pool = pool .. ":" .. sent.credentials.digest
        end
    end
    local credentials = setup.credentials(o.username, o.password)
    if credentials ~= nil then
        -- A digest, not the secret, ends up in the pool name (it shows in debug logs).
        pool = pool .. ":" .. credentials.digest
    end
    -- The server name too: behind a proxy that routes by SNI, one host:port is several Redis.
    local space = endpoint .. " " .. lua_tostring(o.db)
    if o.ssl then
        space = space .. " tls=" .. (o.server_name or "")
    end
    if sent ~= nil then
        space = space .. " " .. sent.id
    end
    local conf = {
        host = host,
        port = o.port,
        path = o.path,
        credentials = credentials,
        db = o.db,
        connect_timeout = o.connect_timeout,
        read_timeout = o.read_timeout,
        pool_size = o.pool_size,
        backlog = o.backlog,
        replicas = o.replicas,
        replicas_timeout = o.replicas_timeout,
        keepalive_timeout = o.keepalive_timeout,
        ssl = o.ssl,
        ssl_verify = o.ssl_verify,
        server_name = o.server_name,
        client_cert = cert,
        auto_pipeline = o.auto_pipeline,
        pool = pool,
        keyspace = str_format("%08x|", crc32_long(space)),
        endpoint = endpoint,
        announced = nil,
        dict = dict,
        sentinel = sent,
        topology = topology,
        nodes = nil,
        max_redirects = maxRedirects,
        slotted = topology == "cluster",
        backend = nil,
        senders = 2
    }
    if seeds ~= nil then
        local nodes = {}
        for i = 1, #seeds do
            nodes[#nodes + 1] = derived.node(conf, seeds[i].host, seeds[i].port)
        end
        conf.nodes = nodes
    end
    if known[endpoint] == nil then
        known[endpoint] = conf
    end
    return conf, nil
end
--- The Redis endpoints factories of this worker were made for (bounded by distinct configurations).
function _M.endpoints()
    return known
end
return _M
