// Per-guard event counters, gauges and the keys of the circuit breaker
// (breaker.ts), in the shared dict so all workers of an nginx instance share
// them (and the status endpoint reads them).
//   "c:<guard>:<event>"  counter
//   "g:<guard>:<gauge>"  gauge (in_flight)
//   "b:open:<guard>"     until when the breaker is open (epoch s; 0: never opened)
//   "b:fail:<guard>"     consecutive failures while closed; HALF after an opening,
//                        until Redis answers again (one more failure re-opens)
// Numbers made with the guard (prepare()): an incr, or a number replacing a number,
// needs no memory: a dict full of held leases still trips and counts.

import * as dictcount from "../core/dictcount";

const lua_type = type;
const lua_ipairs = ipairs;

/** Every event a guard counts, in the order status pages list them. */
export const EVENTS = [
  "acquired", // the request got its lock or permit
  "rejected", // busy: 409 / 429 at once
  "waited", // had to wait for the key (then acquired or timed out)
  "timed_out", // waited `wait` ms in vain
  "renewed", // a lease of an in-flight request was extended
  "lost", // renewal found the lease gone while the request was in flight
  "aborted", // the client went away while an upstream worked, or it timed out: key kept until its lease runs out
  "unlogged", // the request ended without log(): its lease was released when the keeper noticed
  "redis_errors", // Redis failed (connect, timeout, error reply)
  "failed_open", // let through because of a Redis failure (on_error = "allow")
  "failed_closed", // refused because of a Redis failure (on_error = "deny")
  "short_circuited", // Redis skipped: breaker open
  "breaker_opened", // times the breaker opened
  "missing_key", // no key in the request
  "key_errors", // the key could not be computed (its function raised or returned a non-string): on_error
  // idempotency mode
  "stored", // a first response was stored for replay
  "replayed", // a retry got the stored response (Idempotent-Replayed: true)
  "conflict", // a duplicate of a request still in flight: 409 (or timed out waiting)
  "mismatch", // the key came with another request (method, path, query or body): 422
  "not_stored", // a response not stored: a status not in `store`, over max_body, or the store failed
  // on_error = "local" (rate, concurrency, mutex): decided by this nginx's share while Redis could not decide
  "local_admitted",
  "local_rejected",
] as const;

export type Event = (typeof EVENTS)[number];
export type { Keys };
/** The value of "b:fail:<guard>" between an opening and the next answer from Redis. */
const HALF = -1;

/** A guard's dict keys, made once. */
interface Keys {
  readonly events: LuaTable<string, string>;
  readonly gauges: LuaTable<string, string>;
  readonly open: string;
  readonly fail: string;
  /** Present while one request (or timer) of this nginx asks a half-open breaker's Redis whether it is back. */
  readonly probe: string;
}
const keysOf = new LuaTable<string, Keys>();

function make(guard: string): Keys {
  const events = new LuaTable<string, string>();
  for (const i of $range(1, EVENTS.length)) events.set(EVENTS[i - 1]!, "c:" + guard + ":" + EVENTS[i - 1]!);
  const k: Keys = {
    events, gauges: new LuaTable(), open: "b:open:" + guard, fail: "b:fail:" + guard, probe: "b:probe:" + guard,
  };
  keysOf.set(guard, k);
  return k;
}

function keys(guard: string): Keys {
  return keysOf.get(guard) ?? make(guard);
}

function gaugeKey(guard: string, name: string): string {
  const k = keys(guard);
  const key = k.gauges.get(name);
  if (key !== undefined) return key;
  const made = "g:" + guard + ":" + name;
  k.gauges.set(name, made);
  return made;
}

const PREPARED: Event[] = ["acquired", "rejected", "redis_errors", "failed_open", "failed_closed", "short_circuited", "breaker_opened"];
/** Make guard's in_flight, breaker keys and main counters (PREPARED; others as they first count) while the dict has room. */
export function prepare(dict: NgxSharedDict, guard: string): void {
  const k = keys(guard);
  for (const [_, e] of lua_ipairs(PREPARED)) dict.safe_add(k.events.get(e), 0);
  dict.safe_add(gaugeKey(guard, "in_flight"), 0);
  // An older release's breaker ("half", a key with a ttl) reads as half open: the next failure opens it.
  if (!dict.safe_add(k.fail, 0)[0] && lua_type(dict.get(k.fail)[0]) !== "number") dict.safe_set(k.fail, HALF);
  if (!dict.safe_add(k.open, 0)[0] && lua_type(dict.get(k.open)[0]) !== "number") dict.safe_set(k.open, 0);
}

function incr(dict: NgxSharedDict, guard: string, event: Event): void {
  dictcount.count(dict, keys(guard).events.get(event), 1);
}

export function count(dict: NgxSharedDict, guard: string, event: Event): number {
  const [v] = dict.get(keys(guard).events.get(event));
  return lua_type(v) === "number" ? (v as number) : 0;
}

/** Move a per-guard gauge (in_flight...) by delta; shared by the workers of this nginx. */
export function adjust(dict: NgxSharedDict, guard: string, gauge: string, delta: number): void {
  dictcount.count(dict, gaugeKey(guard, gauge), delta);
}

/** A per-guard gauge's value now (0 when never moved). */
export function gauge(dict: NgxSharedDict, guard: string, name: string): number {
  const [v] = dict.get(gaugeKey(guard, name));
  return lua_type(v) === "number" ? (v as number) : 0;
}

// Exported by name: this module's own uses of them are locals, not lookups in its exports table.
export { HALF, incr, keys };
