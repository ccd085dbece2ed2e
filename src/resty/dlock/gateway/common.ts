// What every guard has, whatever its mode: how it words a failure of Redis,
// and where it can decide at all. (Its options: options.ts.)

import * as check from "../core/check";

const lua_tostring = tostring;
const get_phase = ngx.get_phase;
const ngx_log = ngx.log;
const ERR = ngx.ERR;

/** What a guard's log lines say it does when Redis fails: "refused with 503 (on_error = \"deny\")". */
export function errorWhat(onError: "allow" | "deny" | "local", errorStatus: number): string {
  if (onError === "local") return "refused with " + lua_tostring(errorStatus) + " (on_error = \"local\": a key error is not Redis failing)";
  return onError === "deny" ? "refused with " + lua_tostring(errorStatus) + " (on_error = \"deny\")"
    : "let through unguarded (on_error = \"allow\")";
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
