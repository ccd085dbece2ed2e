// The bounded fallback of concurrency and mutex guards (on_error = "local"):
// while Redis cannot decide (a call failed, or the breaker is open), each nginx
// lets through at most its share of the key's permits at once, counted in its
// shared dict: permits / fleet (at least 1) for concurrency, one request at a
// time for mutex (a reader of `shared` methods too: no shared mode locally).
// With the fleet stated right, the fleet together holds no more than the
// permits (plus what the rounding up to 1 adds when permits < fleet; a mutex
// is one per nginx: `fleet` at once over the fleet).
//
// A share is `share` slots per key in the dict, "ll:<guard>:<key>:<i>", each
// taken with add() (atomic across workers) and deleted when the request ends
// (the guard's log(), or, for a request that ended without it, the next
// access() of this worker that finds the key's slots held). A client that went
// away while the upstream works leaves its slot to run out, as a Redis lease is
// kept. A slot also expires after the guard's ttl, not renewed: a request
// longer than the ttl loses its slot. Waiting
// (`wait`) polls the slots, 5 to 50 ms apart, until the wait runs out.
//
// After the breaker's cool-down no request asks Redis until a probe in a timer
// of this nginx (an acquire and release of a key of its own) found Redis back:
// meanwhile requests keep deciding locally, none waits on a Redis that may
// still be gone. What was taken locally is not carried over to Redis.

import * as check from "../core/check";
import * as common from "./common";
import type * as guard from "./guard";
import * as request from "../core/request";
import * as upstream from "./upstream";
import * as stats from "./stats";
import * as breaker from "./breaker";
import * as clock from "../core/clock";

const clock_now = clock.now;
const clock_sleep = clock.sleep;
const ngx_update_time = ngx.update_time;
const lua_pairs = pairs;
const lua_tostring = tostring;
const math_max = math.max;
const math_min = math.min;
const math_floor = math.floor;
const math_ceil = math.ceil;
const incr = stats.incr;

/** A slot this worker's request holds. */
interface Held {
  readonly anchor: request.Anchor;
  readonly slot: string;
}

/** A guard's local share, with what this worker's requests hold of it. */
export interface Local {
  /** Slots per key on this nginx. */
  readonly share: number;
  /** Dict key prefix of the slots: "ll:<guard>:". */
  readonly prefix: string;
  /** Seconds a slot lasts at most (the guard's ttl). */
  readonly ttl: number;
  /** Seconds one probe of a half-open breaker has before another may start. */
  readonly probeFor: number;
  /** Per worker, by request id. */
  readonly held: LuaTable<number, Held>;
  count: number;
}

/** The guards of this nginx with a local share (gateway.log() ends their slots too). */
const withLocal: guard.Guard[] = [];

/** Note a guard made with a local share. */
export function register(g: guard.Guard): void {
  withLocal.push(g);
}

/** Entries of `held` before the dead ones are swept. */
const SWEEP = 256;

/** The local share of a guard of mode `mode` with `permits`, for `fleet` nginx; nil and the error for a bad fleet. */
export function create(mode: string, permits: number, fleet: unknown, name: string, ttlMs: number, probeFor: number):
  LuaMultiReturn<[Local | undefined, string | undefined]> {
  const [n, err] = common.fleet(fleet, mode === "mutex" ? "lock" : "permits");
  if (n === undefined) return $multi(undefined, err);
  const share = mode === "mutex" ? 1 : math_max(1, math_floor(permits / n));
  return $multi({
    share, prefix: "ll:" + name + ":", ttl: ttlMs / 1000, probeFor,
    held: new LuaTable<number, Held>(), count: 0,
  }, undefined);
}

/** Forget the slot request rid held: given back, or (its client gone while the upstream works) left to run out. */
function forget(g: guard.Guard, l: Local, rid: number, slot: string, giveBack: boolean): void {
  if (giveBack) g._dict.delete(slot);
  l.held.set(rid, undefined as unknown as Held);
  l.count--;
  stats.adjust(g._dict, g.name, "in_flight", -1);
}

/** Free the slots of requests of this worker that ended without log(). */
function sweep(g: guard.Guard, l: Local): void {
  for (const [k, h] of lua_pairs(l.held)) {
    if (!request.alive(h.anchor)) forget(g, l, k, h.slot, true);
  }
}

/**
 * A free slot of hashed key k, taken; nil when all `share` are held, or when
 * the dict has no room for one (add would evict another request's slot).
 */
function take(g: guard.Guard, l: Local, k: string): string | undefined {
  for (const i of $range(1, l.share)) {
    const slot = l.prefix + k + ":" + lua_tostring(i);
    const [ok] = g._dict.safe_add(slot, true, l.ttl);
    if (ok === true) return slot;
  }
  return undefined;
}

