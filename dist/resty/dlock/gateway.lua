--[[ Generated with https://github.com/TypeScriptToLua/TypeScriptToLua ]]
local ____exports = {}
local check = require("resty.dlock.core.check")
local dlock = require("resty.dlock")
local shared = require("resty.dlock.gateway.common")
local keys = require("resty.dlock.gateway.key")
local idempotency = require("resty.dlock.gateway.idempotency")
local inflight = require("resty.dlock.gateway.inflight")
local guard = require("resty.dlock.gateway.guard")
local meter = require("resty.dlock.core.meter")
local semaphore = require("resty.dlock.semaphore")
do
    local ____version = require("resty.dlock.version")
    ____exports._VERSION = ____version.VERSION
end
local MODES = {}
MODES.dedup = {status = 409, wait = false}
MODES.concurrency = {status = 429, wait = true}
MODES.throttle = {status = 429, wait = false}
MODES.mutex = {status = 503, wait = true}
local OPTIONS = check.set(
    "name",
    "mode",
    "key",
    "dict",
    "redis",
    "prefix",
    "ttl",
    "hold",
    "permits",
    "wait",
    "renew",
    "on_missing",
    "on_error",
    "reject_status",
    "missing_status",
    "error_status",
    "headers",
    "breaker_failures",
    "breaker_cooldown",
    "read_body",
    "shared",
    "scope",
    "methods",
    "lease",
    "max_body",
    "max_request_body",
    "store",
    "store_headers"
)
local registry = {}
--- Where gateway.new may run: before requests (and in timers, which belong to no request).
local PHASES = check.set("init", "init_worker", "timer")
--- Guards created so far in this worker (in creation order), for status pages.
function ____exports.guards()
    return registry
end
local opt = shared.opt
local function status(o, name, dflt)
    return check.integer(
        name,
        opt(o, name, dflt),
        200,
        599,
        "an HTTP status code"
    )
end
--- Create a guard (once, in init_by_lua). Returns it, or nil and an error naming the bad option.
-- 
-- @customName new
function ____exports.new(opts)
    local phase = ngx.get_phase()
    if not (PHASES[phase] ~= nil) then
        return nil, (("dlock: gateway.new in the " .. phase) .. " phase: create guards once, in init_by_lua ") .. "or init_worker_by_lua, not per request (a guard made per request excludes nothing and adds metrics without bound)"
    end
    if opts == nil then
        return nil, "dlock: gateway.new needs an options table with mode, key and on_error"
    end
    local o, oerr = check.options("gateway.new options", opts, OPTIONS)
    if o == nil then
        return nil, oerr
    end
    local mode = o.mode
    local spec = type(mode) == "string" and MODES[mode] or nil
    if spec == nil and mode ~= "idempotency" then
        return check.fail("mode must be \"dedup\", \"concurrency\", \"throttle\", \"mutex\" or \"idempotency\"", mode)
    end
    local name = (mode .. "#") .. tostring(#registry + 1)
    if o.name ~= nil then
        local n, err = meter.checkName(o.name)
        if n == nil then
            return nil, err
        end
        name = n
    end
    for ____, other in ipairs(registry) do
        if other.name == name then
            return check.fail("a guard with this name exists already", name)
        end
    end
    if mode == "idempotency" then
        local ig, ierr = idempotency.create(o, name)
        if ig == nil then
            return nil, ierr
        end
        registry[#registry + 1] = ig
        return ig, nil
    end
    for ____, only in ipairs(idempotency.ONLY) do
        if o[only] ~= nil then
            return check.fail(
                (only .. " applies to mode idempotency only, not ") .. tostring(mode),
                o[only]
            )
        end
    end
    local tpl, kerr = keys.compile("key", o.key)
    if tpl == nil then
        return nil, kerr
    end
    local parts = tpl.parts
    local keyFn = tpl.keyFn
    local source = tpl.source
    local onError = o.on_error
    if onError ~= "allow" and onError ~= "deny" then
        return check.fail("on_error must be \"allow\" (fail open) or \"deny\" (fail closed)", onError)
    end
    local onMissing = opt(o, "on_missing", "pass")
    if onMissing ~= "pass" and onMissing ~= "reject" then
        return check.fail("on_missing must be \"pass\" or \"reject\"", onMissing)
    end
    if o.hold ~= nil and mode ~= "dedup" then
        return check.fail(
            "hold applies to mode dedup only, not " .. tostring(mode),
            o.hold
        )
    end
    if o.permits ~= nil and mode ~= "concurrency" then
        return check.fail(
            "permits applies to mode concurrency only, not " .. tostring(mode),
            o.permits
        )
    end
    if o.wait ~= nil and not spec.wait then
        return check.fail(
            "wait applies to modes concurrency and mutex only, not " .. tostring(mode),
            o.wait
        )
    end
    if o.read_body ~= nil and mode == "throttle" then
        return check.fail("read_body does not apply to mode throttle (it holds nothing while the request runs)", o.read_body)
    end
    if o.renew ~= nil and mode == "throttle" then
        return check.fail("renew does not apply to mode throttle (its lock is never released)", o.renew)
    end
    local sharedMethods
    local sh = o.shared
    if sh ~= nil then
        if mode ~= "mutex" then
            return check.fail(
                "shared applies to mode mutex only, not " .. tostring(mode),
                sh
            )
        end
        if type(sh) ~= "table" or #sh == 0 then
            return check.fail("shared must be a list of HTTP methods ({ \"GET\", \"HEAD\" })", sh)
        end
        sharedMethods = {}
        for ____, x in ipairs(sh) do
            if type(x) ~= "string" or not check.found(x, "^%u+$") then
                return check.fail("shared must be a list of upper-case HTTP methods", x)
            end
            sharedMethods[x] = true
        end
    end
    local hold = 0
    if o.hold ~= nil then
        local n, err = check.integer(
            "hold",
            o.hold,
            0,
            dlock.MAX_TTL,
            "a non-negative integer of ms"
        )
        if n == nil then
            return nil, err
        end
        hold = n
    end
    local renewOn = mode ~= "throttle"
    if o.renew ~= nil then
        local b, err = check.bool("renew", o.renew)
        if b == nil then
            return nil, err
        end
        renewOn = b
    end
    local readBody = false
    if o.read_body ~= nil then
        local b, err = check.bool("read_body", o.read_body)
        if b == nil then
            return nil, err
        end
        readBody = b
    end
    local rejectStatus, e1 = status(o, "reject_status", spec.status)
    if rejectStatus == nil then
        return nil, e1
    end
    local missingStatus, e2 = status(o, "missing_status", 400)
    if missingStatus == nil then
        return nil, e2
    end
    local common, ce = shared.parse(o)
    if common == nil then
        return nil, ce
    end
    local base = {}
    base.dict = opt(o, "dict", "dlock")
    base.redis = o.redis
    base.prefix = opt(o, "prefix", ("dlock:gw:" .. name) .. ":")
    base.ttl = o.ttl
    base.wait = o.wait
    base.name = (string.gsub(name, "[^%w_%-%.]", "_"))
    local locks
    local lerr
    if mode == "concurrency" then
        base.permits = o.permits
        locks, lerr = semaphore.new(base)
    else
        locks, lerr = dlock.new(base)
    end
    if locks == nil then
        return nil, lerr
    end
    local store = locks
    local noReaders = locks.noReaders
    if sharedMethods ~= nil and noReaders ~= nil then
        return nil, noReaders
    end
    local sharedTry
    local sharedWait
    if sharedMethods ~= nil then
        sharedTry = {}
        sharedTry.wait = 0
        sharedTry.shared = true
        sharedWait = {}
        sharedWait.wait = store.wait
        sharedWait.shared = true
    end
    local tryOpts = {}
    tryOpts.wait = 0
    local waitOpts = {}
    waitOpts.wait = store.wait
    local missingWhat = onMissing == "reject" and ("refused with " .. tostring(missingStatus)) .. " (on_missing = \"reject\")" or "let through unguarded (on_missing = \"pass\")"
    local errorWhat = onError == "deny" and ("refused with " .. tostring(common.errorStatus)) .. " (on_error = \"deny\")" or "let through unguarded (on_error = \"allow\")"
    local g = {
        name = name,
        mode = mode,
        parts = parts,
        keyFn = keyFn,
        source = source,
        missingWhat = missingWhat,
        errorWhat = errorWhat,
        locks = locks,
        dict = store.dict,
        ttl = store.ttl,
        hold = hold,
        wait = store.wait,
        renew = renewOn,
        release = mode ~= "throttle",
        readBody = readBody,
        onMissing = onMissing,
        onError = onError,
        rejectStatus = rejectStatus,
        missingStatus = missingStatus,
        errorStatus = common.errorStatus,
        headers = common.headers,
        breakerFailures = common.breakerFailures,
        breakerCooldown = common.breakerCooldown,
        tryOpts = tryOpts,
        waitOpts = waitOpts,
        sharedMethods = sharedMethods,
        sharedTry = sharedTry,
        sharedWait = sharedWait
    }
    local made = setmetatable(g, guard.mt)
    registry[#registry + 1] = made
    return made, nil
end
--- log_by_lua at http (or server) level: ends the leases of every guard the
-- request passed, in whatever location it finished, also after internal redirects.
function ____exports.log()
    inflight.finish(nil)
    idempotency.finish()
end
--- header_filter_by_lua at http (or server) level: idempotency guards note the
-- status and headers of the response to store. Does nothing for other requests.
function ____exports.header_filter()
    idempotency.headerFilter()
end
--- body_filter_by_lua at http (or server) level: idempotency guards keep the body to store (up to max_body).
function ____exports.body_filter()
    idempotency.bodyFilter()
end
return ____exports
