// Per-guard event counters and circuit-breaker state, in the shared dict so all
// workers of an nginx instance share them (and the status endpoint reads them).
//   "c:<guard>:<event>"  counter
//   "b:open:<guard>"     present while the breaker is open (expires after the cool-down)
//   "b:half:<guard>"     present after an opening until Redis answers again: one more failure re-opens
//   "b:fail:<guard>"     consecutive failures while closed

/** Every event a guard counts, in the order status pages list them. */
export const EVENTS = [
  "acquired", // the request got its lock or permit
  "rejected", // busy: 409 / 429 at once
  "waited", // had to wait for the key (then acquired or timed out)
  "timed_out", // waited `wait` ms in vain
  "renewed", // a lease of an in-flight request was extended
  "lost", // renewal found the lease gone while the request was in flight
  "aborted", // the client went away while an upstream worked: key kept until its lease runs out
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

export function incr(dict: NgxSharedDict, guard: string, event: Event): void {
  dict.incr("c:" + guard + ":" + event, 1, 0);
}

export function count(dict: NgxSharedDict, guard: string, event: Event): number {
  const [v] = dict.get("c:" + guard + ":" + event);
  return type(v) === "number" ? (v as number) : 0;
}

export type BreakerState = "closed" | "open" | "half_open";

export function breakerState(dict: NgxSharedDict, guard: string): BreakerState {
  if (dict.get("b:open:" + guard)[0] !== undefined) return "open";
  if (dict.get("b:half:" + guard)[0] !== undefined) return "half_open";
  return "closed";
}

export function breakerOpen(dict: NgxSharedDict, guard: string): boolean {
  return dict.get("b:open:" + guard)[0] !== undefined;
}

/** Count a Redis failure; open the breaker after `threshold` in a row, or at once when half open. */
export function failure(dict: NgxSharedDict, guard: string, threshold: number, cooldownMs: number): void {
  let trip = dict.get("b:half:" + guard)[0] !== undefined;
  if (!trip) {
    const [n] = dict.incr("b:fail:" + guard, 1, 0);
    trip = n !== undefined && n >= threshold;
  }
  if (trip && dict.get("b:open:" + guard)[0] === undefined) {
    dict.set("b:open:" + guard, true, cooldownMs / 1000);
    dict.set("b:half:" + guard, true);
    dict.delete("b:fail:" + guard);
    incr(dict, guard, "breaker_opened");
    ngx.log(ngx.ERR, "dlock: guard ", guard, ": Redis keeps failing, not calling it for ", cooldownMs, " ms");
  }
}

/** Redis answered: close the breaker and forget past failures. */
export function success(dict: NgxSharedDict, guard: string): void {
  if (dict.get("b:half:" + guard)[0] !== undefined) {
    dict.delete("b:half:" + guard);
    ngx.log(ngx.NOTICE, "dlock: guard ", guard, ": Redis answers again, breaker closed");
  }
  if (dict.get("b:fail:" + guard)[0] !== undefined) {
    dict.delete("b:fail:" + guard);
  }
}

/** Move a per-guard gauge (in_flight...) by delta; shared by the workers of this nginx. */
export function adjust(dict: NgxSharedDict, guard: string, gauge: string, delta: number): void {
  dict.incr("g:" + guard + ":" + gauge, delta, 0);
}

/** A per-guard gauge's value now (0 when never moved). */
export function gauge(dict: NgxSharedDict, guard: string, name: string): number {
  const [v] = dict.get("g:" + guard + ":" + name);
  return type(v) === "number" ? (v as number) : 0;
}
