--[[ Generated with https://github.com/TypeScriptToLua/TypeScriptToLua ]]
local ____exports = {}
local check = require("resty.dlock.check")
local OPTIONS = check.set("master", "nodes", "username", "password")
--- "host:port" or "[v6]:port".
function ____exports.parseNode(name, v)
    if type(v) ~= "string" then
        return check.fail(name .. " must be \"host:port\" strings", v)
    end
    local host, port = string.match(v, "^%[([%x:%.]+)%]:(%d+)$")
    if host == nil then
        host, port = string.match(v, "^([%w%.%-_]+):(%d+)$")
    end
    local p = tonumber(port)
    if host == nil or p == nil or p < 1 or p > 65535 then
        return check.fail(name .. " must be \"host:port\" strings", v)
    end
    return {host = host, port = p}, nil
end
--- A non-empty list of "host:port" strings.
function ____exports.parseNodes(name, list)
    if type(list) ~= "table" or #list == 0 then
        return check.fail(name .. " must be a list of \"host:port\" strings", list)
    end
    local nodes = {}
    for ____, n in ipairs(list) do
        local node, nerr = ____exports.parseNode(name, n)
        if node == nil then
            return nil, nerr
        end
        nodes[#nodes + 1] = node
    end
    return nodes, nil
end
--- The `redis.sentinel` option table.
function ____exports.parse(v)
    local o, err = check.options("redis.sentinel", v, OPTIONS)
    if o == nil then
        return nil, err
    end
    local master, merr = check.str("redis.sentinel.master", o.master, 255)
    if master == nil then
        return nil, merr
    end
    local nodes, nerr = ____exports.parseNodes("redis.sentinel.nodes", o.nodes)
    if nodes == nil then
        return nil, nerr
    end
    local username
    local password
    if o.username ~= nil then
        local u, uerr = check.str("redis.sentinel.username", o.username, 1024)
        if u == nil then
            return nil, uerr
        end
        username = u
    end
    if o.password ~= nil then
        if type(o.password) ~= "string" then
            return nil, "dlock: redis.sentinel.password must be a string, got a " .. type(o.password)
        end
        password = o.password
    end
    if username ~= nil and password == nil then
        return nil, "dlock: redis.sentinel.username needs redis.sentinel.password"
    end
    local names = {}
    for ____, n in ipairs(nodes) do
        names[#names + 1] = (n.host .. ":") .. tostring(n.port)
    end
    return {
        master = master,
        id = table.concat(names, ","),
        nodes = nodes,
        username = username,
        password = password
    }, nil
end
--- Seconds a worker trusts the sentinels' last answer. A failover is announced
-- by the sentinels at once, but the old master goes on taking writes for
-- several seconds before it is demoted: asking again every second moves every
-- worker to the new master within a second, without waiting for an error.
local FRESH = 1
--- Per worker: the master found for a sentinel set (by pool name), and when.
local masters = {}
--- The master the sentinels named less than FRESH seconds ago, if any.
function ____exports.cached(pool)
    local m = masters[pool]
    if m == nil or ngx.now() - m.at > FRESH then
        return nil
    end
    return m.node
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
-- lua-resty-redis object; timeouts are the factory's.
function ____exports.discover(pool, s, client, timeout)
    local errors = {}
    for i = 1, #s.nodes do
        local node = s.nodes[i]
        local red = client:new()
        if red ~= nil then
            red:set_timeout(timeout)
            local ok, cerr = red:connect(node.host, node.port)
            local why = tostring(cerr)
            if ok ~= nil then
                local authed = true
                if s.password ~= nil then
                    local args = s.username ~= nil and ({s.username, s.password}) or ({s.password})
                    local a, aerr = red:auth(unpack(args))
                    authed = a ~= nil and a ~= false
                    why = (("authentication failed for user " .. (s.username or "default")) .. ": ") .. tostring(aerr)
                end
                if authed then
                    local addr, serr = red:sentinel("get-master-addr-by-name", s.master)
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
                    why = addr == ngx.null and "does not know master " .. s.master or tostring(serr or addr)
                else
                    red:close()
                end
            end
            errors[#errors + 1] = (((node.host .. ":") .. tostring(node.port)) .. " ") .. why
        end
    end
    return nil, ((("dlock: redis sentinel " .. s.master) .. ": no sentinel named the master (") .. table.concat(errors, "; ")) .. ")"
end
return ____exports
