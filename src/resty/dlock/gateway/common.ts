// Options every guard takes, whatever its mode: how it refuses (error_status,
// extra headers) and when it stops calling a Redis that keeps failing.

import * as check from "../core/check";

export interface Common {
  readonly errorStatus: number;
  readonly headers: LuaTable<string, string> | undefined;
  readonly breakerFailures: number;
  readonly breakerCooldown: number;
}

/** o[name], or dflt when it is nil. */
export function opt(o: LuaTable<string, unknown>, name: string, dflt: unknown): unknown {
  const v = o.get(name);
  return v === undefined ? dflt : v;
}

/** error_status, headers, breaker_failures and breaker_cooldown, with their defaults. */
export function parse(o: LuaTable<string, unknown>): LuaMultiReturn<[Common | undefined, string | undefined]> {
  const [errorStatus, e1] = check.integer("error_status", opt(o, "error_status", 503), 200, 599, "an HTTP status code");
  if (errorStatus === undefined) return $multi(undefined, e1);
  let headers: LuaTable<string, string> | undefined;
  const h = o.get("headers");
  if (h !== undefined) {
    if (type(h) !== "table") return check.fail("headers must be a table of name = value strings", h);
    for (const [k, v] of pairs(h as LuaTable<AnyNotNil, unknown>)) {
      if (type(k) !== "string" || type(v) !== "string") return check.fail("headers must be a table of name = value strings", k);
    }
    headers = h as LuaTable<string, string>;
  }
  const [breakerFailures, e2] = check.integer("breaker_failures", opt(o, "breaker_failures", 3), 1, 1000000, "a positive integer");
  if (breakerFailures === undefined) return $multi(undefined, e2);
  const [breakerCooldown, e3] = check.integer("breaker_cooldown", opt(o, "breaker_cooldown", 5000), 1, 3600000, "a positive integer of ms");
  if (breakerCooldown === undefined) return $multi(undefined, e3);
  return $multi({ errorStatus, headers, breakerFailures, breakerCooldown }, undefined);
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
  const phase = ngx.get_phase();
  if (DECIDES.has(phase)) return true;
  if (!misplaced.has(name)) {
    misplaced.set(name, true);
    ngx.log(ngx.ERR, "dlock: guard ", name, ": access() called in the ", phase,
      " phase, where it can refuse nothing: call it from access_by_lua or rewrite_by_lua");
  }
  return false;
}
