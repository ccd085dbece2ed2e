// How the gateway ends a request's lease. It ends in the log phase, where
// there are no cosockets: a release is written into the worker's next
// auto-pipelined batch (done(), lease.post), whose sender settles it from the
// reply (answered()). What cannot go that way (Redlock, auto_pipeline off, a
// Cluster map being read), what Redis did not confirm, and dedup's hold after
// a 2xx (an extend) go through the release queue below, sent from a timer.
//
// Light threads of a drain timer send them, one lease at a time each, side by
// side, so that auto-pipelining carries them in the round trips of the
// worker's other calls (a batch call of its own, batch.releaseAll, took a
// pooled connection and about 15 KB of garbage each time, four times what the
// rest of a request makes). A thread that finds the queue empty waits a while
// for more (a log phase wakes it through a semaphore) before it ends: under
// load the same few threads send every release, where a timer or a thread per
// release cost more than the release itself. A release Redis does not confirm
// goes through releaseAll once more, and is then left to the sweep that
// retries it until Redis answers or the key expires.

import * as check from "../core/check";
import * as batch from "../core/batch";
import * as lease from "../core/lease";
import * as quiet from "../core/quiet";
import * as clock from "../core/clock";
import * as late from "../core/late";
import type * as backend from "../redis/backend";
import * as roundtrip from "../redis/roundtrip";
import * as stats from "./stats";
import * as onway from "./onway";
import type { Owner } from "./inflight";
import type { Held } from "./renewals";

const ngx_log = ngx.log;
const ERR = ngx.ERR;
const WARN = ngx.WARN;
const timer_at = ngx.timer.at;
const thread_spawn = ngx.thread.spawn;
const worker_exiting = ngx.worker.exiting;
const math_min = math.min;
const thread_wait = ngx.thread.wait;
const lua_pcall = pcall;
const lua_tostring = tostring;
const migrating = roundtrip.migrating;
const quiet_due_for = quiet.dueFor;
const quiet_due = quiet.due;
const clock_now = clock.now;
const on_its_way = late.onItsWay;
const quiet_more = quiet.more;

const semaphore = require("ngx.semaphore") as NgxSemaphoreModule;

// The queue, in three parallel arrays (no table per queued lease).
const qOwner = new LuaTable<number, Owner>();
const qLease = new LuaTable<number, lease.Lease>();
/** ms to keep the key instead of releasing it (0: release). */
const qHold = new LuaTable<number, number>();
let head = 1;
let tail = 0;

/** Drain timers started (at most MAX_DRAINERS), and those of them not running yet (since pendingAt). */
let draining = 0;
let pending = 0;
let pendingAt = 0;
const MAX_DRAINERS = 8;
/** Release threads alive, at most PARALLEL (releases on their way at once); those waiting for work; posts they have not taken. */
let alive = 0;
let idle = 0;
let woken = 0;
const PARALLEL = 128;
/** Seconds a thread waits for work before it ends. */
const IDLE = 0.5;
/** Leases one thread sees to before it ends (its timer then hands over to a fresh one). */
const SHARE = 4096;
/** Made in the worker, at its first release. */
let sema: NgxSemaphore | undefined;

/** The line about a release queue no timer could be had for: one per interval, not one per request. */
const unscheduled = quiet.make();

/** Per guard, its line about releases and holds Redis did not confirm (one per interval, not one per lease). */
const unconfirmed: quiet.Quiets = new LuaTable();

function failed(owner: Owner, what: string, err: string | undefined): void {
  stats.incr(owner._dict, owner.name, "redis_errors");
  const n = quiet_due_for(unconfirmed, owner.name);
  if (n === 0) return;
  ngx_log(WARN, "dlock: guard ", owner.name, ": ", what, " failed (retried until Redis answers or the lease expires): ",
    check.reason(err), quiet_more(n));
}

function raised(err: unknown): void {
  ngx_log(ERR, "dlock: gateway release queue: ", check.text(err));
}

/**
 * Redis found l's key gone, or someone else's, at its release (or hold): the
 * key was lost under its request (flushed, evicted, run out), which went on
 * without exclusion. Said as a renewal that finds it says it
 * (renewals.ts), unless an earlier try of this release may have landed.
 */
function lostUnder(owner: Owner, l: lease.Lease, what: string): void {
  if (l._releaseSent === true) return;
  stats.incr(owner._dict, owner.name, "lost");
  ngx_log(ERR, "dlock: guard ", owner.name, ": lease on ", l.key, " lost while its request was in flight: its ", what,
    " found the key gone from Redis, or someone else's");
}

/** Release l, or keep it ms more. */
function finish(this: void, owner: Owner, l: lease.Lease, ms: number): void {
  if (ms > 0) {
    const [ok, err] = l.extend(ms);
    if (ok === undefined) {
      if (err === "not_owner") lostUnder(owner, l, "hold");
      else failed(owner, "holding " + l.key, err);
    }
    return;
  }
  const [ok, err] = l.release();
  if (err === "not_owner") lostUnder(owner, l, "release");
  if (ok === undefined && err !== "not_owner") {
    // Unconfirmed: releaseAll tries again and hands what Redis still does not confirm to the sweep.
    const [n, berr] = batch.releaseAll([l]);
    if (n > 0) failed(owner, "releasing " + lua_tostring(n) + " lease(s)", berr);
  }
  onway.settled(owner._dict, l._rkey);
}

