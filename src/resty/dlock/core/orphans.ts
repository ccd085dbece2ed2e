// Keys that may still be ours in Redis although nobody will release them:
// acquires whose reply was lost (the SET may have landed) and releases that
// Redis never confirmed (the gateway's queued releases, with()). Left alone,
// each blocks its key for a whole ttl. One sweep per worker deletes them,
// owner-checked, retrying until Redis answers: Redis may be paused or
// unreachable right now (that is often why the call failed). One timer and one
// pipeline per endpoint for all of them, not one each: an outage can orphan
// thousands.

import * as backend from "../redis/backend";
import * as redis from "../redis/client";
import * as scripts from "../redis/scripts";
import * as clock from "./clock";
import * as quiet from "./quiet";
import * as late from "./late";

const ngx_update_time = ngx.update_time;
const worker_exiting = ngx.worker.exiting;
const clock_sleep = clock.sleep;
const clock_now = clock.now;
const on_its_way = late.onItsWay;
const timer_at = ngx.timer.at;
const ngx_log = ngx.log;
const ERR = ngx.ERR;
const WARN = ngx.WARN;
const NOTICE = ngx.NOTICE;
const math_min = math.min;
const lua_pcall = pcall;
const lua_pairs = pairs;
const lua_ipairs = ipairs;
const quiet_due = quiet.due;
const quiet_more = quiet.more;
const quiet_tally = quiet.tally;
const quiet_add = quiet.add;
const quiet_named = quiet.named;

/**
 * Seconds a lost acquire is retried. A SET queued in a paused Redis only runs
 * (and its ttl only starts) when Redis resumes, whenever that is.
 */
export const LOST_HORIZON = 600;
const FIRST_SWEEP_DELAY = 0.05; // seconds
const MAX_SWEEP_DELAY = 0.5; // seconds between sweeps, at most

export interface Orphan extends backend.Target {
  /**
   * What Redis did not confirm: the SET of an acquire, or the delete of a
   * release; or a waiter's ticket to take back (it gave up, or is gone).
   */
  readonly lost: "acquire" | "release" | "ticket";
  readonly conf: redis.RedisConf;
  /** The owner-checked delete: reply 1 when it deleted our key, 0 when the key is not ours. */
  readonly release: scripts.Script;
  /** ngx.now() after which the key has expired on its own: stop trying. */
  readonly deadline: number;
  /** Told once Redis answered the delete (its reply), or with nil when the deadline passed. */
  readonly settle: ((this: void, o: Orphan, reply: RedisValue | undefined) => void) | undefined;
}

/** The line about cleanups given up: one per interval, not one per key (an outage can orphan thousands). */
const givenUp = quiet.make();

let orphans: Orphan[] = [];
let sweeping = false;
/**
 * When the next sweep's timer is due (0 while a sweep runs). One nginx dropped
 * (late.ts) is replaced at the next adopt() (the sweeps' generation tells the
 * dropped one, should it run after all).
 */
let sweepDue = 0;
let sweeps = 0;

/**
 * "dlock: <done> N key(s) <why> (a, b, c and N more)": Redis answering again
 * after an outage settles hundreds in one sweep, said in one line, not one each.
 */
function say(t: quiet.Tally, done: string, why: string): void {
  if (t.count === 0) return;
  ngx_log(NOTICE, "dlock: ", done, " ", t.count, " key(s) ", why, " (", quiet_named(t), ")");
}

