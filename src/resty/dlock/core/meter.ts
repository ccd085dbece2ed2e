// Per-factory instruments of the core API (locks, semaphores, the factories
// under gateway guards), kept in the factory's shared dict so every worker
// counts into the same numbers and the status endpoint reads them. Factories
// of one name count together. Dict keys ("m:<name>:..."):
//   busy, timeout, error, lost   counters (lost: the watchdog found the lease gone,
//                                or its release found the key no longer ours)
//   w1..w11, ws                  acquire wait (s) of acquired leases: per-bucket counts, sum
//   h1..h11, hs                  lease hold (s), from acquire to confirmed release
//   held                         leases recorded now (the gauge), and
//   e<second>                    how many of them have their record expire in that second
//   swept                        the last second whose expiries left the gauge
// Buckets are stored apart, not cumulative: one incr per observation; the
// exposition adds them up. A lease that is never released (throttling, a
// holder that forgot) leaves the gauge when its second has passed: the gauge
// never drifts and is read without walking the dict (get_keys locks it).
// Names: "m:n" how many, "m:#<i>" the i-th, "m:?<name>" known.

import * as check from "./check";

const ngx_now = ngx.now;
const math_floor = math.floor;
const math_max = math.max;
const math_min = math.min;
const str_find = string.find;
const lua_type = type;
const lua_ipairs = ipairs;
const lua_tostring = tostring;
const str_format = string.format;

/** Upper bounds (s) of the acquire-wait buckets; the last bucket is +Inf. */
export const WAIT_BOUNDS = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5];
/** Upper bounds (s) of the hold-time buckets; the last bucket is +Inf. */
export const HOLD_BOUNDS = [0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300];
/** Seconds an expiry second is left before it is swept: a record outlives its second by the dict's clock skew. */
const GRACE = 2;
/** Most seconds one read sweeps (a scrape after a day without one catches up over a few). */
const MAX_SWEEP = 3600;

export interface Meter {
  readonly name: string;
  readonly dict: NgxSharedDict;
  readonly busy: string;
  readonly timeout: string;
  readonly error: string;
  readonly lost: string;
  readonly wait: string[];
  readonly waitSum: string;
  readonly hold: string[];
  readonly holdSum: string;
  readonly held: string;
  /** "m:<name>:e": the expiry second follows. */
  readonly exp: string;
  readonly swept: string;
  readonly sweeping: string;
}

/** Dicts of the factories made in this process, for status pages. */
const dicts: NgxSharedDict[] = [];

/** A factory name: letters, digits, '_', '-' and '.', at most 64 bytes (a label in metrics). */
export function checkName(v: unknown): LuaMultiReturn<[string | undefined, string | undefined]> {
  const [n, err] = check.str("name", v, 64);
  if (n === undefined) return $multi(undefined, err);
  const [bad] = str_find(n, "[^%w_%-%.]");
  if (bad !== undefined) return check.fail("name may hold letters, digits, '_', '-' and '.' only", n);
  return $multi(n, undefined);
}

function buckets(p: string, n: number): string[] {
  const out: string[] = [];
  for (const i of $range(1, n)) out.push(p + lua_tostring(i));
  return out;
}

/** The instruments of factory `name` in `dict`: made at new(), so that counting builds no key. */
export function make(dict: NgxSharedDict, name: string): Meter {
  const p = "m:" + name + ":";
  if (dict.safe_add("m:?" + name, true)[0]) {
    const [i] = dict.incr("m:n", 1, 0);
    if (i !== undefined) dict.safe_set("m:#" + lua_tostring(i), name);
  }
  // Swept up to the second before now: no record made from now on expires in it.
  dict.safe_add(p + "swept", math_floor(ngx_now()) - 1);
  dict.safe_add(p + "held", 0);
  let known = false;
  for (const [, d] of lua_ipairs(dicts)) if (d === dict) known = true;
  if (!known) dicts.push(dict);
  return {
    name, dict, busy: p + "busy", timeout: p + "timeout", error: p + "error", lost: p + "lost",
    wait: buckets(p + "w", WAIT_BOUNDS.length + 1), waitSum: p + "ws",
    hold: buckets(p + "h", HOLD_BOUNDS.length + 1), holdSum: p + "hs",
    held: p + "held", exp: p + "e", swept: p + "swept", sweeping: p + "sweeping",
  };
}

