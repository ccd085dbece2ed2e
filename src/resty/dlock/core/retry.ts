// What both ways of waiting for a key (queued.ts in line, acquire.ts by
// turns) share: how long a poll naps, what a failed attempt leaves behind,
// and what a busy answer says about the holder.

import * as backend from "../redis/backend";
import type * as lease from "./lease";
import * as ledger from "./ledger";
import * as orphans from "./orphans";
import type * as scripts from "../redis/scripts";
import * as clock from "./clock";

type Store = lease.Store;
type Kind = lease.Kind;
type Fault = backend.Fault;

const clock_now = clock.now;
const math_random = math.random;
const lua_type = type;
const lua_tostring = tostring;

export const FIRST_BACKOFF = 2; // ms
export const MAX_BACKOFF = 64; // ms, between Redis polls while no wake-up can come (below scripts.GRANT)

/** The next nap of a waiter that polls: jittered, doubling, never past the holder's expiry. */
export function poll(backoff: number, retryAfter: number | undefined): number {
  let nap = backoff / 2 + math_random() * backoff / 2;
  if (retryAfter !== undefined && retryAfter + 1 < nap) nap = retryAfter + 1;
  return nap;
}

/**
 * The last error failed() ended an acquire with for a "not now" fault (a
 * transient one: no time to wait, or none left); nil after any other. Its
 * caller reads it at once through notNow(), nothing yielding in between.
 */
let lastNotNow: string | undefined;

/**
 * Did the acquire that just returned err end on a "not now" answer? A face that
 * first tries without waiting (compat) then waits it out, as a waiting acquire
 * would; not a hard error (auth, a bad key, a script refused).
 */
export function notNow(err: string | undefined): boolean {
  return err !== undefined && err === lastNotNow;
}

/**
 * An attempt failed on the way to or from Redis: the error to return now, or
 * nil to try again (a transient fault while there is time to wait). `release`
 * gives back a key taken on the master only; `cleanup` removes what a lost
 * reply may have left.
 */
export function failed(store: Store, kind: Kind, rkey: string, tok: string, err: string | undefined, fault: Fault | undefined,
  wait: number, deadline: number, cleanup: scripts.Script): string | undefined {
  if (fault === "replicas") {
    // Taken on the master only: a failover now would hand it to someone else. Give it back.
    const [gone] = backend.own(store.redis, kind.release, rkey, tok);
    if (gone === undefined) orphans.adoptAcquire(store.redis, kind.release, rkey, tok);
    return lua_tostring(err) + "; released";
  }
  if (fault === "lost") {
    // The write may have landed: delete it if it did, so it cannot block others for a whole ttl.
    orphans.adoptAcquire(store.redis, cleanup, rkey, tok);
    return lua_tostring(err) + "; acquire outcome unknown, owner-checked cleanup scheduled";
  }
  if (fault !== "transient" || wait === 0 || deadline - clock_now() * 1000 <= 0) {
    const e = err === undefined ? "dlock: redis failed" : err;
    lastNotNow = fault === "transient" ? e : undefined;
    return e;
  }
  return undefined;
}

/** Is rkey held in this nginx (its shared dict says so)? Then its release is announced: it is ours. */
export function heldHere(store: Store, rkey: string): boolean {
  const [pid] = ledger.holder(store.dict, ledger.recordKey(store.redis.keyspace, rkey, "", false));
  return pid !== undefined;
}

/** A busy reply's PTTL of the holder as retry_after (nil: the key has no expiry). */
export function pttlOf(res: RedisValue): number | undefined {
  return lua_type(res) === "number" && (res as number) >= 0 ? res as number : undefined;
}
