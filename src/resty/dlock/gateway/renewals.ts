// Renewals of the leases of in-flight requests: the watchdog (one sweep per
// worker) extends them while their requests run, and tells the guard through
// hooks made once per guard what each renewal found.

import * as check from "../core/check";
import type * as lease from "../core/lease";
import type * as backend from "../redis/backend";
import * as stats from "./stats";
import * as quiet from "../core/quiet";
import * as watchdog from "../core/watchdog";
import type { Owner } from "./inflight";

const ngx_log = ngx.log;
const ERR = ngx.ERR;
const WARN = ngx.WARN;
const quiet_due_for = quiet.dueFor;
const quiet_more = quiet.more;

/** A lease a request holds for a guard; its posted release reports to it (releases.answered). */
export interface Held extends backend.Posted {
  readonly owner: Owner;
  readonly lease: lease.Lease;
  done: boolean;
}

/** Leases the watchdog renews for in-flight requests, and whose they are. */
const heldOf = new LuaTable<lease.Lease, Held>();

/** Per guard, its line about renewals Redis did not answer (one per interval, not one per lease and sweep). */
const unanswered: quiet.Quiets = new LuaTable();

/** Per guard, its line about leases the watchdog could not take on (no timer for it). */
const unwatched: quiet.Quiets = new LuaTable();

/** Per guard, what the watchdog tells about its renewals. */
const hooksOf = new LuaMap<Owner, watchdog.Hooks>();

// Made once per guard, apart from watch(): a function that makes closures is
// one LuaJIT does not compile, and would take its callers out of the trace.
function makeHooks(owner: Owner): watchdog.Hooks {
  const hk: watchdog.Hooks = {
    renewed(this: void): void {
      stats.incr(owner._dict, owner.name, "renewed");
    },
    lost(this: void, l: lease.Lease): void {
      const h = heldOf.get(l);
      heldOf.delete(l);
      if (h === undefined || h.done) return;
      h.done = true;
      stats.adjust(owner._dict, owner.name, "in_flight", -1);
      stats.incr(owner._dict, owner.name, "lost");
      ngx_log(ERR, "dlock: guard ", owner.name, ": lease on ", l.key, " lost while its request is in flight");
    },
    failed(this: void, l: lease.Lease, err: string): void {
      // A Redis hiccup: the next sweep tries again; if the lease runs out meanwhile, it is reported lost.
      stats.incr(owner._dict, owner.name, "redis_errors");
      const n = quiet_due_for(unanswered, owner.name);
      if (n > 0) {
        ngx_log(WARN, "dlock: guard ", owner.name, ": renewing ", l.key, ": ", check.reason(err), quiet_more(n));
      }
    },
  };
  hooksOf.set(owner, hk);
  return hk;
}

/**
 * Renew h's lease while its request runs: false when the watchdog cannot run
 * (no timer to be had), said once per guard, worker and interval.
 */
export function watch(h: Held): boolean {
  const owner = h.owner;
  const err = watchdog.watch(h.lease, hooksOf.get(owner) ?? makeHooks(owner));
  if (err === undefined) {
    heldOf.set(h.lease, h);
    return true;
  }
  const n = quiet_due_for(unwatched, owner.name);
  if (n > 0) ngx_log(ERR, "dlock: guard ", owner.name, ": ", check.reason(err), ": requests go by on_error", quiet_more(n));
  return false;
}

/** No more renewals of h's lease: its request is over. */
export function unwatch(h: Held): void {
  watchdog.unwatch(h.lease);
  heldOf.delete(h.lease);
}
