// nginx variables of the current request, read with the FFI call ngx.var's
// getter makes (lua-resty-core's var.lua), from a function of our own.
//
// Why not ngx.var: an operator's handler that reads ngx.var from its
// content_by_lua chunk makes LuaJIT blacklist the getter (a trace that starts
// in it cannot return into the chunk's frame: "NYI: return to lower frame",
// then "blacklisted"), and from then on every trace that calls it aborts,
// a guard's whole access and log path included. jit.v under `wrk -c50` on the
// bench's nginx: the rate, dedup and mutex guards' traces "blacklisted at
// var.lua:68". Same answers as ngx.var; where the call is not there (another
// subsystem, a name longer than the buffer, an error) ngx.var answers.

const ffi = require("ffi") as FfiModule;
const base = require("resty.core.base") as RestyCoreBase;

const ngx_var = ngx.var;
const get_request = base.get_request;
const ffi_string = ffi.string as (this: void, p: FfiBuffer, len: number) => string;

// lua-resty-core declares it already; the pcall makes us independent of the order.
pcall(ffi.cdef, "int ngx_http_lua_ffi_var_get(ngx_http_request_t *r, const char *name_data, size_t name_len, " +
  "char *lowcase_buf, int capture_id, char **value, size_t *value_len, char **err);");

interface VarC {
  ngx_http_lua_ffi_var_get(this: void, r: NgxRequestPtr, name: string, nameLen: number, lowcase: FfiBuffer,
    capture: number, value: FfiBuffer, valueLen: FfiBuffer, err: FfiBuffer): number;
}

function lookup(this: void): VarC["ngx_http_lua_ffi_var_get"] {
  return (ffi.C as unknown as VarC).ngx_http_lua_ffi_var_get;
}
const [found, fn] = pcall(lookup);
const var_get = found && ngx.config.subsystem === "http" ? (fn as VarC["ngx_http_lua_ffi_var_get"]) : undefined;

/** Longest variable name read here (lower-cased into `lower`); longer ones go through ngx.var. */
const NAME_MAX = 256;
const lower = ffi.new("char[?]", NAME_MAX);
const valuePtr = ffi.new("char *[?]", 1) as FfiBuffer & LuaTable<number, FfiBuffer>;
const valueLen = ffi.new("size_t[?]", 1) as FfiBuffer & LuaTable<number, number>;
const errPtr = ffi.new("char *[?]", 1);

const OK = 0;
const DECLINED = -5;

/** ngx.var[name] of the current request: its value, or nil when the variable is not set. */
export function get(name: string): string | undefined {
  const n = name.length;
  if (var_get !== undefined && n <= NAME_MAX) {
    const r = get_request();
    if (r !== undefined) {
      const rc = var_get(r, name, n, lower, 0, valuePtr, valueLen, errPtr);
      if (rc === OK) return ffi_string(valuePtr.get(0), valueLen.get(0));
      if (rc === DECLINED) return undefined;
    }
  }
  return ngx_var.get(name);
}
