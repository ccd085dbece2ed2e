// The release queue of the gateway: a request's lease ends in its log phase,
// where there are no cosockets, so the release (or, dedup after a 2xx, the
// hold) is queued here and sent by a timer, one pipeline per guard.
//
// One drain timer goes on while there is work: it takes what was queued while
// its last batch was on its way, so under load one timer sends every release
// (a timer per few requests cost more than the releases themselves). Another
// starts only for a backlog larger than the running ones take at once, up to
// MAX_DRAINERS; holds (one extend each) go out side by side, in light threads.

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
const lua_pairs = pairs;
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

function hold(this: void, owner: Owner, l: lease.Lease, ms: number): void {
  const [ok, err] = l.extend(ms);
  if (ok === undefined && err !== "not_owner") {
    failed(owner, "holding " + l.key, err);
  }
}

/** A light thread's body: never raises (an aborted thread would log its own error line). */
function holdSafely(this: void, owner: Owner, l: lease.Lease, ms: number): void {
  const [ok, err] = lua_pcall(hold, owner, l, ms);
  if (!ok) raised(err);
}

function releaseList(this: void, owner: Owner, list: lease.Lease[]): void {
  const [n, err] = lease.releaseAll(list);
  if (n > 0) {
    failed(owner, "releasing " + lua_tostring(n) + " lease(s)", err);
  }
}

function drain(this: void, premature: boolean): void {
  // Runs also when premature (the worker is exiting): cosockets still work here.
  // Each piece of work is protected: one that raises must neither take the rest
  // of its batch down nor leave `draining` counted up for good.
  for (const _ of $range(1, DRAIN_ROUNDS)) {
    if (head > tail) break;
    // Releases of one guard go out together, one pipeline per guard; holds side by side.
    const byOwner = new LuaTable<Owner, lease.Lease[]>();
    let threads: NgxThread[] | undefined;
    for (const _ of $range(1, BATCH)) {
      if (head > tail) break;
      const owner = qOwner.get(head);
      const l = qLease.get(head);
      const ms = qHold.get(head);
      qOwner.delete(head);
      qLease.delete(head);
      qHold.delete(head);
      head++;
      if (ms > 0) {
        // nil when the thread cannot be made (no memory): then here, in turn.
        const co = thread_spawn(holdSafely, owner, l, ms) as NgxThread | undefined;
        if (co === undefined) {
          holdSafely(owner, l, ms);
        } else {
          threads ??= [];
          threads.push(co);
        }
      } else {
        let list = byOwner.get(owner);
        if (list === undefined) {
          list = [];
          byOwner.set(owner, list);
        }
        list.push(l);
      }
    }
    for (const [owner, list] of lua_pairs(byOwner)) {
      const [ok, err] = lua_pcall(releaseList, owner, list);
      if (!ok) raised(err);
    }
    if (threads !== undefined) {
      for (const i of $range(1, threads.length)) thread_wait(threads[i - 1]!);
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
