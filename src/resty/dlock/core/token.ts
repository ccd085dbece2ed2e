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

const RANDOM_BYTES = 16;
const buf = ffi.new("uint8_t[?]", 256);
// One getrandom(2) call fills a pool for 16 tokens, kept as hex (formatted
// once per pool, not per token); each byte is used once. The pool belongs to
// one process: a fork (the master forking workers) must not hand the same
// bytes to two of them.
const POOL = 256;
let pool = "";
let poolPos = POOL + 1;
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

/** `n` (<= 256) bytes from the CSPRNG, or nil if the kernel refuses. */
function randomBytes(n: number): string | undefined {
  if (hasGetrandom) {
    if (ffi.C.getrandom(buf, n, 0) === n) {
      return ffi.string(buf, n);
    }
  }
  return urandom(n);
}

function lookupHexDump(this: void): LibC["ngx_hex_dump"] {
  return ffi.C.ngx_hex_dump;
}
const [hasHexDump] = lua_pcall(lookupHexDump);
const ffi_C = ffi.C;
const ffi_string = ffi.string;
/** Longest input hex() converts in C (a pool of random bytes); longer ones go through string.format. */
const HEX_MAX = POOL;
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

/** A fresh unguessable 128-bit token as 32 hex characters, or nil, err. */
function random(): LuaMultiReturn<[string | undefined, string | undefined]> {
  const pid = worker_pid();
  if (poolPos + RANDOM_BYTES - 1 > POOL || poolPid !== pid) {
    const s = randomBytes(POOL);
    if (s === undefined || s.length !== POOL) {
      return $multi(undefined, "dlock: cannot read random bytes from the kernel");
    }
    pool = hex(s);
    poolPos = 1;
    poolPid = pid;
  }
  const first = 2 * poolPos - 1;
  poolPos += RANDOM_BYTES;
  return $multi(str_sub(pool, first, first + 2 * RANDOM_BYTES - 1), undefined);
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
