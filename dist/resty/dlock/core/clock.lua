-- Generated from src/resty/dlock/core/clock.ts by TypeScriptToLua: edit that file, not this one.
-- The event loop's cached time, ngx.now(), read with the FFI call
-- lua-resty-core's ngx.now makes, from a function of our own; and ngx.sleep,
-- never for less than nginx's timers can count.
--
-- Why not ngx.now: Debian 12's lua-resty-core writes it as
-- `return tonumber(ngx_lua_ffi_now())`, a tail call into a fast function that
-- a trace starting in ngx.now cannot return through ("leaving loop in root
-- trace at tonumber"). After a few such aborts LuaJIT blacklists ngx.now, and
-- from then on every trace that calls it aborts ("blacklisted at
-- time.lua:74"): the pipeline's, the acquire's and the lease's hot paths among
-- them, which then run in the interpreter. jit.v on the bench's nginx with the
-- topology lines beside /core: 164 such aborts, the core line at 0.85 to 0.95
-- of the same handler in an nginx of its own. (lua-resty-core 0.1.33,
-- OpenResty's, keeps the result in a local first, as now() does here.) Where
-- the call is not there, ngx.now answers.
local _M = {}
local ffi = require("ffi")
local ngx_now = ngx.now
local ngx_sleep = ngx.sleep
local stream = ngx.config.subsystem == "stream"
-- lua-resty-core declares them already; the pcall makes us independent of the order.
pcall(ffi.cdef, "double ngx_http_lua_ffi_now(void);")
pcall(ffi.cdef, "double ngx_stream_lua_ffi_now(void);")
local function lookup()
    local C = ffi.C
    return stream and C.ngx_stream_lua_ffi_now or C.ngx_http_lua_ffi_now
end
local found, fn = pcall(lookup)
local ffi_now = found and fn or ngx_now
--- ngx.now(): seconds (with ms) of the event loop's cached time.
function _M.now()
    -- A local, then the return: what lua-resty-core 0.1.33 did to its ngx.now for the same reason.
    local t = ffi_now()
    return t
end
--- seconds as a timeout nginx's timers can count: 1 ms at least. They count
-- whole ms, and a wait of less is one of none: a semaphore's wait(0.0004)
-- returns "timeout" at once without yielding, and a loop waiting for its
-- deadline that way spins through its last fraction of a ms.
local function timeout(seconds)
    return seconds < 0.001 and 0.001 or seconds
end
--- ngx.sleep(seconds), for 1 ms at least: a shorter sleep is ngx.sleep(0), a
-- yield that waits for nothing, and on a stock nginx (no OpenResty
-- delayed-events patch) also "[warn] ngx.sleep(0) called without delayed
-- events patch" in the error log each time (thousands of lines while a mutex
-- guard waited on its local fallback, rate_fallback_spec).
function _M.sleep(seconds)
    ngx_sleep(timeout(seconds))
end
_M.timeout = timeout
--- Seconds an exiting worker (nginx -s reload or quit) goes on with its cleanup,
-- at most: the sweep of releases Redis did not confirm (core/orphans.lua),
-- retried until their leases would have expired, so that a key is not locked
-- for its whole ttl once Redis is back (a lost acquire, retried for
-- LOST_HORIZON elsewhere, would keep the old worker alive for minutes); and
-- the take-back of acquires whose callers went away (redis/takeback.lua).
_M.EXIT_HORIZON = 60
return _M
