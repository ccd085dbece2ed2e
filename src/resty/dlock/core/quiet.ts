// Log lines that an outage would otherwise write once per lease or request
// (a release or a renewal Redis did not answer, a cleanup given up, a full
// shared dict, a key that cannot be computed): the first is logged at once,
// then at most one per interval, saying how many it stands for. A thousand
// requests in flight when Redis goes away make one line per worker and
// interval, not a thousand; the guards' counters still count every one.
// And where one pass settles many keys at once (a cleanup sweep, a dead
// worker's leases), one line names a few of them and counts the rest.

import * as clock from "./clock";

const clock_now = clock.now;
const lua_tostring = tostring;
const NEVER = -math.huge;

/** Seconds between two lines of one kind, per worker (gateway/key.ts has its own). Settable for tests. */
const settings = { interval: 10 };

/** One kind of line in this worker: when it was last logged, and what happened since. */
export interface Quiet {
  at: number;
  count: number;
}

/** Lines of one kind per name (a guard's), made on first use. */
export type Quiets = LuaTable<string, Quiet>;

function make(this: void): Quiet {
  return { at: NEVER, count: 0 };
}

/**
 * One more of q's kind: how many the line to log now stands for (this one
 * included), or 0 while the interval since the last line lasts (then nothing
 * is logged, and the next line counts this one too).
 */
function due(q: Quiet, interval?: number): number {
  q.count++;
  const now = clock_now();
  if (now - q.at < (interval ?? settings.interval)) return 0;
  const n = q.count;
  q.at = now;
  q.count = 0;
  return n;
}

/** due() for the line of `name` (a guard) in set qs. */
function dueFor(qs: Quiets, name: string): number {
  let q = qs.get(name);
  if (q === undefined) {
    q = make();
    qs.set(name, q);
  }
  return due(q);
}

/** Keys a tally names at most; the rest it counts. */
const NAMED = 3;

/** The keys one line stands for. */
export interface Tally {
  count: number;
  names: string;
}

function tally(this: void): Tally {
  return { count: 0, names: "" };
}

function add(t: Tally, key: string): void {
  t.count++;
  if (t.count === 1) {
    t.names = key;
  } else if (t.count <= NAMED) {
    t.names = t.names + ", " + key;
  }
}

/** "a, b, c and 41 more". */
function named(t: Tally): string {
  if (t.count <= NAMED) return t.names;
  return t.names + " and " + lua_tostring(t.count - NAMED) + " more";
}

/** What a line standing for n says of the ones it stands for: " (and N more like it ...)", or "" for itself alone. */
function more(n: number): string {
  if (n <= 1) return "";
  return " (and " + lua_tostring(n - 1) + " more like it in this worker since the last such line)";
}

// Exported by name: this module's own uses of them are locals, not lookups in its exports table.
export { make, due, dueFor, more, tally, add, named, settings };
