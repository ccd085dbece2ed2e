// Lock tokens: the value stored in Redis that proves who owns a lease.
//
// Random tokens come from the kernel CSPRNG (getrandom(2) through the FFI,
// /dev/urandom as a fallback): math.random is seeded per worker and guessable,
// and ngx.now() collides between workers.

const ffi = require("ffi") as FfiModule;

// Another library may have declared the same prototypes; that is fine.
pcall(ffi.cdef, "long getrandom(void *buf, size_t buflen, unsigned int flags);");
pcall(ffi.cdef, "int gethostname(char *name, size_t len);");
pcall(ffi.cdef, "unsigned char *ngx_hex_dump(unsigned char *dst, const unsigned char *src, size_t len);");

const worker_pid = ngx.worker.pid;
const io_open = io.open;
const str_format = string.format;
const str_sub = string.sub;
const str_match = string.match;
const str_byte = string.byte;
const str_rep = string.rep;
const lua_pcall = pcall;
const lua_tostring = tostring;
const lua_tonumber = tonumber;
const math_min = math.min;

const RANDOM_BYTES = 16;
const buf = ffi.new("uint8_t[?]", 256);
// One getrandom(2) call fills a pool for 256 tokens, turned into hex in C at
// once; each token is its 32 characters of the pool, the only string a token
// makes. Each byte is used once. The pool belongs to one process: a fork (the
// master forking workers) must not hand the same bytes to two of them. (A pool
// of 16 tokens kept as a Lua string cost a system call and two strings of 256
// and 512 bytes every 16 acquires: strace and uprobes on the worker, 2026-11-29.)
const POOL = 4096;
const poolRaw = ffi.new("uint8_t[?]", POOL);
const poolHex = ffi.new("uint8_t[?]", 2 * POOL);
let poolLen = 0;
let poolPos = 0;
let poolPid = 0;

function lookupGetrandom(this: void): (this: void, b: FfiBuffer, len: number, flags: number) => number {
  return ffi.C.getrandom;
}
const [hasGetrandom] = lua_pcall(lookupGetrandom);

function urandom(n: number): string | undefined {
  const [f] = io_open("/dev/urandom", "rb");
  if (f === undefined) {
    return undefined;
  }
  const s = f.read(n);
  f.close();
  return s;
}

function lookupHexDump(this: void): LibC["ngx_hex_dump"] {
  return ffi.C.ngx_hex_dump;
}
const [hasHexDump] = lua_pcall(lookupHexDump);
const ffi_C = ffi.C;
const ffi_string = ffi.string;
const ffi_copy = ffi.copy;
/** Longest input hex() converts in C; longer ones go through string.format. */
const HEX_MAX = 256;
const hexBuf = ffi.new("uint8_t[?]", 2 * HEX_MAX);

/**
 * Lower-case hex of a (short) binary string. The gateways hash every request's
 * key: nginx's ngx_hex_dump does it in C, where a string.format of 20
 * arguments and its format string cost the worker about a microsecond.
 */
function hex(s: string): string {
  const n = s.length;
  if (hasHexDump && n <= HEX_MAX) {
    ffi_C.ngx_hex_dump(hexBuf, s, n);
    return ffi_string(hexBuf, 2 * n);
  }
  return str_format(str_rep("%02x", n), ...str_byte(s, 1, n));
}

/**
 * A new pool: true, or false when the kernel gives no random bytes. Above 256
 * bytes getrandom(2) may return fewer than asked for (a signal): what came is
 * used. Without getrandom, /dev/urandom; without ngx_hex_dump, string.format.
 */
function refill(): boolean {
  // getrandom returns a long: a boxed 64-bit cdata in LuaJIT, made a number here.
  let got = hasGetrandom ? lua_tonumber(ffi_C.getrandom(poolRaw, POOL, 0))! : -1;
  if (got < RANDOM_BYTES) {
    const s = urandom(POOL);
    if (s === undefined || s.length !== POOL) return false;
    ffi_copy(poolRaw, s, POOL);
    got = POOL;
  }
  const n = got - got % RANDOM_BYTES;
  if (hasHexDump) {
    ffi_C.ngx_hex_dump(poolHex, poolRaw, n);
  } else {
    for (let at = 0; at < n; at += HEX_MAX) {
      const part = hex(ffi_string(offset(poolRaw, at), math_min(HEX_MAX, n - at)));
      ffi_copy(offset(poolHex, 2 * at), part, part.length);
    }
  }
  poolLen = n;
  poolPos = 0;
  return true;
}

/** A fresh unguessable 128-bit token as 32 hex characters, or nil, err. */
function random(): LuaMultiReturn<[string | undefined, string | undefined]> {
  const pid = worker_pid();
  if (poolPos + RANDOM_BYTES > poolLen || poolPid !== pid) {
    if (!refill()) return $multi(undefined, "dlock: cannot read random bytes from the kernel");
    poolPid = pid;
  }
  const at = poolPos;
  poolPos = at + RANDOM_BYTES;
  return $multi(ffi_string(offset(poolHex, 2 * at), 2 * RANDOM_BYTES), undefined);
}

function hostname(): string {
  if (ffi.C.gethostname(buf, 255) === 0) {
    const [name] = str_match(ffi.string(buf), "^[%w%.%-_]+");
    if (name !== undefined) {
      return name;
    }
  }
  return "localhost";
}

let workerId: string | undefined;
let workerPid = 0;
let workerSerial = 0;

/**
 * A token that names this worker process and is still unique per lease:
 * "host:pid:random:n". Host, pid and a per-start random part make the worker
 * unique across a fleet and across restarts (pids get reused); n counts the
 * worker's leases, so a stale lease never carries its successor's token and
 * Redis alone tells them apart. Computed in the worker, not at require time: a
 * module loaded by init_by_lua runs in the master first, and forked workers
 * must not inherit the master's identity.
 */
export function worker(): LuaMultiReturn<[string | undefined, string | undefined]> {
  const pid = worker_pid();
  if (workerId === undefined || workerPid !== pid) {
    const [r, err] = random();
    if (r === undefined) {
      return $multi(undefined, err);
    }
    workerId = hostname() + ":" + lua_tostring(pid) + ":" + str_sub(r, 1, 16) + ":";
    workerPid = pid;
    workerSerial = 0;
  }
  workerSerial++;
  return $multi(workerId + lua_tostring(workerSerial), undefined);
}

// Exported by name: this module's own uses of them are locals, not lookups in its exports table.
export { hex, random };
