// What Redis's answer to a release or an extend does to a lease, one lease at
// a time (lease.ts) or many in one round trip (batch.ts): the lease ends, its
// record leaves the shared dict, the next waiter is woken; or, when no answer
// came, what the call may still have done in Redis.

import * as ledger from "./ledger";
import * as meter from "./meter";
import * as orphans from "./orphans";
import * as backend from "../redis/backend";
import type * as lease from "./lease";
import type * as scripts from "../redis/scripts";
import * as waits from "./wait";
import * as wakeups from "./wakeups";
import * as clock from "./clock";

type Lease = lease.Lease;
type Fault = backend.Fault;
type Result = LuaMultiReturn<[true | undefined, string | undefined]>;

const clock_now = clock.now;
const ngx_update_time = ngx.update_time;
const math_max = math.max;
const lua_type = type;
const confirmsOwner = backend.confirmsOwner;
const LOST_HORIZON_MS = orphans.LOST_HORIZON * 1000;

/** Epoch ms now, fresh (not the time cached at the start of this event loop cycle). */
function nowMs(): number {
  ngx_update_time();
  return clock_now() * 1000;
}

/**
 * The script an extend of l sends at `at` (epoch ms, fresh): its kind's
 * `restore` (Redlock: it also puts the key back on a master that lost it)
 * while the lease is valid, else `extend`, which only re-expires. Past its
 * validity a key put back could be one that another holder took and gave back
 * meanwhile: the extend would say yes across a gap in which the lease was not ours.
 */
export function extendScript(l: Lease, at: number): scripts.Script {
  const r = l._kind.restore;
  return r !== undefined && at < l._validUntil ? r : l._kind.extend;
}

/** An extend or a release of l failed: what its outcome may have changed in Redis. */
export function unconfirmed(l: Lease, fault: Fault | undefined, release: boolean): void {
  if (fault !== "lost") {
    return;
  }
  if (release) {
    // Sent (at the latest now) while the key could not have expired yet.
    if (nowMs() < l._validUntil) {
      l._releaseSent = true;
    }
  } else {
    // A PEXPIRE queued in a paused Redis runs when Redis resumes, whenever that is.
    l._expires = math_max(l._expires, nowMs() + LOST_HORIZON_MS);
  }
}

/**
 * Its record out of the shared dict, and out of the held gauge (once: later
 * calls do nothing). `owned`: Redis confirmed the lease held its key when the
 * release deleted it, so the record is not a successor's (ledger.dropOwned).
 */
function forget(l: Lease, owned?: boolean): void {
  const v = l._recv;
  if (v === undefined) return;
  l._recv = undefined;
  const store = l._store;
  if (owned === true) {
    ledger.dropOwned(store.dict, l._rec);
    meter.forgotten(store.meter, l._recAt);
  } else if (ledger.drop(store.dict, l._rec, v)) {
    meter.forgotten(store.meter, l._recAt);
  }
}

/** Redis says the key is not ours any more: counted lost, unless the watchdog did already. */
function gone(l: Lease): void {
  if (!l._lost) meter.lost(l._store.meter);
}

/**
 * Redis answered the owner-checked release of l (1: deleted, else not ours):
 * the lease is over. A key found gone after a release reached Redis in time
 * was deleted by that release (or expired after it was asked to go), so that
 * still counts as released.
 */
function released(l: Lease, reply: RedisValue, untimed = false): Result {
  l._released = true;
  // 1, or the first waiter's token: deleted while still this lease's, where
  // the topology's answer proves that (backend.confirmsOwner).
  forget(l, (reply === 1 || lua_type(reply) === "string") && confirmsOwner(l._store.redis));
  const store = l._store;
  const rkey = l._rkey;
  if (lua_type(reply) === "string") {
    // Handed to the first waiter in line (its token): if it waits in this
    // worker, it goes now, without waiting for the announcement to come back.
    waits.wakeToken(rkey, reply as string);
    if (!untimed) meter.released(store.meter, (nowMs() - l._since) / 1000);
    return $multi(true as const, undefined);
  }
  // With a live subscription the release's PUBLISH wakes our waiters; waking
  // one here too would send two of this worker's waiters after the key.
  if (!wakeups.live(store.redis, rkey)) waits.wake(rkey);
  if (reply === 1 || l._releaseSent) {
    if (!untimed) meter.released(store.meter, (nowMs() - l._since) / 1000);
    return $multi(true as const, undefined);
  }
  gone(l);
  return $multi(undefined, "not_owner");
}

/**
 * A key of a set being taken ran out before the set was whole: over, and not
 * lost (nobody was ever given a lease on the set).
 */
export function ranOut(l: Lease): void {
  l._released = true;
  forget(l);
}

/** Redis answered the owner-checked extend of l, sent at `sent` (epoch ms), to `ms`. */
export function extended(l: Lease, reply: RedisValue, ms: number, sent: number): Result {
  if (reply !== 1) {
    // Never ours again: tokens are unique per lease.
    l._released = true;
    forget(l);
    gone(l);
    return $multi(undefined, "not_owner");
  }
  const store = l._store;
  l.ttl = ms;
  l._validUntil = sent + backend.validity(store.redis, ms);
  l._expires = math_max(l._expires, nowMs() + ms);
  const v = l._recv;
  if (v !== undefined) {
    const [nv, to] = ledger.move(store.dict, l._rec, v, l.token, l.key, ms);
    if (nv !== undefined) meter.moved(store.meter, l._recAt, to);
    l._recv = nv;
    l._recAt = to;
  }
  return $multi(true as const, undefined);
}

interface Unreleased extends orphans.Orphan {
  readonly lease: Lease;
}

function swept(this: void, o: orphans.Orphan, reply: RedisValue | undefined): void {
  const l = (o as Unreleased).lease;
  if (!l._released) {
    if (reply === undefined) {
      // Given up at its expiry: the key is gone by now.
      l._released = true;
      forget(l);
    } else {
      released(l, reply);
    }
  }
}

/** Hand a lease whose release Redis did not confirm to the sweep, which retries it until the key expires. */
export function orphan(l: Lease): void {
  const o: Unreleased = {
    lost: "release", conf: l._store.redis, release: l._kind.release, rkey: l._rkey, token: l.token,
    deadline: l._expires / 1000, settle: swept, lease: l,
  };
  orphans.adopt(o);
}

// Exported by name: this module's own uses of them are locals, not lookups in its exports table.
export { nowMs, forget, released };
