// What every guard has, whatever its mode: how it words a failure of Redis,
// and where it can decide at all. (Its options: options.ts.)

import * as check from "../core/check";
import * as giveback from "./giveback";
import * as keys from "./key";
import * as stats from "./stats";

const lua_tostring = tostring;
const get_phase = ngx.get_phase;
const ngx_log = ngx.log;
const ERR = ngx.ERR;
const ngx_header = ngx.header;
const ngx_exit = ngx.exit;
const math_max = math.max;
const math_ceil = math.ceil;
const lua_pairs = pairs;
const lua_getmetatable = getmetatable;
const given_back = giveback.refused;

/** The `fleet` of an on_error = "local" guard: how many nginx share `what` (its limit, lock or permits). */
export function fleet(v: unknown, what: string): LuaMultiReturn<[number | undefined, string | undefined]> {
  return check.integer("fleet", v, 1, 10000, "a positive integer with on_error = \"local\" (how many nginx share the " + what + ")");
}

/**
 * What a guard's log lines say it does with a request whose key could not be
 * computed: "refused with 503 (on_error = \"deny\")". on_error decides it, but
 * "local" refuses: a key error is the operator's, and no share of a limit applies.
 */
export function errorWhat(onError: "allow" | "deny" | "local", errorStatus: number): string {
  if (onError === "local") return "refused with " + lua_tostring(errorStatus) + " (on_error = \"local\": a key error is not Redis failing)";
  return onError === "deny" ? "refused with " + lua_tostring(errorStatus) + " (on_error = \"deny\")"
    : "let through unguarded (on_error = \"allow\")";
}

/** What a guard's log lines say it does with a request without its key: "refused with 400 (on_missing = \"reject\")". */
export function missingWhat(onMissing: "pass" | "reject", missingStatus: number): string {
  return onMissing === "reject" ? "refused with " + lua_tostring(missingStatus) + " (on_missing = \"reject\")"
    : "let through unguarded (on_missing = \"pass\")";
}

/**
 * Phases where a guard can decide: it needs cosockets and ngx.exit. Elsewhere
 * (log, filters, set_by_lua, init) the response is gone or there is no request:
 * nothing to refuse, so access() says so and returns instead of raising.
 */
const DECIDES = check.set("rewrite", "access", "content");

/** Guards that said so, per worker: one line each, not one per request. */
const misplaced = new LuaTable<string, boolean>();

/** Whether access() of guard `name` can run now; logs once per guard when it cannot. */
export function decides(name: string): boolean {
  const phase = get_phase();
  if (DECIDES.has(phase)) return true;
  if (!misplaced.has(name)) {
    misplaced.set(name, true);
    ngx_log(ERR, "dlock: guard ", name, ": access() called in the ", phase,
      " phase, where it can refuse nothing: call it from access_by_lua or rewrite_by_lua");
  }
  return false;
}

/** Methods said called without their guard, per worker: one line each. */
const misusedCalls = new LuaTable<string, boolean>();

/**
 * Was a guard's method called without its guard (obj not of metatable mt: a
 * "." where ":" was meant)? The config's mistake, said at error level once
 * per worker and method. access() then ends the request with 500 (a guard
 * lets no request through that it did not judge); log() does nothing, and
 * the keeper ends the request's leases when it is gone.
 */
export function misused(obj: unknown, mt: object, call: string): boolean {
  if (lua_getmetatable(obj as object) === mt) return false;
  if (!misusedCalls.has(call)) {
    misusedCalls.set(call, true);
    ngx_log(ERR, "dlock: guard:", call, "() was called without its guard (with \".\" where \":\" was meant): ",
      "write guards.name:", call, "()");
  }
  if (call === "access" && DECIDES.has(get_phase())) ngx_exit(500);
  return true;
}

/**
 * End the request with a guard's refusal because Redis failed (or the breaker
 * is open): Retry-After (whole seconds, at least 1) when the wait is known,
 * and the guard's extra headers.
 */
function refuseDown(headers: LuaTable<string, string> | undefined, status: number, retryAfterMs: number | undefined): never {
  if (retryAfterMs !== undefined) ngx_header.set("Retry-After", math_max(1, math_ceil(retryAfterMs / 1000)));
  if (headers !== undefined) {
    for (const [k, v] of lua_pairs(headers)) ngx_header.set(k, v);
  }
  return ngx_exit(status);
}

/**
 * End the request with a guard's refusal that Redis decided (or that the
 * request's key earned): the guards it passed before give back what they took.
 */
function refuse(headers: LuaTable<string, string> | undefined, status: number, retryAfterMs: number | undefined): never {
  given_back();
  return refuseDown(headers, status, retryAfterMs);
}

/** What a guard needs to answer a request whose key it cannot have. */
export interface Keyed {
  readonly _dict: NgxSharedDict;
  readonly name: string;
  readonly _errorWhat: string;
  readonly _missingWhat: string;
  readonly _onError: string;
  readonly _onMissing: "pass" | "reject";
  readonly _errorStatus: number;
  readonly _missingStatus: number;
  readonly _headers: LuaTable<string, string> | undefined;
}

/**
 * The request's key by template t, or nil when there is none and the guard
 * has answered for it: a key that cannot be computed follows on_error (never
 * let through by on_missing = "pass"), a missing one on_missing. Counted, and
 * logged once per interval.
 */
export function keyOf(g: Keyed, t: keys.Template): string | undefined {
  const [raw, kerr] = keys.value(t);
  if (raw !== undefined) {
    keys.note(g, t, true);
    return raw;
  }
  if (kerr !== undefined) {
    stats.incr(g._dict, g.name, "key_errors");
    keys.failed(g.name, kerr, g._errorWhat);
    if (g._onError !== "allow") refuse(g._headers, g._errorStatus, undefined);
    return undefined;
  }
  stats.incr(g._dict, g.name, "missing_key");
  keys.note(g, t, false);
  if (g._onMissing === "reject") refuse(g._headers, g._missingStatus, undefined);
  return undefined;
}

// Exported by name: this module's own uses of them are locals, not lookups in its exports table.
export { refuse, refuseDown };
