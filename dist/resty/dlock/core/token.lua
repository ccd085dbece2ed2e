-- Generated from src/resty/dlock/core/token.ts by TypeScriptToLua: edit that file, not this one.
-- Lock tokens: the value stored in Redis that proves who owns a lease.
--
-- Random tokens come from the kernel CSPRNG (getrandom(2) through the FFI,
-- /dev/urandom as a fallback): math.random is seeded per worker and guessable,
-- and ngx.now() collides between workers.
local _M = {}
local ffi = require("ffi")
-- Another library may have declared the same prototypes; that is fine.
pcall(ffi.cdef, "long getrandom(void *buf, size_t buflen, unsigned int flags);")
pcall(ffi.cdef, "int gethostname(char *name, size_t len);")
pcall(ffi.cdef, "unsigned char *ngx_hex_dump(unsigned char *dst, const unsigned char *src, size_t len);")
local worker_pid = ngx.worker.pid
local io_open = io.open
local str_format = string.format
local str_sub = string.sub
local str_match = string.match
local str_byte = string.byte
local str_rep = string.rep
local lua_pcall = pcall
local lua_tostring = tostring
local lua_tonumber = tonumber
local math_min = math.min
local RANDOM_BYTES = 16
local buf = ffi.new("uint8_t[?]", 256)
-- One getrandom(2) call fills a pool for 256 tokens, turned into hex in C at
-- once; each token is its 32 characters of the pool, the only string a token
-- makes. Each byte is used once. The pool belongs to one process: a fork (the
-- master forking workers) must not hand the same bytes to two of them. (A pool
-- of 16 tokens kept as a Lua string cost a system call and two strings of 256
-- and 512 bytes every 16 acquires: strace and uprobes on the worker, 2026-11-29.)
local POOL = 4096
local poolRaw = ffi.new("uint8_t[?]", POOL)
local poolHex = ffi.new("uint8_t[?]", 2 * POOL)
local poolLen = 0
local poolPos = 0
local poolPid = 0
local function lookupGetrandom()
    return ffi.C.getrandom
end
local hasGetrandom = lua_pcall(lookupGetrandom)
local function urandom(n)
    local f = io_open("/dev/urandom", "rb")
    if f == nil then
        return nil
    end
    local s = f:read(n)
    f:close()
    return s
end
local function lookupHexDump()
    return ffi.C.ngx_hex_dump
end
local hasHexDump = lua_pcall(lookupHexDump)
local ffi_C = ffi.C
local ffi_string = ffi.string
local ffi_copy = ffi.copy
--- Longest input hex() converts in C; longer ones go through string.format.
local HEX_MAX = 256
local hexBuf = ffi.new("uint8_t[?]", 2 * HEX_MAX)
--- Lower-case hex of a (short) binary string. The gateways hash every request's
-- key: nginx's ngx_hex_dump does it in C, where a string.format of 20
-- arguments and its format string cost the worker about a microsecond.
local function hex(s)
    local n = #s
    if hasHexDump and n <= HEX_MAX then
        ffi_C.ngx_hex_dump(hexBuf, s, n)
        return ffi_string(hexBuf, 2 * n)
    end
    return str_format(str_rep("%02x", n), str_byte(s, 1, n))
end
--- A new pool: true, or false when the kernel gives no random bytes. Above 256
-- bytes getrandom(2) may return fewer than asked for (a signal): what came is
-- used. Without getrandom, /dev/urandom; without ngx_hex_dump, string.format.
local function refill()
    -- getrandom returns a long: a boxed 64-bit cdata in LuaJIT, made a number here.
    local got = hasGetrandom and lua_tonumber(ffi_C.getrandom(poolRaw, POOL, 0)) or -1
    if got < RANDOM_BYTES then
        local s = urandom(POOL)
        if s == nil or #s ~= POOL then
            return false
        end
        ffi_copy(poolRaw, s, POOL)
        got = POOL
    end
    local n = got - got % RANDOM_BYTES
    if hasHexDump then
        ffi_C.ngx_hex_dump(poolHex, poolRaw, n)
    else
        do
            local at = 0
            while at < n do
                local part = hex(ffi_string(poolRaw + at, math_min(HEX_MAX, n - at)))
                ffi_copy(poolHex + 2 * at, part, #part)
                at = at + HEX_MAX
            end
        end
    end
    poolLen = n
    poolPos = 0
    return true
end
--- A fresh unguessable 128-bit token as 32 hex characters, or nil, err.
local function random()
    local pid = worker_pid()
    if poolPos + RANDOM_BYTES > poolLen or poolPid ~= pid then
        if not refill() then
            return nil, "dlock: cannot read random bytes from the kernel"
        end
        poolPid = pid
    end
    local at = poolPos
    poolPos = at + RANDOM_BYTES
    return ffi_string(poolHex + 2 * at, 2 * RANDOM_BYTES), nil
end
local function hostname()
    if ffi.C.gethostname(buf, 255) == 0 then
        local name = str_match(ffi.string(buf), "^[%w%.%-_]+")
        if name ~= nil then
            return name
        end
    end
    return "localhost"
end
local workerId
local workerPid = 0
local workerSerial = 0
--- A token that names this worker process and is still unique per lease:
-- "host:pid:random:n". Host, pid and a per-start random part make the worker
-- unique across a fleet and across restarts (pids get reused); n counts the
-- worker's leases, so a stale lease never carries its successor's token and
-- Redis alone tells them apart. Computed in the worker, not at require time: a
-- module loaded by init_by_lua runs in the master first, and forked workers
-- must not inherit the master's identity.
function _M.worker()
    local pid = worker_pid()
    if workerId == nil or workerPid ~= pid then
        local r, err = random()
        if r == nil then
            return nil, err
        end
        workerId = hostname() .. ":" .. lua_tostring(pid) .. ":" .. str_sub(r, 1, 16) .. ":"
        workerPid = pid
        workerSerial = 0
    end
    workerSerial = workerSerial + 1
    return workerId .. lua_tostring(workerSerial), nil
end
-- Exported by name: this module's own uses of them are locals, not lookups in its exports table.
_M.hex = hex
_M.random = random
return _M
