-- Generated from src/resty/dlock/redis/derived.ts by TypeScriptToLua: edit that file, not this one.
-- Configurations derived from a factory's (client.lua): one server of a Cluster,
-- a Redlock set or a Sentinel master on its own, and one for a connection held
-- for a long time; with the TLS part of the pool name they share with it.
local _M = {}
local lua_tostring = tostring
--- The TLS part of a pool name: a connection made for one server name (SNI:
-- a proxy in front may route each name to another Redis), verified or not, or
-- made with one client certificate (or none), never serves a factory that asks
-- for another.
local function tlsTag(c, cert)
    if not c.ssl then
        return ""
    end
    local tag = (c.ssl_verify and "tls+verify=" or "tls=") .. (c.server_name or "")
    if cert ~= nil then
        tag = tag .. "+cert=" .. cert.digest
    end
    return tag .. ":"
end
--- A field-by-field copy to derive a configuration from.
local function copy(c)
    return {
        host = c.host,
        port = c.port,
        path = c.path,
        credentials = c.credentials,
        db = c.db,
        connect_timeout = c.connect_timeout,
        read_timeout = c.read_timeout,
        pool_size = c.pool_size,
        backlog = c.backlog,
        replicas = c.replicas,
        replicas_timeout = c.replicas_timeout,
        keepalive_timeout = c.keepalive_timeout,
        ssl = c.ssl,
        ssl_verify = c.ssl_verify,
        server_name = c.server_name,
        client_cert = c.client_cert,
        auto_pipeline = c.auto_pipeline,
        pool = c.pool,
        keyspace = c.keyspace,
        endpoint = c.endpoint,
        announced = c.announced,
        dict = c.dict,
        sentinel = c.sentinel,
        topology = c.topology,
        nodes = c.nodes,
        max_redirects = c.max_redirects,
        slotted = c.slotted,
        backend = c.backend,
        senders = c.senders
    }
end
--- One server of a cluster or a Redlock set: the settings of `conf` (credentials,
-- TLS, timeouts, pools per endpoint) for host:port alone; `announced`: who
-- gave that address, when the servers did.
function _M.node(conf, host, port, announced)
    local n = copy(conf)
    n.host = host
    n.port = port
    n.announced = announced
    n.path = nil
    n.endpoint = host .. ":" .. lua_tostring(port)
    n.pool = "dlock:" .. tlsTag(conf, conf.client_cert) .. n.endpoint .. ":" .. lua_tostring(conf.db)
    if conf.credentials ~= nil then
        n.pool = n.pool .. ":" .. conf.credentials.digest
    end
    n.sentinel = nil
    n.topology = "standalone"
    n.senders = 1
    n.nodes = nil
    n.backend = nil
    return n
end
--- The same configuration with a pool of its own and no backlog: for a
-- connection held for a long time (the wake-up subscriber), which must never
-- take a slot of the pool that requests queue for.
function _M.apart(conf, suffix)
    local n = copy(conf)
    n.pool = conf.pool .. ":" .. suffix
    n.backlog = nil
    return n
end
-- Exported by name: this module's own uses of them are locals, not lookups in its exports table.
_M.tlsTag = tlsTag
return _M
