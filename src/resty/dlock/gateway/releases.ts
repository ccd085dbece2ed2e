// The release queue of the gateway: a request's lease ends in its log phase,
// where there are no cosockets, so the release (or, dedup after a 2xx, the
// hold) is queued here and sent by a timer.
//
// One drain timer goes on while there is work: it takes what was queued while
// its last batch was on its way, so under load one timer sends every release
// (a timer per few requests cost more than the releases themselves). Another
// starts only for a backlog larger than the running ones take at once, up to
// MAX_DRAINERS. A batch goes out side by side, a light thread per lease, so
// that auto-pipelining carries it in the round trips of the worker's other
// calls: a batch call of its own (lease.releaseAll) takes a pooled connection
// and about 15 KB of garbage each time, four times what the rest of a request
// makes. A release Redis does not confirm goes that way once more, and is then
// left to the sweep that retries it until Redis answers or the key expires.

import * as check from "../core/check";
import * as lease from "../core/lease";
import * as stats from "./stats";
import type { Owner } from "./inflight";

const ngx_log = ngx.log;
const ERR = ngx.ERR;
const WARN = ngx.WARN;
const timer_at = ngx.timer.at;
const thread_spawn = ngx.thread.spawn;
const thread_wait = ngx.thread.wait;
const lua_pcall = pcall;
const lua_tostring = tostring;

// The queue, in three parallel arrays (no table per queued lease).
const qOwner = new LuaTable<number, Owner>();
const qLease = new LuaTable<number, lease.Lease>();
/** ms to keep the key instead of releasing it (0: release). */
const qHold = new LuaTable<number, number>();
let head = 1;
let tail = 0;
let draining = 0;
const MAX_DRAINERS = 8;
const BATCH = 64;
/** Batches one drain timer works off before it hands over to a fresh one. */
const DRAIN_ROUNDS = 32;

function failed(owner: Owner, what: string, err: string | undefined): void {
  stats.incr(owner.dict, owner.name, "redis_errors");
  ngx_log(WARN, "dlock: guard ", owner.name, ": ", what, " failed (retried until Redis answers or the lease expires): ",
    check.reason(err));
}

function raised(err: unknown): void {
  ngx_log(ERR, "dlock: gateway release queue: ", check.text(err));
}

/** Release l, or keep it ms more. */
function finish(this: void, owner: Owner, l: lease.Lease, ms: number): void {
  if (ms > 0) {
    const [ok, err] = l.extend(ms);
    if (ok === undefined && err !== "not_owner") failed(owner, "holding " + l.key, err);
    return;
  }
  const [ok, err] = l.release();
  if (ok !== undefined || err === "not_owner") return;
  // Unconfirmed: releaseAll tries again and hands what Redis still does not confirm to the sweep.
  const [n, berr] = lease.releaseAll([l]);
  if (n > 0) failed(owner, "releasing " + lua_tostring(n) + " lease(s)", berr);
}

/** A light thread's body: never raises (an aborted thread would log its own error line). */
function finishSafely(this: void, owner: Owner, l: lease.Lease, ms: number): void {
  const [ok, err] = lua_pcall(finish, owner, l, ms);
  if (!ok) raised(err);
}

function drain(this: void, premature: boolean): void {
  const threads: NgxThread[] = [];
  // Runs also when premature (the worker is exiting): cosockets still work here.
  // Each piece of work is protected: one that raises must neither take the rest
  // of its batch down nor leave `draining` counted up for good.
  for (const _ of $range(1, DRAIN_ROUNDS)) {
    if (head > tail) break;
    let n = 0;
    for (const _ of $range(1, BATCH)) {
      if (head > tail) break;
      const owner = qOwner.get(head);
      const l = qLease.get(head);
      const ms = qHold.get(head);
      qOwner.delete(head);
      qLease.delete(head);
      qHold.delete(head);
      head++;
      // nil when the thread cannot be made (no memory): then here, in turn.
      const co = thread_spawn(finishSafely, owner, l, ms) as NgxThread | undefined;
      if (co === undefined) {
        finishSafely(owner, l, ms);
      } else {
        n++;
        threads[n - 1] = co;
      }
    }
    for (const i of $range(1, n)) {
      thread_wait(threads[i - 1]!);
      threads[i - 1] = undefined!;
    }
  }
  draining--;
  // More than one timer's share is queued: a fresh timer takes over.
  schedule();
}

/** Start a drain timer unless the running ones take what is queued (at most MAX_DRAINERS at once). */
function schedule(): void {
  const backlog = tail - head + 1;
  if (backlog <= 0 || draining >= MAX_DRAINERS || draining * BATCH >= backlog) {
    return;
  }
  // A delay of 0 is the one nginx still allows in a worker that is exiting.
  const [ok, err] = timer_at(0, drain);
  if (ok) {
    draining++;
  } else if (draining === 0) {
    ngx_log(ERR, "dlock: gateway: cannot schedule ", backlog, " release(s), they expire on their own: ", err);
  }
}

/** Queue the end of a lease for a timer: release it, or keep it `hold` more ms. */
export function enqueue(owner: Owner, l: lease.Lease, holdMs: number): void {
  tail++;
  qOwner.set(tail, owner);
  qLease.set(tail, l);
  qHold.set(tail, holdMs);
  schedule();
}
