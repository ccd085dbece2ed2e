--[[ Generated with https://github.com/TypeScriptToLua/TypeScriptToLua ]]
local ____exports = {}
local init
local check = require("resty.dlock.check")
function init(red, conf)
    if conf.password ~= nil then
        local args = conf.username ~= nil and ({conf.username, conf.password}) or ({conf.password})
        local ok, err = red:auth(unpack(args))
        if not ok then
            return (("dlock: redis " .. conf.endpoint) .. ": authentication failed: ") .. tostring(err)
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
local clientHasTls = client ~= nil and rawget(client, "set_timeouts") ~= nil
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
    "server_name"
)
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
    if o.path ~= nil then
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
    if ssl and not clientHasTls then
        return nil, ("dlock: redis.ssl = true needs lua-resty-redis >= 0.28 (resty.redis); the loaded client " .. (client._VERSION or "?")) .. " would silently connect in plaintext"
    end
    if not ssl and (sslVerify or serverName ~= nil) then
        return nil, "dlock: redis.ssl_verify and redis.server_name need redis.ssl = true"
    end
    local endpoint = path or (host .. ":") .. tostring(port)
    local db = ints.db
    local pool = ((("dlock:" .. (ssl and "tls:" or "")) .. endpoint) .. ":") .. tostring(db)
    if password ~= nil then
        pool = (pool .. ":") .. string.sub(
            ngx.md5(((username or "") .. "\0") .. password),
            1,
            16
        )
    end
    return {
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
        keepalive_timeout = ints.keepalive_timeout,
        ssl = ssl,
        ssl_verify = sslVerify,
        server_name = serverName,
        pool = pool,
        endpoint = endpoint,
        dict = dict
    }, nil
end
local EVICTION_KEY = "redis:ep:"
local EVICTION_COUNT = "redis:n"
local EVICTION_INDEX = "redis:i:"
--- Pools this worker has checked (or is checking).
local checkedPools = {}
--- This worker's findings, per endpoint.
local findings = {}
--- "<endpoint> <kind>" this worker has logged.
local logged = {}
--- Per shared dict: the finding (per endpoint) this worker last put there.
local sharedTo = {}
local function finding(checked, policy, maxmemory, why, checkedAt)
    local policyEvicts = checked and policy ~= "noeviction"
    return {
        checked = checked,
        policy = policy,
        maxmemory = maxmemory,
        policyEvicts = policyEvicts,
        canEvict = policyEvicts and maxmemory > 0,
        why = why,
        checkedAt = checkedAt
    }
end
--- Keep the finding for this worker; log it once per endpoint and worker.
local function remember(conf, e)
    local ep = conf.endpoint
    local old = findings[ep]
    if e.checked or old == nil or not old.checked then
        findings[ep] = e
    end
    local kind = "ok"
    if not e.checked then
        kind = "unknown"
    elseif e.canEvict then
        kind = "evicts"
    elseif e.policyEvicts then
        kind = "dormant"
    end
    if kind ~= "ok" and not (logged[(ep .. " ") .. kind] ~= nil) then
        logged[(ep .. " ") .. kind] = true
        if kind == "evicts" then
            ngx.log(
                ngx.ERR,
                "dlock: redis ",
                ep,
                " can evict lock keys (maxmemory-policy ",
                e.policy,
                ", maxmemory ",
                e.maxmemory,
                "): an evicted lock lets a second holder in; set maxmemory-policy noeviction, or give locks a Redis of their own"
            )
        elseif kind == "dormant" then
            ngx.log(
                ngx.WARN,
                "dlock: redis ",
                ep,
                " has maxmemory-policy ",
                e.policy,
                " but no maxmemory: lock keys cannot be ",
                "evicted yet, they can as soon as maxmemory is set; set maxmemory-policy noeviction, or give locks a Redis of their own"
            )
        else
            ngx.log(
                ngx.NOTICE,
                "dlock: redis ",
                ep,
                ": could not check whether it can evict lock keys (",
                e.why,
                "); make sure its maxmemory-policy is noeviction"
            )
        end
    end
end
--- Put this worker's finding about conf's endpoint into conf's shared dict, when
-- that dict does not have it yet. Runs on fresh connections only: the check of a
-- pool runs once, but another factory (another dict) may share its pool.
local function share(conf)
    local ep = conf.endpoint
    local e = findings[ep]
    local dict = conf.dict or ngx.shared.dlock
    if e == nil or dict == nil then
        return
    end
    local done = sharedTo[dict]
    if done == nil then
        done = {}
        sharedTo[dict] = done
    end
    if done[ep] == e then
        return
    end
    local at = math.floor(e.checkedAt * 1000)
    local v = (("0 " .. tostring(at)) .. " ") .. e.why
    if e.checked then
        v = (((("1 " .. tostring(at)) .. " ") .. tostring(e.maxmemory)) .. " ") .. e.policy
    end
    local added, err = dict:safe_add(EVICTION_KEY .. ep, v)
    local stored = added == true
    if added then
        local n = dict:incr(EVICTION_COUNT, 1, 0)
        if n ~= nil then
            dict:safe_set(
                EVICTION_INDEX .. tostring(n),
                ep
            )
        end
    elseif err == "exists" then
        stored = not e.checked or (dict:safe_set(EVICTION_KEY .. ep, v)) == true
    end
    if stored then
        done[ep] = e
    end
end
--- Ask Redis for maxmemory and maxmemory-policy, log and record the finding.
-- Returns an error only when the connection failed (then the next fresh connection asks again).
local function checkEviction(red, conf)
    checkedPools[conf.pool] = true
    local policy
    local maxmemory
    local info, ierr = red:info("memory")
    if info == nil then
        checkedPools[conf.pool] = nil
        return ((("dlock: redis " .. conf.endpoint) .. ": ") .. tostring(ierr)) .. " during the eviction check"
    end
    if type(info) == "string" then
        local p = string.match(info, "[\r\n]maxmemory_policy:([%w%-]+)")
        local m = string.match(info, "[\r\n]maxmemory:(%d+)")
        policy = p
        maxmemory = tonumber(m)
    end
    local why = ""
    if policy == nil or maxmemory == nil then
        why = "INFO memory: " .. (info == false and tostring(ierr) or "no maxmemory fields")
        local cfg, cerr = red:config("get", "maxmemory*")
        if cfg == nil then
            checkedPools[conf.pool] = nil
            return ((("dlock: redis " .. conf.endpoint) .. ": ") .. tostring(cerr)) .. " during the eviction check"
        end
        if type(cfg) == "table" then
            local t = cfg
            for i = 1, #t - 1, 2 do
                if t[i] == "maxmemory-policy" then
                    policy = tostring(t[i + 1])
                end
                if t[i] == "maxmemory" then
                    maxmemory = tonumber(t[i + 1])
                end
            end
        end
        if policy == nil or maxmemory == nil then
            why = (why .. "; CONFIG GET: ") .. (cfg == false and tostring(cerr) or "no maxmemory fields")
        end
    end
    if policy ~= nil and maxmemory ~= nil then
        remember(
            conf,
            finding(
                true,
                policy,
                maxmemory,
                "",
                ngx.now()
            )
        )
    else
        remember(
            conf,
            finding(
                false,
                "",
                0,
                why,
                ngx.now()
            )
        )
    end
    return nil
end
local function decode(v)
    if type(v) ~= "string" then
        return nil
    end
    local at, maxmemory, policy = string.match(v, "^1 (%d+) (%d+) (%S+)$")
    if policy ~= nil then
        return finding(
            true,
            policy,
            tonumber(maxmemory) or 0,
            "",
            (tonumber(at) or 0) / 1000
        )
    end
    local uat, why = string.match(v, "^0 (%d+) (.*)$")
    if why ~= nil then
        return finding(
            false,
            "",
            0,
            why,
            (tonumber(uat) or 0) / 1000
        )
    end
    return nil
end
--- Prefer an answer over "could not check", then the newest.
local function better(a, b)
    if b == nil then
        return true
    end
    if a.checked ~= b.checked then
        return a.checked
    end
    return a.checkedAt > b.checkedAt
end
--- Eviction findings per endpoint: this worker's and those other workers shared
-- in `dicts`. Reads a few keys per endpoint, never walks a dict.
function ____exports.evictions(dicts)
    local out = {}
    for ep, e in pairs(findings) do
        out[ep] = e
    end
    for ____, dict in ipairs(dicts) do
        local n = dict:get(EVICTION_COUNT)
        if type(n) == "number" then
            for i = 1, n do
                local ep = dict:get(EVICTION_INDEX .. tostring(i))
                if type(ep) == "string" then
                    local e = decode((dict:get(EVICTION_KEY .. ep)))
                    if e ~= nil and better(e, out[ep]) then
                        out[ep] = e
                    end
                end
            end
        end
    end
    return out
end
--- A ready connection from the pool (or a fresh one, authenticated and with the
-- db selected). Errors name the endpoint: "dlock: redis 127.0.0.1:6379: connection refused".
function ____exports.connect(conf)
    local red, nerr = client:new()
    if red == nil then
        return nil, "dlock: redis client: " .. tostring(nerr)
    end
    if clientHasTls then
        red:set_timeouts(conf.connect_timeout, conf.read_timeout, conf.read_timeout)
    else
        red:set_timeout(conf.connect_timeout)
    end
    local opts = {pool = conf.pool, pool_size = conf.pool_size, backlog = conf.backlog}
    if conf.ssl then
        opts.ssl = true
        opts.ssl_verify = conf.ssl_verify
        opts.server_name = conf.server_name
    end
    local ok, err = red:connect(conf.path or conf.host, conf.path ~= nil and opts or conf.port, opts)
    if ok == nil then
        return nil, (("dlock: redis " .. conf.endpoint) .. ": ") .. tostring(err)
    end
    if not clientHasTls then
        red:set_timeout(conf.read_timeout)
    end
    local reused = red:get_reused_times()
    if reused == 0 then
        local ierr = init(red, conf)
        if ierr == nil and not (checkedPools[conf.pool] ~= nil) then
            ierr = checkEviction(red, conf)
        end
        if ierr ~= nil then
            red:close()
            return nil, ierr
        end
        share(conf)
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
    end
end
return ____exports