/** A light thread's body: never raises (an aborted thread would log its own error line). */
function finishSafely(this: void, owner: Owner, l: lease.Lease, ms: number): void {
  const [ok, err] = lua_pcall(finish, owner, l, ms);
  if (!ok) raised(err);
}

/** A release thread: sees to queued leases one at a time until the queue stays empty for IDLE s, or its share is done. */
function work(this: void): void {
  let done = 0;
  while (done < SHARE) {
    if (head > tail) {
      // An exiting worker keeps no thread waiting for work that will not come.
      if (worker_exiting()) break;
      idle++;
      const [ok] = sema!.wait(IDLE);
      idle--;
      if (ok) {
        woken--;
      } else if (head > tail) {
        // A post that came as the wait ran out stays counted: the next wait takes it at once.
        break;
      }
    } else {
      const owner = qOwner.get(head);
      const l = qLease.get(head);
      const ms = qHold.get(head);
      qOwner.delete(head);
      qLease.delete(head);
      qHold.delete(head);
      head++;
      finishSafely(owner, l, ms);
      done++;
    }
  }
  alive--;
}

// drain() ends by calling schedule(), which starts drain() timers: declared here, set after drain().
let schedule: (this: void) => void;

function drain(this: void, premature: boolean): void {
  // Runs also when premature (the worker is exiting): cosockets still work here.
  // One taken as dropped that starts after all is counted again.
  if (pending > 0) pending--;
  else draining++;
  const threads: NgxThread[] = [];
  const want = math_min(tail - head + 1, PARALLEL - alive);
  for (const _ of $range(1, want)) {
    alive++;
    // nil when the thread cannot be made (no memory): then this timer works itself.
    const co = thread_spawn(work) as NgxThread | undefined;
    if (co === undefined) {
      work();
      break;
    }
    threads.push(co);
  }
  for (const i of $range(1, threads.length)) thread_wait(threads[i - 1]!);
  draining--;
  // Threads that ended at their share left work behind: a fresh timer takes over.
  schedule();
}

/** Wake idle threads for what is queued; start a drain timer when they are too few. */
schedule = function (this: void): void {
  const backlog = tail - head + 1;
  if (backlog <= 0) return;
  if (sema === undefined) {
    const [sm, err] = semaphore.new(0);
    if (sm === undefined) {
      ngx_log(ERR, "dlock: gateway: cannot make the release semaphore, releases expire on their own: ", err);
      return;
    }
    sema = sm;
  }
  const free = idle - woken;
  if (free > 0) {
    const n = math_min(free, backlog);
    woken += n;
    sema.post(n);
    if (backlog <= n) return;
  }
  // Drain timers nginx dropped (late.ts): the queue would wait for them for good.
  if (pending > 0 && !on_its_way(pendingAt, clock_now(), 0)) {
    draining -= pending;
    pending = 0;
  }
  // A timer about to start makes threads for all that is queued then.
  if (pending > 0 || alive >= PARALLEL || draining >= MAX_DRAINERS) return;
  // A delay of 0 is the one nginx still allows in a worker that is exiting.
  const [ok, err] = timer_at(0, drain);
  if (ok) {
    draining++;
    pending++;
    pendingAt = clock_now();
  } else if (draining === 0) {
    const n = quiet_due(unscheduled);
    if (n > 0) {
      ngx_log(ERR, "dlock: gateway: cannot schedule ", backlog, " release(s) (they wait in the queue for the next ",
        "request's release, or run out by their ttl): ", err, quiet_more(n));
    }
  }
};

/** Queue the end of a lease for a timer: release it, or keep it `hold` more ms. */
function enqueue(owner: Owner, l: lease.Lease, holdMs: number): void {
  tail++;
  qOwner.set(tail, owner);
  qLease.set(tail, l);
  qHold.set(tail, holdMs);
  schedule();
}

/**
 * End a request's lease: release it, or keep it holdMs more. A release rides
 * the worker's next pipeline with nobody waiting for it (lease.post): no
 * timer, no thread, no wait for the reply; one that cannot (or that Redis did
 * not confirm) and a hold go through the queue.
 */
function done(h: Held, holdMs: number): void {
  if (holdMs === 0) {
    onway.sent(h.owner._dict, h.lease._rkey);
    const j = lease.post(h.lease);
    if (j !== undefined) {
      j.post = h;
      return;
    }
  }
  enqueue(h.owner, h.lease, holdMs);
}

/** A posted release was answered: every Held's `answered` (in a sender's timer: nothing here may wait). */
function answered(this: void, j: backend.Job): void {
  const h = j.post as Held;
  const [ok, err] = lease.posted(h.lease, j);
  if (ok !== undefined || err === "not_owner") {
    if (ok === undefined) lostUnder(h.owner, h.lease, "release");
    onway.settled(h.owner._dict, h.lease._rkey);
    return;
  }
  // A failure counts now, and is logged should the queue's tries fail too
  // (failed()); a Cluster slot that moved, or that is moving (TRYAGAIN: the
  // queue's release runs on the lock key alone), is only followed, from the queue.
  const o = h.owner;
  const moving = j.fault === "redirect" || migrating(j.fault, j.err);
  if (!moving) stats.incr(o._dict, o.name, "redis_errors");
  enqueue(o, h.lease, 0);
}

// Exported by name: this module's own uses of them are locals, not lookups in its exports table.
export { done, answered, enqueue };
