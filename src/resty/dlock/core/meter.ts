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
//
// A worker counts in Lua first and adds its counts to the dict FLUSH seconds
// later, in one incr per key that moved: an uncontended acquire + release
// made eight dict calls for its instruments (each takes the zone's lock),
// about a tenth of the library's CPU. A status page or a scrape adds the
// serving worker's counts first; another worker's show up to FLUSH late. A
// worker that crashes loses at most FLUSH seconds of its counts; the held
// gauge still comes right, at the expiry second of the leases it recorded.

import * as buckets from "./buckets";
import * as check from "./check";
import * as clock from "./clock";
import * as dictcount from "./dictcount";
import * as expiries from "./expiries";
import * as quiet from "./quiet";
import * as late from "./late";

const clock_now = clock.now;
const on_its_way = late.onItsWay;
const ngx_log = ngx.log;
const ERR = ngx.ERR;
const get_phase = ngx.get_phase;
const timer_at = ngx.timer.at;
const worker_exiting = ngx.worker.exiting;
const lua_pairs = pairs;
const lua_next = next;
const math_floor = math.floor;
const str_find = string.find;
const lua_type = type;
const lua_ipairs = ipairs;
const lua_tostring = tostring;
const str_format = string.format;
const quiet_due_for = quiet.dueFor;
const quiet_more = quiet.more;
const waitBucket = buckets.wait;
const holdBucket = buckets.hold;

/** Upper bounds (s) of the acquire-wait and hold-time buckets; the last bucket is +Inf. */
const WAIT_BOUNDS = buckets.WAIT_BOUNDS;
const HOLD_BOUNDS = buckets.HOLD_BOUNDS;
/** Seconds a worker's counts wait before they are added to the dict. */
const FLUSH = 0.25;

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
  /** "m:<name>:", the keys' prefix (expiries.sweep). */
  readonly prefix: string;
  /** This worker's counts not in the dict yet, by dict key (the keys above). */
  readonly counts: LuaTable<string, number>;
  /** This worker's moves of records in and out of expiry seconds not in the dict yet, by second. */
  readonly seconds: LuaTable<number, number>;
  /** Listed in `dirty`: has counts to flush. */
  dirty: boolean;
}

/** Meters of this worker with counts to flush. */
const dirty: Meter[] = [];
/** When the flush timer on its way was started (nil: none is). */
let armed: number | undefined;
/** "cannot defer the counts" lines, by why (one per why, worker and interval). */
const undeferred: quiet.Quiets = new LuaTable();

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

function keysOf(p: string, n: number): string[] {
  const out: string[] = [];
  for (const i of $range(1, n)) out.push(p + lua_tostring(i));
  return out;
}

/** The instruments of factory `name` in `dict`: made at new(), so that counting builds no key. */
export function make(dict: NgxSharedDict, name: string): Meter {
  const p = "m:" + name + ":";
  if (dict.safe_add("m:?" + name, true)[0]) {
    const i = dictcount.count(dict, "m:n", 1);
    if (i !== undefined) dict.safe_set("m:#" + lua_tostring(i), name);
  }
  // Swept up to the second before now: no record made from now on expires in it.
  dict.safe_add(p + "swept", math_floor(clock_now()) - 1);
  dict.safe_add(p + "held", 0);
  let known = false;
  for (const [_, d] of lua_ipairs(dicts)) if (d === dict) known = true;
  if (!known) dicts.push(dict);
  return {
    name, dict, busy: p + "busy", timeout: p + "timeout", error: p + "error", lost: p + "lost",
    wait: keysOf(p + "w", WAIT_BOUNDS.length + 1), waitSum: p + "ws",
    hold: keysOf(p + "h", HOLD_BOUNDS.length + 1), holdSum: p + "hs",
    held: p + "held", exp: p + "e", swept: p + "swept", sweeping: p + "sweeping", prefix: p,
    counts: new LuaTable<string, number>(), seconds: new LuaTable<number, number>(), dirty: false,
  };
}

/** The dicts factories of this process count in. */
export function known(): NgxSharedDict[] {
  return dicts;
}

// The dict key of an expiry second, in one format: a number turned into a
// string and then joined would make two strings.
const SECOND = "%s%d";

/**
 * Add m's expiry seconds to the dict, and to the held gauge the records they
 * moved; false when a sweep runs now (they wait for the next flush). A second
 * already swept took its records off the gauge as expired: moves into it are
 * dropped, moves out of it too (they were counted gone once).
 */
function flushSeconds(m: Meter): boolean {
  const dict = m.dict;
  if (lua_next(m.seconds)[0] === undefined) return true;
  if (!dictcount.mark(dict, m.sweeping, true, 1)) return false;
  const [mark] = dict.get(m.swept);
  const last = lua_type(mark) === "number" ? mark as number : 0;
  let held = 0;
  for (const [s, n] of lua_pairs(m.seconds)) {
    m.seconds.set(s, undefined as unknown as number);
    if (n !== 0 && s > last) {
      dictcount.count(dict, str_format(SECOND, m.exp, s), n);
      held += n;
    }
  }
  if (held !== 0) dictcount.count(dict, m.held, held);
  dict.delete(m.sweeping);
  expiries.sweep(dict, m.prefix);
  return true;
}

