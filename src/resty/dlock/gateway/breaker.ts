// A guard's circuit breaker, kept in the shared dict (stats.ts names its keys)
// so that every worker of an nginx trips, waits and probes as one: after
// `breaker_failures` Redis failures in a row it opens for `breaker_cooldown`
// ms (requests do without Redis: on_error decides, or the local fallback),
// then one request or timer of the nginx asks Redis whether it is back (half
// open) while the others still do without; an answer closes it.

import * as check from "../core/check";
import * as clock from "../core/clock";
import * as dictcount from "../core/dictcount";
import * as stats from "./stats";

const ngx_log = ngx.log;
const ERR = ngx.ERR;
const NOTICE = ngx.NOTICE;
const timer_at = ngx.timer.at;
const lua_type = type;
const clock_now = clock.now;
const worker_exiting = ngx.worker.exiting;
const keys = stats.keys;
const incr = stats.incr;
const HALF = stats.HALF;

/** Seconds the breaker stays open (0: closed or half open). */
function openFor(dict: NgxSharedDict, k: stats.Keys): number {
  const [upto] = dict.get(k.open);
  const left = lua_type(upto) === "number" ? (upto as number) - clock_now() : 0;
  return left > 0 ? left : 0;
}

export type BreakerState = "closed" | "open" | "half_open";

/** Per guard, when this worker's own probe ends: the dict's mark stands in for it when the dict is full. */
const probingHere = new LuaTable<string, number>();

/**
 * Take the one probe of a half-open breaker for `seconds`: true when the
 * caller is the one. A dict too full for the mark (a count of ours never
 * evicts) leaves one probe per worker at a time, rather than none ever.
 */
function takeProbe(dict: NgxSharedDict, guard: string, seconds: number): boolean {
  const [ok, err] = dict.safe_add(keys(guard).probe, true, seconds);
  if (ok === true) return true;
  if (err !== "no memory") return false;
  const now = clock_now();
  const ends = probingHere.get(guard);
  if (ends !== undefined && ends > now) return false;
  probingHere.set(guard, now + seconds);
  return true;
}

/** The probe is over (Redis answered, or the breaker opened again): the next may start. */
function probeDone(dict: NgxSharedDict, guard: string): void {
  dict.delete(keys(guard).probe);
  probingHere.delete(guard);
}

/** The probe, in a timer `delay` s from now; said when it cannot start, and its mark let go. */
function startProbe<G extends { readonly _dict: NgxSharedDict; readonly name: string }>(g: G, delay: number,
  probe: (this: void, premature: boolean, g: G) => void): void {
  const [ok, err] = timer_at(delay, probe, g);
  if (ok !== undefined) return;
  probeDone(g._dict, g.name);
  ngx_log(ERR, "dlock: guard ", g.name, ": cannot start a timer to probe Redis: ", err);
}

function breakerState(dict: NgxSharedDict, guard: string): BreakerState {
  const k = keys(guard);
  if (openFor(dict, k) > 0) return "open";
  if (dict.get(k.fail)[0] === HALF) return "half_open";
  return "closed";
}

/**
 * With on_error = "local", after the cool-down (half open): may this request
 * ask Redis? Not until `probe`, run in a timer of this nginx (one at a time,
 * for up to probeFor seconds), has found Redis back: meanwhile requests keep
 * deciding locally, none waits on a Redis that may still be gone.
 */
export function probed<G extends { readonly _dict: NgxSharedDict; readonly name: string }>(
  g: G, probeFor: number, probe: (this: void, premature: boolean, g: G) => void,
): boolean {
  if (breakerState(g._dict, g.name) !== "half_open") return true;
  if (takeProbe(g._dict, g.name, probeFor)) startProbe(g, 0, probe);
  return false;
}

export function breakerOpen(dict: NgxSharedDict, guard: string): boolean {
  return openFor(dict, keys(guard)) > 0;
}

/**
 * Must this request do without Redis (on_error = "allow" / "deny")? While the
 * breaker is open; and half open, after the cool-down, unless it is the one
 * request of this nginx that asks Redis whether it is back (for up to probeFor
 * seconds): the others do without, as while open, and none but that one waits
 * on a Redis that may still be gone.
 */
export function skips(dict: NgxSharedDict, guard: string, probeFor: number): boolean {
  const k = keys(guard);
  // Closed (with failures counted or none): one read. Open or half open, fail is HALF.
  if (dict.get(k.fail)[0] !== HALF) return false;
  if (openFor(dict, k) > 0) return true;
  return !takeProbe(dict, guard, probeFor);
}

