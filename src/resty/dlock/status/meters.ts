// What status pages read of the factories' instruments (core/meter.ts
// counts into them): a fixed number of dict reads per factory name, never a
// walk of the dict. Reading also sweeps the held gauge: the records whose
// expiry second has passed leave it.

import * as meter from "../core/meter";
import * as clock from "../core/clock";
import * as dictcount from "../core/dictcount";

const clock_now = clock.now;
const math_floor = math.floor;
const math_max = math.max;
const math_min = math.min;
const lua_type = type;
const lua_tostring = tostring;

const WAIT_BOUNDS = meter.WAIT_BOUNDS;
const HOLD_BOUNDS = meter.HOLD_BOUNDS;
/** Seconds an expiry second is left before it is swept: a record outlives its second by the dict's clock skew. */
const GRACE = 2;
/** Most seconds one read sweeps (a scrape after a day without one catches up over a few). */
const MAX_SWEEP = 3600;

/**
 * About how many keys the instruments of every factory take in a dict: the
 * counters and buckets of each name, and a minute of expiry seconds each.
 */
export function keys(dict: NgxSharedDict): number {
  const [n] = dict.get("m:n");
  return lua_type(n) === "number" ? (n as number) * (2 * WAIT_BOUNDS.length + 16 + 60) : 0;
}

/** Factory names counted in a dict (by any worker), in the order they were first made. */
export function names(dict: NgxSharedDict): string[] {
  const out: string[] = [];
  const [n] = dict.get("m:n");
  if (lua_type(n) !== "number") return out;
  for (const i of $range(1, n as number)) {
    const [name] = dict.get("m:#" + lua_tostring(i));
    if (lua_type(name) === "string") out.push(name as string);
  }
  return out;
}

function num(dict: NgxSharedDict, key: string): number {
  const [v] = dict.get(key);
  return lua_type(v) === "number" ? v as number : 0;
}

/**
 * Take the records that expired (by their second) off the held gauge of factory
 * `name`. One worker at a time (a dict key as the lock); one that finds it
 * taken reads the gauge as it is.
 */
function sweep(dict: NgxSharedDict, p: string): void {
  const limit = math_floor(clock_now()) - GRACE;
  const [mark] = dict.get(p + "swept");
  if (lua_type(mark) !== "number" || (mark as number) >= limit) return;
  if (!dictcount.mark(dict, p + "sweeping", true, 1)) return;
  let s = num(dict, p + "swept");
  const stop = math_min(limit, s + MAX_SWEEP);
  let gone = 0;
  while (s < stop) {
    s++;
    const [v] = dict.get(p + "e" + lua_tostring(s));
    if (v !== undefined) {
      if (lua_type(v) === "number") gone += v as number;
      dict.delete(p + "e" + lua_tostring(s));
    }
  }
  if (gone !== 0) dictcount.count(dict, p + "held", -gone);
  dict.safe_set(p + "swept", s);
  dict.delete(p + "sweeping");
}

/** What a status page shows of factory `name` in `dict`. */
export interface Reading {
  held: number;
  acquired: number;
  busy: number;
  timeout: number;
  error: number;
  lost: number;
  /** Per-bucket counts (not cumulative), the last one +Inf. */
  wait: number[];
  waitSum: number;
  hold: number[];
  holdSum: number;
}

/** A fixed number of dict reads: the counters, the buckets, the gauge (after a sweep). */
export function read(dict: NgxSharedDict, name: string): Reading {
  const p = "m:" + name + ":";
  sweep(dict, p);
  const wait: number[] = [];
  let acquiredN = 0;
  for (const i of $range(1, WAIT_BOUNDS.length + 1)) {
    const n = num(dict, p + "w" + lua_tostring(i));
    wait.push(n);
    acquiredN += n;
  }
  const hold: number[] = [];
  for (const i of $range(1, HOLD_BOUNDS.length + 1)) hold.push(num(dict, p + "h" + lua_tostring(i)));
  return {
    held: math_max(0, num(dict, p + "held")), acquired: acquiredN, busy: num(dict, p + "busy"),
    timeout: num(dict, p + "timeout"), error: num(dict, p + "error"), lost: num(dict, p + "lost"),
    wait, waitSum: num(dict, p + "ws"), hold, holdSum: num(dict, p + "hs"),
  };
}