// The timer flush() arms runs it, and it flushes: declared ahead of flush(), set after it.
let flushLater: (this: void, premature: boolean, at: number) => void;

/** Is a flush timer on its way (not one nginx dropped, late.ts)? */
function isArmed(): boolean {
  return on_its_way(armed, clock_now(), FLUSH);
}

/** Start the flush timer: nil, or why it cannot be had. */
function arm(): string | undefined {
  const at = clock_now();
  const [ok, err] = timer_at(FLUSH, flushLater, at);
  if (ok === undefined) return lua_tostring(err);
  armed = at;
  return undefined;
}

/** Add this worker's counts to the dicts (before a status page reads them, and FLUSH after a count). */
function flush(): void {
  let kept = 0;
  for (const i of $range(1, dirty.length)) {
    const m = dirty[i - 1]!;
    dirty[i - 1] = undefined as unknown as Meter;
    for (const [k, n] of lua_pairs(m.counts)) {
      // Counted keys stay, at 0: a meter counts into the same few keys again and again.
      if (n !== 0) {
        dictcount.count(m.dict, k, n);
        m.counts.set(k, 0);
      }
    }
    if (flushSeconds(m)) {
      m.dirty = false;
    } else {
      kept++;
      dirty[kept - 1] = m;
    }
  }
  if (kept > 0 && !isArmed() && get_phase() !== "init" && !worker_exiting()) arm();
}

flushLater = function (this: void, premature: boolean, at: number): void {
  // One that ran so late that another was started in its place flushes too (no harm), and leaves that one armed.
  if (armed === at) armed = undefined;
  flush();
};

/** See that a flush comes: a timer, or (none to be had, or none in this phase) at once. */
function schedule(): void {
  // No timers in init_by_lua (an acquire there still counts) nor in an exiting worker: add them at once.
  if (get_phase() !== "init" && !worker_exiting()) {
    const err = arm();
    if (err === undefined) return;
    // Every count would say so, and none is lost: one line per why, worker and interval.
    const n = quiet_due_for(undeferred, err);
    if (n > 0) ngx_log(ERR, "dlock: cannot defer the counts of the lease metrics, adding them at once: ", err, quiet_more(n));
  }
  flush();
}

/** m has counts to flush: see that a flush comes. */
function touch(m: Meter): void {
  m.dirty = true;
  dirty.push(m);
  if (!isArmed()) schedule();
}

/**
 * Once an acquire: is the flush timer overdue (nginx dropped it)? Every meter
 * may be dirty by then, and a dirty meter's counts never touch() (they read no
 * clock, for the hot path): without this look the counts stayed in the worker.
 */
function overdue(): void {
  if (armed !== undefined && !isArmed()) schedule();
}

/** Count n more of key k of meter m (in this worker, until the flush). */
function add(m: Meter, k: string, n: number): void {
  const c = m.counts;
  c.set(k, (c.get(k) ?? 0) + n);
  if (!m.dirty) touch(m);
}

/** Move n records in (or out, n < 0) of expiry second s. */
function moveSecond(m: Meter, s: number, n: number): void {
  const secs = m.seconds;
  secs.set(s, (secs.get(s) ?? 0) + n);
  if (!m.dirty) touch(m);
}

/** An acquire took a lease after `s` seconds. */
export function acquired(m: Meter, s: number): void {
  overdue();
  add(m, m.wait[waitBucket(s) - 1]!, 1);
  add(m, m.waitSum, s);
}

/** An acquire ended without a lease: "busy", "timeout", or anything else (an error). */
export function refused(m: Meter, err: string | undefined): void {
  overdue();
  add(m, err === "busy" ? m.busy : err === "timeout" ? m.timeout : m.error, 1);
}

/** A lease was released, confirmed, after `s` seconds held. */
export function released(m: Meter, s: number): void {
  add(m, m.hold[holdBucket(s) - 1]!, 1);
  add(m, m.holdSum, s);
}

export function lost(m: Meter): void {
  add(m, m.lost, 1);
}

/** A lease's record was made, expiring at epoch ms `expires`. */
export function recorded(m: Meter, expires: number): void {
  moveSecond(m, math_floor(expires / 1000), 1);
}

/** A lease's record, expiring at epoch ms `expires`, was deleted before it expired. */
export function forgotten(m: Meter, expires: number): void {
  moveSecond(m, math_floor(expires / 1000), -1);
}

/** A record's expiry moved (extend) from epoch ms `from` to `to`. */
export function moved(m: Meter, from: number, to: number): void {
  const a = math_floor(from / 1000);
  const b = math_floor(to / 1000);
  if (a === b) return;
  moveSecond(m, a, -1);
  moveSecond(m, b, 1);
}

// Exported by name: this module's own uses of them are locals, not lookups in its exports table.
export { flush, FLUSH, WAIT_BOUNDS, HOLD_BOUNDS };
