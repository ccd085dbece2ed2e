// Leases of in-flight requests, per worker: renewal while the request runs and
// the release once it is logged, without a timer per request. A busy gateway
// serves thousands of requests a second; one renew timer plus one release
// timer each would exhaust lua_max_pending_timers (1024 by default). Instead:
// - one recurring sweep per guard and worker renews the leases that have been
//   in flight for about a third of their ttl;
// - log() queues the release (cosockets do not work in log_by_lua) and a few
//   drain timers, started on demand, work the queue off.

import * as lease from "./lease";
import * as stats from "./stats";

/** What the sweeps and drains need of a guard. */
export interface Owner {
  readonly name: string;
  readonly dict: NgxSharedDict;
  readonly ttl: number;
}

export interface Tracked {
  readonly lease: lease.Lease;
  /** ngx.now() of the acquire or the last renewal. */
  renewedAt: number;
  done: boolean;
}

interface Finish {
  owner: Owner;
  lease: lease.Lease;
  /** ms to keep the key after the request (dedup `hold`), 0 to release. */
  hold: number;
}

/** Per guard name: the tracked leases of this worker (a set). */
const tracked = new LuaTable<string, LuaTable<Tracked, true>>();

const queue = new LuaTable<number, Finish>();
let head = 1;
let tail = 0;
let draining = 0;
const MAX_DRAINERS = 8;

function sweep(this: void, premature: boolean, owner: Owner): void {
  if (premature) {
    return;
  }
  const set = tracked.get(owner.name);
  if (set === undefined) {
    return;
  }
  ngx.update_time();
  const due = ngx.now() - owner.ttl / 3000 * 0.9;
  // Renewing yields, and requests add to the set meanwhile: walk a snapshot.
  const batch: Tracked[] = [];
  for (const [t] of set) {
    if (t.renewedAt <= due) {
      batch.push(t);
    }
  }
  for (const t of batch) {
    if (!t.done) {
      const [ok, err] = t.lease.extend();
      // A request that ended meanwhile has its release queued already.
      if (!t.done) {
        renewed(owner, set, t, ok, err);
      }
    }
  }
}

function renewed(owner: Owner, set: LuaTable<Tracked, true>, t: Tracked, ok: true | undefined, err: string | undefined): void {
  if (ok) {
    t.renewedAt = ngx.now();
    stats.incr(owner.dict, owner.name, "renewed");
  } else if (err === "not_owner") {
    set.delete(t);
    stats.incr(owner.dict, owner.name, "lost");
    ngx.log(ngx.ERR, "dlock: guard ", owner.name, ": lease on ", t.lease.key, " lost while its request is in flight");
  } else {
    // A Redis hiccup: the next sweep tries again; if the lease runs out meanwhile, that one reports it lost.
    stats.incr(owner.dict, owner.name, "redis_errors");
    ngx.log(ngx.WARN, "dlock: guard ", owner.name, ": renewing ", t.lease.key, ": ", err);
  }
}

/** Register a request's lease for renewal (starts this worker's sweep for the guard on first use). */
export function track(owner: Owner, l: lease.Lease): Tracked {
  let set = tracked.get(owner.name);
  if (set === undefined) {
    set = new LuaTable<Tracked, true>();
    tracked.set(owner.name, set);
    const [ok, err] = ngx.timer.every(owner.ttl / 3000, sweep, owner);
    if (!ok) {
      tracked.delete(owner.name);
      ngx.log(ngx.ERR, "dlock: guard ", owner.name, ": cannot start lease renewal: ", err);
    }
  }
  const t: Tracked = { lease: l, renewedAt: ngx.now(), done: false };
  set.set(t, true);
  return t;
}

const BATCH = 64;

function drain(this: void, premature: boolean): void {
  // Runs also when premature (worker shutting down): cosockets still work here.
  while (head <= tail) {
    // Releases of one guard go out together, one pipeline per guard; holds one by one.
    const byOwner = new LuaMap<Owner, lease.Lease[]>();
    for (const _ of $range(1, BATCH)) {
      if (head > tail) break;
      const f = queue.get(head);
      queue.delete(head);
      head++;
      if (f.hold > 0) {
        const [ok, err] = f.lease.extend(f.hold);
        if (ok === undefined && err !== "not_owner") {
          failed(f.owner, f.lease.key, err);
        }
      } else {
        let list = byOwner.get(f.owner);
        if (list === undefined) {
          list = [];
          byOwner.set(f.owner, list);
        }
        list.push(f.lease);
      }
    }
    for (const [owner, list] of byOwner) {
      const [n, err] = lease.releaseAll(list);
      if (n > 0) {
        failed(owner, n + " lease(s)", err);
      }
    }
  }
  draining--;
}

function failed(owner: Owner, what: string, err: string | undefined): void {
  stats.incr(owner.dict, owner.name, "redis_errors");
  ngx.log(ngx.WARN, "dlock: guard ", owner.name, ": releasing ", what, " failed, it expires on its own: ", err);
}

/**
 * The request is over (log phase): stop renewing, and release the lease, or
 * keep the key `hold` more ms, from a timer.
 */
export function finish(owner: Owner, t: Tracked | undefined, l: lease.Lease, hold: number): void {
  if (t !== undefined) {
    t.done = true;
    const set = tracked.get(owner.name);
    if (set !== undefined) {
      set.delete(t);
    }
  }
  tail++;
  queue.set(tail, { owner, lease: l, hold });
  if (draining < MAX_DRAINERS && draining < tail - head + 1) {
    const [ok, err] = ngx.timer.at(0, drain);
    if (ok) {
      draining++;
    } else if (draining === 0) {
      ngx.log(ngx.ERR, "dlock: guard ", owner.name, ": cannot schedule releases (they expire on their own): ", err);
    }
  }
}
