-- The rate rows of make torture (bench/engine/rate.js): three rate limiters of
-- the same limit, side by side in nginx/torture.conf, each admission counted
-- by the witness Redis (RPUSH rate:<run>:<scheme>:<key> <us>, the wall clock
-- taken right after the decision came back).
--
--   dlock:    the gateway's mode "rate" (GCRA on the lock Redis' clock), guard t_rate.
--   fixed:    the fixed-window counter Kong's and APISIX's Redis policies use:
--             INCR <key>:<window> then PEXPIRE it for one window, refuse above
--             `rate` in the window; windows aligned to the nginx's clock, as
--             Kong aligns them (APISIX starts one at the first request: the same
--             two-windows-at-once edge).
--   local:    lua-resty-limit-traffic's resty.limit.req (leaky bucket per nginx,
--             in its shared dict, "nodelay": admitted at once while the excess
--             is within burst), written out here because the library is not
--             installed: the same arithmetic as its incoming() (excess and last
--             per key, excess = max(excess - rate * elapsed + 1, 0), refused
--             when excess > burst), the record stored as a string instead of
--             an FFI struct. Per nginx: each nginx of the fleet admits the
--             whole limit, which is what sharing one limit needs Redis for.
--   fallback: mode "rate" with on_error = "local", fleet = 2 (guard t_rate_fb):
--             the Redis-down row pauses the lock Redis under it.
local ffi = require "ffi"
local found, redis = pcall(require, "resty.redis")
if not found then redis = require "nginx.redis" end

local _M = {}

pcall(ffi.cdef, [[
    typedef struct { long tv_sec; long tv_nsec; } torture_timespec;
    int clock_gettime(int clk_id, torture_timespec *tp);
]])
local ts = ffi.new("torture_timespec")
local function now_us()
    ffi.C.clock_gettime(0, ts)
    return string.format("%.0f", tonumber(ts.tv_sec) * 1000000 + math.floor(tonumber(ts.tv_nsec) / 1000))
end

local conf

--- The limit every scheme enforces and where the Redis servers are (from init_by_lua).
function _M.init(c)
    conf = c
end

local function connect(port)
    local r = redis:new()
    r:set_timeout(300)   -- (nginx.redis 0.27, when resty.redis is missing, has no set_timeouts)
    local ok, err = r:connect("127.0.0.1", port)
    if not ok then return nil, err end
    return r
end

-- The admission, to the witness; the time is taken first (right after the decision).
local function admitted(scheme)
    local at = now_us()
    local w, err = connect(conf.witness_port)
    if not w then
        ngx.status = 500
        return ngx.say("werr ", err)
    end
    local res
    res, err = w:rpush("rate:" .. (ngx.var.arg_run or "") .. ":" .. scheme .. ":" .. ngx.var.arg_key, at)
    if not res then
        ngx.status = 500
        return ngx.say("werr ", err)
    end
    w:set_keepalive(10000, 256)
    ngx.say("ok")
end

local function refused(status)
    ngx.status = status or 429
    ngx.say("refused")
    return ngx.exit(ngx.status)
end

--- /rate/dlock and /rate/fallback: the guard ran in access; this is content.
function _M.guarded(scheme)
    return admitted(scheme)
end

--- /rate/fixed: INCR + PEXPIRE of the window's counter on the lock Redis.
function _M.fixed()
    local key = ngx.var.arg_key
    local now = ngx.now() * 1000
    local window = math.floor(now / conf.period)
    local rkey = "trate:fw:" .. (ngx.var.arg_run or "") .. ":" .. key .. ":" .. window
    local r, err = connect(conf.redis_port)
    if not r then
        ngx.status = 500
        return ngx.say("err ", err)
    end
    r:init_pipeline()
    r:incr(rkey)
    r:pexpire(rkey, conf.period)
    local res
    res, err = r:commit_pipeline()
    if not res or type(res[1]) ~= "number" then
        ngx.status = 500
        return ngx.say("err ", err or tostring(res and res[1]))
    end
    r:set_keepalive(10000, 256)
    if res[1] > conf.rate then return refused() end
    return admitted("fixed")
end

--- /rate/local: resty.limit.req's incoming(key, true), nodelay, in this nginx's dict.
function _M.limit_req()
    local dict = ngx.shared.rate_local
    -- limit.req keeps rate and burst in thousandths of a request per second.
    local rate = conf.rate * 1000 / conf.period * 1000
    local burst = conf.burst * 1000
    local key = (ngx.var.arg_run or "") .. ":" .. ngx.var.arg_key
    local now = ngx.now() * 1000
    local excess = 0
    local v = dict:get(key)
    if v then
        local e, last = v:match("^([^:]+):(.+)$")
        local elapsed = now - tonumber(last)
        excess = math.max(tonumber(e) - rate * math.abs(elapsed) / 1000 + 1000, 0)
        if excess > burst then return refused() end
    end
    dict:set(key, excess .. ":" .. now)
    return admitted("local")
end

return _M
