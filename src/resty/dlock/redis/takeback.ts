// Taking back what an acquire may have taken when its caller never came back
// for the reply (its request ended: a client abort, a killed thread): nobody
// would ever release it. The release (or drop) is owner-checked, sent on a
// connection of its own.

import type { CallResult } from "./backend";
import type * as redis from "./client";
import * as command from "./command";
import type { Lane } from "./lanes";
import * as roundtrip from "./roundtrip";
import * as scripts from "./scripts";
import * as clock from "../core/clock";
import * as quiet from "../core/quiet";

type Batch = command.Batch;
type Job = command.Job;

const clock_now = clock.now;
const ngx_log = ngx.log;
const ERR = ngx.ERR;
const WARN = ngx.WARN;
const NOTICE = ngx.NOTICE;
const timer_at = ngx.timer.at;
const worker_exiting = ngx.worker.exiting;
const clock_sleep = clock.sleep;
const lua_pcall = pcall;
const lua_next = next;
const lua_pairs = pairs;
const wordOf = command.wordOf;
const one = roundtrip.one;
const forTarget = scripts.forTarget;
const quiet_tally = quiet.tally;
const quiet_add = quiet.add;
const quiet_named = quiet.named;

/**
 * What one pass took back, and what it could not: said in a line each after
 * the pass (client aborts under load end many requests mid-acquire at once).
 */
interface Pass {
  readonly took: quiet.Tally;
  readonly failed: quiet.Tally;
  why: string | undefined;
}

function pass(this: void): Pass {
  return { took: quiet_tally(), failed: quiet_tally(), why: undefined };
}

/** A call on a connection of its own: the take-back is no batch's. */
function alone(this: void, conf: redis.RedisConf, s: scripts.Script, rkey: string, ...args: (string | number)[]): CallResult {
  return one(conf, false, s, rkey, ...args);
}

/** Take back what an acquire may have taken: its request ended before the reply came, so nobody ever will. */
function takeBackOne(conf: redis.RedisConf, j: Job, p: Pass): void {
  const rkey = wordOf(j, 1);
  // ARGV[1], the token, follows the keys.
  const [res, err] = forTarget(alone, conf, j.s.undo!, rkey, wordOf(j, j.s.keys + 1));
  if (res === undefined) {
    quiet_add(p.failed, rkey);
    p.why = p.why ?? err;
  } else if (res !== 0) {
    quiet_add(p.took, rkey);
  }
}

function report(p: Pass): void {
  if (p.took.count > 0) {
    ngx_log(NOTICE, "dlock: took back ", p.took.count, " key(s) whose requests ended before the acquire's reply came (",
      quiet_named(p.took), ")");
  }
  if (p.failed.count > 0) {
    ngx_log(WARN, "dlock: ", p.failed.count, " key(s) may be held by requests that ended before the acquire's reply came, ",
      "and cannot be taken back (", quiet_named(p.failed), "): ", p.why, "; they expire on their own");
  }
}

/**
 * Take back the acquires of batch b whose callers did not come back for their
 * replies: a timer started once the callers were woken, so every caller still
 * there has been back. Only those whose replies were read: nothing of theirs
 * can land later. (A lost reply of a caller that is gone is left to its ttl.)
 */
export function settle(this: void, premature: boolean, conf: redis.RedisConf, b: Batch): void {
  const jobs = b.jobs;
  const p = pass();
  for (const i of $range(1, jobs.length)) {
    const j = jobs[i - 1]!;
    if (j.s.undo !== undefined && j.res !== undefined && !j.back) {
      // Whatever one runs into, the others are still taken back.
      const [ok, err] = lua_pcall(takeBackOne, conf, j, p);
      if (!ok) ngx_log(ERR, "dlock: take-back failed: ", err);
    }
  }
  report(p);
}

/** Seconds between looks for acquires sent at once whose callers never came back. */
const WATCH = 1;
/** lane.watching: a watcher runs now, or none is on its way. */
const RUNNING = math.huge;
const NONE = -math.huge;

/** Take back the acquires of lane whose time is up. */
function look(lane: Lane): void {
  const now = clock_now();
  // Taking back yields: collect first (no new keys in a table while pairs() walks it).
  const gone: Batch[] = [];
  for (const [slot, b] of lua_pairs(lane.acquires)) {
    // inFlight() forgets the slots whose time is up.
    const due = lane.direct.get(slot);
    if (due === undefined || due < now) {
      lane.acquires.delete(slot);
      lane.direct.delete(slot);
      gone.push(b);
    }
  }
  // Most looks find nobody gone: no tallies for them.
  if (gone.length > 0) {
    const p = pass();
    for (const i of $range(1, gone.length)) {
      const [ok, err] = lua_pcall(takeBackOne, lane.conf, gone[i - 1]!.jobs[0]!, p);
      if (!ok) ngx_log(ERR, "dlock: take-back failed: ", err);
    }
    report(p);
  }
}

/**
 * Acquires sent at once whose callers never came back for the answer: their
 * request ended in the middle (a client abort) or their thread was killed.
 * A slot still there when its time is up says so without a look at the
 * request: every step of a call is bounded by a timeout, and its time
 * (patience) is their sum and a second more. Waiting for it matters too: the
 * connection was closed with the command perhaps not yet run, and by then it
 * has run (or Redis has been stuck that long).
 */
function watcher(this: void, premature: boolean, lane: Lane, at: number): void {
  // Started late, after another was started in its place (or runs now): that one watches.
  if (lane.watching !== at) return;
  lane.watching = RUNNING;
  look(lane);
  if (premature || worker_exiting()) {
    // No timer with a delay in an exiting worker (reload, quit): watch on in this
    // one until the slots' time is up, or their keys would stay locked for their ttl.
    const stop = clock_now() + clock.EXIT_HORIZON;
    while (lua_next(lane.acquires)[0] !== undefined && clock_now() < stop) {
      clock_sleep(WATCH);
      look(lane);
    }
    lane.watching = NONE;
    return;
  }
  lane.watching = NONE;
  if (lua_next(lane.acquires)[0] === undefined) return;
  const now = clock_now();
  if (timer_at(WATCH, watcher, lane, now)[0] !== undefined) lane.watching = now;
}

// Exported by name: the watcher re-arms itself through locals, not the exports table.
export { WATCH, watcher };