function sweepOnce(this: void): void {
  // Adoptions during this sweep (it yields) go to a fresh list.
  const batch = orphans;
  orphans = [];
  ngx_update_time();
  const now = clock_now();
  // One pipeline per endpoint and script.
  const groups = new LuaTable<string, Orphan[]>();
  const removed = quiet_tally();
  const released = quiet_tally();
  for (const [_, o] of lua_ipairs(batch)) {
    if (now > o.deadline) {
      const n = quiet_due(givenUp);
      if (n > 0) {
        ngx_log(WARN, "dlock: giving up cleanup of ", o.rkey, " (", o.lost, " not confirmed), it expires on its own",
          quiet_more(n));
      }
      if (o.settle !== undefined) o.settle(o, undefined);
    } else {
      const g = o.conf.pool + " " + o.release.sha;
      let list = groups.get(g);
      if (list === undefined) {
        list = [];
        groups.set(g, list);
      }
      list.push(o);
    }
  }
  for (const [_, list] of lua_pairs(groups)) {
    const first = list[0]!;
    const out = backend.batch(first.conf, first.release, list);
    for (const i of $range(1, list.length)) {
      const o = list[i - 1]!;
      const reply = out.replies.get(i);
      if (reply === undefined) {
        orphans.push(o);
      } else {
        // 1, or (keys with waiters in line) the token of the waiter it went on to: deleted.
        const deleted = reply !== 0;
        if (deleted && o.lost === "acquire") {
          quiet_add(removed, o.rkey);
        } else if (deleted && o.lost === "release") {
          quiet_add(released, o.rkey);
        }
        if (o.settle !== undefined) o.settle(o, reply);
      }
    }
  }
  say(removed, "removed", "acquired by requests whose replies were lost");
  say(released, "released", "once Redis answered again");
}

function sweepSafely(): void {
  const [ok, err] = lua_pcall(sweepOnce);
  if (!ok) {
    ngx_log(ERR, "dlock: cleanup sweep failed: ", err);
  }
}

/**
 * The worker is exiting: no timer with a delay can be made any more. Sweep on
 * in this one, sleeping between sweeps, until nothing is left (each orphan
 * settled or past its deadline) or EXIT_HORIZON (core/clock.ts) has passed.
 */
function sweepWhileExiting(delay: number): void {
  const stop = clock_now() + clock.EXIT_HORIZON;
  while (orphans.length > 0 && clock_now() < stop) {
    clock_sleep(delay);
    delay = math_min(delay * 2, MAX_SWEEP_DELAY);
    sweepSafely();
  }
  if (orphans.length > 0) {
    ngx_log(WARN, "dlock: worker exiting: giving up cleanup of ", orphans.length, " key(s) Redis did not answer for; ",
      "they expire on their own");
    orphans = [];
  }
}

// sweep() schedules itself again: declared here, set after it.
let schedule: (this: void, wait: number, delay: number) => boolean;

function sweep(this: void, premature: boolean, delay: number, gen: number): void {
  // Taken for dropped, and another started: that one sweeps.
  if (gen !== sweeps) return;
  sweepDue = 0;
  // Whatever a sweep runs into, the next one must still be scheduled:
  // a stuck `sweeping` flag would stop all cleanup in this worker for good.
  sweepSafely();
  if (orphans.length > 0 && (premature || worker_exiting())) sweepWhileExiting(delay);
  if (orphans.length === 0) {
    sweeping = false;
    return;
  }
  const later = math_min(delay * 2, MAX_SWEEP_DELAY);
  sweeping = schedule(later, later);
}

/** The next sweep in `wait` s, sleeping `delay` s between its tries while exiting; false when no timer can be had. */
schedule = function (this: void, wait: number, delay: number): boolean {
  sweeps++;
  const [ok] = timer_at(wait, sweep, delay, sweeps);
  sweepDue = clock_now() + wait;
  return ok !== undefined;
};

/** Keep trying to delete o's key (owner-checked) until Redis answers or o.deadline passes. */
function adopt(o: Orphan): void {
  orphans.push(o);
  if (!sweeping || (sweepDue > 0 && !on_its_way(sweepDue, clock_now(), 0))) sweeping = schedule(0, FIRST_SWEEP_DELAY);
}

/** An acquire whose reply was lost: its SET may have landed, or may still land. */
export function adoptAcquire(conf: redis.RedisConf, release: scripts.Script, rkey: string, token: string): void {
  adopt({ lost: "acquire", conf, release, rkey, token, deadline: clock_now() + LOST_HORIZON, settle: undefined });
}

// Exported by name: this module's own uses of them are locals, not lookups in its exports table.
export { adopt };