/**
 * A free slot of hashed key k, taken; when all are held, after freeing those of
 * this worker's requests that ended without log() (a slot must not outlive its
 * request until the ttl only because no log phase ran).
 */
function takeOrSweep(g: guard.Guard, l: Local, k: string): string | undefined {
  const slot = take(g, l, k);
  if (slot !== undefined || l.count === 0) return slot;
  sweep(g, l);
  return take(g, l, k);
}

/** Ms until the first of k's slots runs out: when a refused request may try again at the latest. */
function retryAfter(g: guard.Guard, l: Local, k: string): number {
  let least = l.ttl;
  for (const i of $range(1, l.share)) {
    const [left] = g._dict.ttl(l.prefix + k + ":" + lua_tostring(i));
    if (left !== undefined && left < least) least = left;
  }
  return math_ceil(least * 1000);
}

/** In a timer: does Redis answer again? An acquire and release of the guard's probe key closes the breaker, or opens it again. */
function probeRedis(this: void, premature: boolean, g: guard.Guard): void {
  if (premature) return;
  const [lease, err] = g._locks.acquire("dlock-probe", g._tryOpts);
  if (lease === undefined && err !== "busy" && err !== "timeout") {
    breaker.probeFailed(g, err, g._fallback!.probeFor, probeRedis);
    return;
  }
  if (lease !== undefined) lease.release();
  breaker.success(g._dict, g.name);
}

/**
 * Decide for hashed key k on this nginx alone: let the request through holding
 * a slot (released by finish()), or refuse it with the guard's reject_status
 * once `wait` ran out.
 */
export function access(g: guard.Guard, l: Local, k: string,
  refuse: (this: void, g: guard.Guard, status: number, retryAfterMs: number | undefined) => void): void {
  const a = request.anchor();
  const rid = a && a.id;
  if (rid !== undefined) {
    const h = l.held.get(rid);
    // Back through an internal redirect: it holds its slot already.
    if (h !== undefined && request.alive(h.anchor)) return;
  }
  if (breaker.breakerOpen(g._dict, g.name)) breaker.probeWhenCool(g, l.probeFor, probeRedis);
  if (l.count >= SWEEP) sweep(g, l);
  let slot = takeOrSweep(g, l, k);
  if (slot === undefined && g._wait > 0) {
    ngx_update_time();
    const deadline = clock_now() + g._wait / 1000;
    let nap = 0.005;
    while (slot === undefined) {
      const left = deadline - clock_now();
      if (left <= 0) break;
      clock_sleep(math_min(nap, left));
      nap = math_min(nap * 2, 0.05);
      ngx_update_time();
      slot = takeOrSweep(g, l, k);
    }
  }
  if (slot === undefined) {
    incr(g._dict, g.name, "local_rejected");
    refuse(g, g._rejectStatus, retryAfter(g, l, k));
    return;
  }
  incr(g._dict, g.name, "local_admitted");
  if (a !== undefined) {
    const old = l.held.get(a.id);
    if (old === undefined) {
      l.count++;
      stats.adjust(g._dict, g.name, "in_flight", 1);
    } else {
      g._dict.delete(old.slot);
    }
    l.held.set(a.id, { anchor: a, slot });
  }
}

/**
 * In log(): give back the slot this request took locally, if any; a client
 * that went away while the upstream works leaves it to run out (the backend
 * may still be busy with its request), as a Redis lease is kept.
 */
function finish(g: guard.Guard, l: Local): void {
  if (l.count === 0) return;
  const rid = request.id();
  if (rid === undefined) return;
  const h = l.held.get(rid);
  if (h === undefined) return;
  const aborted = upstream.aborted();
  if (aborted) incr(g._dict, g.name, "aborted");
  forget(g, l, rid, h.slot, !aborted);
}

/** gateway.log(): give back what the request took locally from any guard. */
export function finishAll(): void {
  for (const i of $range(1, withLocal.length)) {
    const g = withLocal[i - 1]!;
    finish(g, g._fallback!);
  }
}

/**
 * After the cool-down (half open): may this request ask Redis? Not until a
 * probe in a timer of this nginx found Redis back (one at a time).
 */
export function probe(g: guard.Guard, l: Local): boolean {
  return breaker.probed(g, l.probeFor, probeRedis);
}

// Exported by name: this module's own uses of them are locals, not lookups in its exports table.
export { finish };

/**
 * A worker starts (dlock.init_worker()) with the breaker open or half open: a
 * reload meanwhile took the probe its workers had scheduled. Its own probe
 * after the cool-down, whether requests come or not; a mark an exited worker
 * left would hold it off, so it is let go first.
 */
export function resume(g: guard.Guard): void {
  if (breaker.breakerState(g._dict, g.name) === "closed") return;
  breaker.probeDone(g._dict, g.name);
  breaker.probeWhenCool(g, g._fallback!.probeFor, probeRedis);
}