/** The dicts factories of this process count in. */
export function known(): NgxSharedDict[] {
  return dicts;
}

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

// Bucket indexes by comparisons, not a loop over the bounds: a loop would keep
// the acquire path out of LuaJIT's root trace (see check.onlyKnown).
function waitBucket(s: number): number {
  if (s <= 0.05) {
    if (s <= 0.005) return s <= 0.001 ? 1 : 2;
    if (s <= 0.01) return 3;
    return s <= 0.025 ? 4 : 5;
  }
  if (s <= 0.5) {
    if (s <= 0.1) return 6;
    return s <= 0.25 ? 7 : 8;
  }
  if (s <= 1) return 9;
  return s <= 5 ? 10 : 11;
}

function holdBucket(s: number): number {
  if (s <= 1) {
    if (s <= 0.05) return s <= 0.01 ? 1 : 2;
    if (s <= 0.1) return 3;
    return s <= 0.5 ? 4 : 5;
  }
  if (s <= 30) {
    if (s <= 5) return 6;
    return s <= 10 ? 7 : 8;
  }
  return s <= 60 ? 9 : s <= 300 ? 10 : 11;
}

/** An acquire took a lease after `s` seconds. */
export function acquired(m: Meter, s: number): void {
  m.dict.incr(m.wait[waitBucket(s) - 1]!, 1, 0);
  m.dict.incr(m.waitSum, s, 0);
}

/** An acquire ended without a lease: "busy", "timeout", or anything else (an error). */
export function refused(m: Meter, err: string | undefined): void {
  m.dict.incr(err === "busy" ? m.busy : err === "timeout" ? m.timeout : m.error, 1, 0);
}

/** A lease was released, confirmed, after `s` seconds held. */
export function released(m: Meter, s: number): void {
  m.dict.incr(m.hold[holdBucket(s) - 1]!, 1, 0);
  m.dict.incr(m.holdSum, s, 0);
}

export function lost(m: Meter): void {
  m.dict.incr(m.lost, 1, 0);
}

// The dict key of an expiry second, in one format: a number turned into a
// string and then joined would make two strings per lease, this makes one
// (none when it exists already: every lease of that second shares it).
const SECOND = "%s%d";

/** A lease's record was made, expiring at epoch ms `expires`. */
export function recorded(m: Meter, expires: number): void {
  m.dict.incr(m.held, 1, 0);
  m.dict.incr(str_format(SECOND, m.exp, math_floor(expires / 1000)), 1, 0);
}

/** A lease's record, expiring at epoch ms `expires`, was deleted before it expired. */
export function forgotten(m: Meter, expires: number): void {
  m.dict.incr(m.held, -1, 0);
  m.dict.incr(str_format(SECOND, m.exp, math_floor(expires / 1000)), -1, 0);
}

/** A record's expiry moved (extend) from epoch ms `from` to `to`. */
export function moved(m: Meter, from: number, to: number): void {
  const a = math_floor(from / 1000);
  const b = math_floor(to / 1000);
  if (a === b) return;
  m.dict.incr(str_format(SECOND, m.exp, a), -1, 0);
  m.dict.incr(str_format(SECOND, m.exp, b), 1, 0);
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
  const limit = math_floor(ngx_now()) - GRACE;
  const [mark] = dict.get(p + "swept");
  if (lua_type(mark) !== "number" || (mark as number) >= limit) return;
  if (!dict.add(p + "sweeping", true, 1)[0]) return;
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
  if (gone !== 0) dict.incr(p + "held", -gone, 0);
  dict.set(p + "swept", s);
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
