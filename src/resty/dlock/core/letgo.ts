// Letting a lease go where nginx allows no cosockets (log, header filter):
// lua-resty-lock's unlock works in every phase, and the compat face must too.
// Nobody waits for Redis there: the release rides the worker's next pipeline
// (lease.post), or goes from a timer when it cannot. What Redis does not
// confirm goes to the cleanup sweep, which retries until the key expires.
// (The gateway ends its leases through a queue of its own: gateway/releases.ts.)

import * as lease from "./lease";
import * as quiet from "./quiet";
import * as settle from "./settle";
import type * as backend from "../redis/backend";

const lease_post = lease.post;
const lease_posted = lease.posted;
const timer_at = ngx.timer.at;
const ngx_log = ngx.log;
const ERR = ngx.ERR;
const quiet_due = quiet.due;
const quiet_more = quiet.more;

/** A release posted to a pipeline: the sender hands it the answer. */
interface Posted {
  readonly answered: (this: void, j: backend.Job) => void;
  readonly lease: lease.Lease;
}

/** The line about releases no timer could be had for: one per interval, not one per lease. */
const unscheduled = quiet.make();

/** A timer's: release l; what Redis does not confirm goes to the sweep. */
function releaseNow(this: void, _premature: boolean, l: lease.Lease): void {
  const [ok, err] = l.release();
  if (ok === undefined && err !== "not_owner") settle.orphan(l);
}

/** Release l from a timer, where cosockets work. */
function later(l: lease.Lease): void {
  const [ok, err] = timer_at(0, releaseNow, l);
  if (ok) return;
  // The sweep takes it once it has a timer of its own; else the key runs out by its ttl.
  settle.orphan(l);
  const n = quiet_due(unscheduled);
  if (n > 0) {
    ngx_log(ERR, "dlock: cannot schedule a release (left to the cleanup sweep, or to its ttl): ", err, quiet_more(n));
  }
}

/** A posted release was answered (in the sender's timer: nothing here may wait). */
function answered(this: void, j: backend.Job): void {
  const p = j.post as Posted;
  const [ok, err] = lease_posted(p.lease, j);
  // Not confirmed (Redis failed, a Cluster slot moved): once more from a timer, which follows redirects.
  if (ok === undefined && err !== "not_owner") later(p.lease);
}

/** Release l without waiting for Redis, from any phase: the key is on its way out. */
export function letGo(l: lease.Lease): void {
  const j = lease_post(l);
  if (j === undefined) {
    later(l);
    return;
  }
  const p: Posted = { answered, lease: l };
  j.post = p;
}
