--[[ Generated with https://github.com/TypeScriptToLua/TypeScriptToLua ]]
local ____exports = {}
local ask, masters
local schema = require("resty.dlock.core.schema")
local setup = require("resty.dlock.redis.setup")
function ask(pool, s, client, timeout, tls)
    local errors = {}
    local ____s_ssl_1 = s.ssl
    if ____s_ssl_1 == nil then
        ____s_ssl_1 = tls.ssl
    end
    local ssl = ____s_ssl_1
    for i = 1, #s.nodes do
        local node = s.nodes[i]
        local endpoint = (node.host .. ":") .. tostring(node.port)
        local red = client:new()
        if red ~= nil then
            red:set_timeout(timeout)
            local ok, cerr = red:connect(node.host, node.port)
            local why = tostring(cerr)
            if ok ~= nil then
                local serr = setup.run(red, {
                    endpoint = "sentinel " .. endpoint,
                    ssl = ssl,
                    ssl_verify = tls.ssl_verify,
                    server_name = tls.server_name,
                    credentials = s.credentials,
                    db = 0
                })
                if serr == nil then
                    local addr, aerr = red:sentinel("get-master-addr-by-name", s.master)
                    red:close()
                    if type(addr) == "table" then
                        local t = addr
                        local port = tonumber(t[2])
                        if port ~= nil then
                            if i > 1 then
                                table.remove(s.nodes, i)
                                table.insert(s.nodes, 1, node)
                            end
                            local m = {host = t[1], port = port}
                            masters[pool] = {
                                node = m,
                                at = ngx.now()
                            }
                            return m, nil
                        end
                    end
                    why = addr == ngx.null and "does not know master " .. s.master or tostring(aerr or addr)
                else
                    red:close()
                    why = string.sub(
                        serr,
                        string.len(("dlock: redis sentinel " .. endpoint) .. ": ") + 1
                    )
                end
            end
            errors[#errors + 1] = (endpoint .. " ") .. why
        end
    end
    return nil, ((("dlock: redis sentinel " .. s.master) .. ": no sentinel named the master (") .. table.concat(errors, "; ")) .. ")"
end
local validate = schema.compile("redis.sentinel", {
    {name = "master", kind = "string", maxLen = 255, required = true},
    {name = "nodes", kind = "nodes", required = true},
    {name = "username", kind = "string", maxLen = 1024, requires = {{option = "password", must = "set"}}},
    {name = "password", kind = "string", secret = true},
    {name = "ssl", kind = "boolean"}
})
--- The `redis.sentinel` option table.
function ____exports.parse(v)
    local o, err = validate(v)
    if o == nil then
        return nil, err
    end
    local names = {}
    for ____, n in ipairs(o.nodes) do
        names[#names + 1] = (n.host .. ":") .. tostring(n.port)
    end
    return {
        master = o.master,
        id = table.concat(names, ","),
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
masters = {}
--- Pools whose sentinels a coroutine of this worker is asking right now.
local asking = {}
--- The master to use now: the sentinels' answer of less than FRESH seconds ago;
-- or, while another coroutine of this worker is asking them again, the
-- previous answer (one question per worker and second, not one per request in
-- flight). nil: ask (discover).
function ____exports.cached(pool)
    local m = masters[pool]
    if m == nil then
        return nil
    end
    if ngx.now() - m.at <= FRESH or asking[pool] ~= nil then
        return m.node
    end
    return nil
end
--- The master the sentinels named last (however long ago), for status pages.
function ____exports.last(pool)
    local m = masters[pool]
    local ____temp_0
    if m == nil then
        ____temp_0 = nil
    else
        ____temp_0 = m.node
    end
    return ____temp_0
end
--- Forget the master of this pool: the next connection asks the sentinels again.
function ____exports.forget(pool)
    masters[pool] = nil
end
--- Ask the sentinels for the master's address. `client` makes a fresh
-- lua-resty-redis object; timeouts and TLS settings are the factory's.
function ____exports.discover(pool, s, client, timeout, tls)
    asking[pool] = true
    local m, err = ask(
        pool,
        s,
        client,
        timeout,
        tls
    )
    asking[pool] = nil
    return m, err
end
return ____exports
