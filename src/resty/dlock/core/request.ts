// Which request is running, and is a request seen earlier still alive?
//
// The gateway must find a request's leases again in its log phase and must
// notice a request that ended without running its log(). ngx.ctx cannot do
// either: an internal redirect (error_page, try_files, X-Accel-Redirect,
// ngx.exec) starts the request over with a fresh ngx.ctx, and the final
// location may have no log_by_lua at all.
//
// What does survive is (a) the ngx_http_request_t itself: its address stays
// the same through internal redirects, and no two live requests of a worker
// share it; and (b) the ngx.ctx table of the access phase: ngx_lua keeps it in
// the registry (lua-resty-core's `ngx_lua_ctx_tables`, slot `ref`) until the
// request's pool is freed at the very end of the request, redirects or not.
// So "slot `ref` still holds that table" means "that request is still alive"
// (a slot is reused only after the request that had it is gone, and then it
// holds another table). An address alone is not enough: a later request can
// get the address of one that is gone.

const ffi = require("ffi") as FfiModule;
const base = require("resty.core.base") as RestyCoreBase;

const ngx_ = ngx;
const get_request = base.get_request;
const ffi_cast = ffi.cast;
const lua_tonumber = tonumber;
const lua_pcall = pcall;
// A ctype object, not the string: the interpreter parses a declaration string on every cast.
const uintptr_t = ffi.typeof("uintptr_t");

// lua-resty-core declares both already; the pcalls make us independent of the order.
pcall(ffi.cdef, "int ngx_http_lua_ffi_get_ctx_ref(ngx_http_request_t *r, int *in_ssl_phase, int *ssl_ctx_ref);");
// ngx.is_subrequest, without the getter of ngx's metatable.
pcall(ffi.cdef, "int ngx_http_lua_ffi_is_subrequest(ngx_http_request_t *r);");

function lookup(this: void, name: string): unknown {
  return (ffi.C as unknown as LuaTable<string, unknown>).get(name);
}

/** ngx_lua's C function `name`, or nil when this nginx has none (looking a missing symbol up raises). */
function cfunction<F>(name: string): F | undefined {
  const [ok, f] = lua_pcall(lookup, name);
  if (!ok) return undefined;
  return f as F;
}

type GetCtxRef = (this: void, r: NgxRequestPtr, inSsl: FfiBuffer, sslRef: FfiBuffer) => number;
const getCtxRef = cfunction<GetCtxRef>("ngx_http_lua_ffi_get_ctx_ref");
const inSsl = ffi.new("int[1]", 1);
const sslRef = ffi.new("int[1]", 1);

const isSubrequest = cfunction<(this: void, r: NgxRequestPtr) => number>("ngx_http_lua_ffi_is_subrequest");
// A request's connection is its second field in every nginx (after a uint32_t signature).
const fields = ffi.typeof("void **");

// Set once by lua-resty-core when it loads (before any init_by_lua code).
const registered = (debug.getregistry() as unknown as LuaTable<string, unknown>).get("ngx_lua_ctx_tables");
const ctxTables = type(registered) === "table" ? (registered as LuaTable<number, unknown>) : undefined;

/** A request as seen from its access phase. */
export interface Anchor {
  /** The request's address: the same in every location it passes through. */
  readonly id: number;
  /** Its ngx.ctx of that phase, and where the registry keeps it (-1: unknown). */
  readonly ctx: LuaTable<string, unknown>;
  readonly ref: number;
}

// Lua's own coroutine.status, which ngx_lua keeps as coroutine._status: it reads
// the coroutine alone. ngx_lua's coroutine.status reads the coroutine's context
// in the pool of the request or timer that made it, freed once that one ended:
// fine for a coroutine of the running request, not for one of a timer gone.
type StatusFn = (this: void, co: LuaThread) => string;
const lua_rawget = rawget as unknown as (this: void, t: object, k: string) => unknown;
const kept = lua_rawget(coroutine, "_status") as StatusFn | undefined;
const std_status: StatusFn = kept ?? coroutine.status;

/** Has co, a timer's or a light thread's coroutine, returned (or raised)? Safe whatever made it. */
export function finished(co: LuaThread): boolean {
  return std_status(co) === "dead";
}

/** False when this nginx cannot tell whether a request is over (then only log() ends leases). */
const canWatch = getCtxRef !== undefined && ctxTables !== undefined;

/** The current request's id (its address), or nil outside a request. */
export function id(): number | undefined {
  const r = get_request();
  if (r === undefined) {
    return undefined;
  }
  const id = lua_tonumber(ffi_cast(uintptr_t, r));  // not a tail call: see core/clock.ts
  return id;
}

/**
 * The current request's id, its ngx.ctx and where the registry keeps that
 * (-1: unknown): an anchor's fields, for a record that is its own anchor. nil outside a request.
 */
function here(): LuaMultiReturn<[number | undefined, LuaTable<string, unknown>, number]> {
  const r = get_request();
  if (r === undefined) {
    return $multi(undefined, undefined!, -1);
  }
  // Reading ngx.ctx creates the table and registers it, so its slot exists afterwards.
  const ctx = ngx_.ctx;
  let ref = -1;
  if (canWatch) {
    const n = getCtxRef!(r, inSsl, sslRef);
    if (n >= 0 && ctxTables!.get(n) === ctx) {
      ref = n;
    }
  }
  return $multi(lua_tonumber(ffi_cast(uintptr_t, r))!, ctx, ref);
}

/** The current request, anchored so that alive() can tell when it is over. */
export function anchor(): Anchor | undefined {
  const [rid, ctx, ref] = here();
  if (rid === undefined) {
    return undefined;
  }
  return { id: rid, ctx, ref };
}

/** The address of request r's connection. */
function connectionOf(r: NgxRequestPtr): number {
  const c = lua_tonumber(ffi_cast(uintptr_t, (ffi_cast(fields, r) as unknown as LuaTable<number, FfiScalar>).get(1)))!;
  return c;
}

/**
 * When the current request is a subrequest: its main request, as the address
 * of their connection (nginx gives a subrequest its main request's; each
 * HTTP/2 or HTTP/3 stream has one of its own). nil for a main request.
 */
export function mainOf(): number | undefined {
  const r = get_request();
  if (r === undefined || isSubrequest === undefined || isSubrequest(r) !== 1) return undefined;
  return connectionOf(r);
}

/** The address of the current request's connection (its subrequests' too); nil outside a request. */
export function connection(): number | undefined {
  const r = get_request();
  if (r === undefined) return undefined;
  return connectionOf(r);
}

/** Is the request still running (up to and including its log phase)? True when it cannot be told. */
export function alive(a: Anchor): boolean {
  if (a.ref < 0) {
    return true;
  }
  return ctxTables!.get(a.ref) === a.ctx;
}

// Exported by name: this module's own uses of them are locals, not lookups in its exports table.
export { canWatch, here };
