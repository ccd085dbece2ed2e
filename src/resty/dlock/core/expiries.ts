// The held gauge's expiry seconds (core/meter.ts counts leases into them):
// the records whose second has passed leave the gauge, and their keys the
// dict. Every worker's flush sweeps (so does a status page's read): a sweep
// left to status pages only left the seconds of every lease in the dict when
// nothing read them, a key per factory and second, until the dict was full.

import * as clock from "./clock";
import * as dictcount from "./dictcount";

const clock_now = clock.now;
const math_floor = math.floor;
const math_min = math.min;
const lua_type = type;
const lua_tostring = tostring;

/** Seconds an expiry second is left before it is swept: a record outlives its second by the dict's clock skew. */
const GRACE = 2;
/** Most seconds one sweep takes (one after a day without any catches up over a few). */
const MAX_SWEEP = 3600;

function num(dict: NgxSharedDict, key: string): number {
  const [v] = dict.get(key);
  return lua_type(v) === "number" ? v as number : 0;
}

/**
 * Take the records that expired (by their second) off the held gauge of the
 * factory whose keys start with p ("m:<name>:"), and their keys off the dict.
 * One worker at a time (a dict key as the lock); one that finds it
 * taken reads the gauge as it is.
 */
export function sweep(dict: NgxSharedDict, p: string): void {
  const limit = math_floor(clock_now()) - GRACE;
  const [mark] = dict.get(p + "swept");
  if (lua_type(mark) !== "number") {
    // Gone (flush_all, or a full dict when the factory was made): sweep from now on, not never.
    dict.safe_add(p + "swept", limit);
    return;
  }
  if ((mark as number) >= limit) return;
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