/** Seconds one probe of a half-open breaker has (a call's connect and read) before another may start. */
export function probeWindow(conf: { readonly connect_timeout: number; readonly read_timeout: number }): number {
  return (conf.connect_timeout + conf.read_timeout) / 1000 + 0.1;
}

/** Count a Redis failure; open the breaker after `threshold` in a row, or at once when half open. */
function failure(dict: NgxSharedDict, guard: string, threshold: number, cooldownMs: number): void {
  const k = keys(guard);
  let trip = dict.get(k.fail)[0] === HALF;
  if (!trip) {
    const n = dictcount.count(dict, k.fail, 1);
    // HALF + 1: another worker opened the breaker meanwhile, and this count moved its mark: put it back.
    if (n === HALF + 1) dict.safe_set(k.fail, HALF);
    trip = n !== undefined && n >= threshold;
  }
  if (trip && openFor(dict, k) === 0) {
    // A probe that failed fast must not hold the next one off past the cool-down.
    probeDone(dict, guard);
    dict.safe_set(k.open, clock_now() + cooldownMs / 1000);
    dict.safe_set(k.fail, HALF);
    incr(dict, guard, "breaker_opened");
    ngx_log(ERR, "dlock: guard ", guard, ": Redis keeps failing, not calling it for ", cooldownMs, " ms");
  }
}

/** Redis answered: close the breaker and forget past failures (one read when there is nothing to forget). */
export function success(dict: NgxSharedDict, guard: string): void {
  const k = keys(guard);
  const [v] = dict.get(k.fail);
  if (v === undefined || v === 0) return;
  dict.safe_set(k.fail, 0);
  if (v === HALF) {
    probeDone(dict, guard);
    ngx_log(NOTICE, "dlock: guard ", guard, ": Redis answers again, breaker closed");
  }
}

/** What a guard's failure handling needs of it. */
interface Failing {
  readonly _dict: NgxSharedDict;
  readonly name: string;
  readonly _breakerFailures: number;
  readonly _breakerCooldown: number;
  readonly _onError: string;
}

/** Redis failed a guard: told to the breaker, logged (a probe of a half-open breaker stops here). */
function noteFailure(g: Failing, err: string | undefined): void {
  failure(g._dict, g.name, g._breakerFailures, g._breakerCooldown);
  ngx_log(ERR, "dlock: guard ", g.name, ": ", check.reason(err));
}

type Probe<G> = (this: void, premature: boolean, g: G) => void;

/**
 * With a local fallback whose breaker is open: a timer of this nginx asks Redis
 * (probe) once the cool-down is over, whether requests come or not (an idle
 * guard would say degraded until its next request). One per nginx: a request
 * meanwhile finds its mark (probed()) and decides locally.
 */
function probeWhenCool<G extends Failing>(g: G, probeFor: number, probe: Probe<G>): void {
  // An exiting worker makes no timer with a delay: the workers that replace it probe.
  if (worker_exiting()) return;
  const cool = openFor(g._dict, keys(g.name)); // what is left of it: a reload does not start it over
  if (!takeProbe(g._dict, g.name, cool + probeFor)) return;
  startProbe(g, cool, probe);
}

/** A probe found Redis failing still: the breaker opens again, and the next probe is due after its cool-down. */
export function probeFailed<G extends Failing>(g: G, err: string | undefined, probeFor: number, probe: Probe<G>): void {
  noteFailure(g, err);
  probeDone(g._dict, g.name);
  probeWhenCool(g, probeFor, probe);
}

/** Redis failed a request's call: counted as redis_errors, then as noteFailure. */
export function redisFailed(g: Failing, err: string | undefined): void {
  incr(g._dict, g.name, "redis_errors");
  noteFailure(g, err);
}

/**
 * Redis cannot decide and nothing local does: true when on_error = "allow"
 * lets the request through (counted failed_open), false when the guard must
 * refuse it (counted failed_closed).
 */
export function failedOpen(g: Failing): boolean {
  if (g._onError === "allow") {
    incr(g._dict, g.name, "failed_open");
    return true;
  }
  incr(g._dict, g.name, "failed_closed");
  return false;
}

// Exported by name: this module's own uses of them are locals, not lookups in its exports table.
export { breakerState, failure, noteFailure, probeDone, probeWhenCool };
