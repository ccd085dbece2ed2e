// What status pages read of the factories' instruments (core/meter.ts
// counts into them): a fixed number of dict reads per factory name, never a
// walk of the dict. Reading sweeps the held gauge first (core/expiries.ts), as
// the workers' flushes do.

import * as meter from "../core/meter";
import * as expiries from "../core/expiries";

const math_max = math.max;
const lua_type = type;
const lua_tostring = tostring;

const WAIT_BOUNDS = meter.WAIT_BOUNDS;
const HOLD_BOUNDS = meter.HOLD_BOUNDS;
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
  expiries.sweep(dict, p);
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
