// resty.dlock: a distributed lock on Redis for OpenResty.
//
//   local dlock = require "resty.dlock"
//   local locks = assert(dlock.new({ dict = "dlock", redis = { host = "127.0.0.1" } }))
//   local lease, err, retry_after = locks:acquire("orders:42", { ttl = 10000, wait = 0 })
//   ...
//   lease:release()

import * as acquire from "./dlock/core/acquire";
import * as backend from "./dlock/redis/backend";
import * as check from "./dlock/core/check";
import * as lease from "./dlock/core/lease";
import * as ledger from "./dlock/core/ledger";
import * as meter from "./dlock/core/meter";
import * as recovery from "./dlock/core/recovery";
import * as reentrant from "./dlock/core/reentrant";
import * as scripts from "./dlock/redis/scripts";
import * as token from "./dlock/core/token";
import * as watchdog from "./dlock/core/watchdog";

export { VERSION as _VERSION } from "./dlock/version";
export const MAX_KEY_LEN = lease.MAX_KEY_LEN;
export const MAX_TTL = lease.MAX_TTL;

export interface Locks extends lease.Store {
  readonly owner: "random" | "worker";
  /** The kind of lease it hands out: with or without fencing. */
  readonly kind: lease.Kind;
  /** A caller that holds a key gets nested leases on it (see reentrant.ts). */
  readonly reentrant: boolean;
  readonly id: string;
  acquire(key: string, opts?: LuaTable<string, unknown>): lease.AcquireResult;
  held(): ledger.HeldLease[];
  with(key: string, opts: LuaTable<string, unknown> | undefined, fn: (this: void, ...args: unknown[]) => unknown, ...args: unknown[]): LuaMultiReturn<unknown[]>;
}

// Locks wait in line (scripts.ts): first come, first served across the fleet.
const LOCK: lease.Kind = {
  acquire: scripts.ACQUIRE_QUEUED, release: scripts.RELEASE_QUEUED, extend: scripts.EXTEND, shared: false, fenced: false,
  drop: scripts.DROP,
};
const FENCED_LOCK: lease.Kind = {
  acquire: scripts.ACQUIRE_QUEUED_FENCED, release: scripts.RELEASE_QUEUED, extend: scripts.EXTEND, shared: false, fenced: true,
  drop: scripts.DROP,
};
// Under Redlock a queue would live on every master with no one order: waiters take turns instead (acquire.ts).
const MAJORITY_LOCK: lease.Kind = {
  acquire: scripts.ACQUIRE, release: scripts.RELEASE, extend: scripts.EXTEND, shared: false, fenced: false, drop: undefined,
};
const NEW_OPTIONS = check.set("dict", "redis", "prefix", "owner", "ttl", "wait", "fencing", "reentrant", "name");

const locksMethods = {
  /**
   * lease, nil on success; nil, "busy", retry_after when wait = 0 and the key
   * is held; nil, "timeout", retry_after when waiting ran out; nil, "dlock: ..."
   * on bad input or Redis failure. retry_after: ms until the holder's lease ends.
   */
  acquire(this: Locks, key: string, opts?: LuaTable<string, unknown>): lease.AcquireResult {
    recovery.start();
    const [k, ttlOrErr, wait, renew, onLost] = lease.parseAcquire(this, key, opts);
    if (k === undefined) return $multi(undefined, ttlOrErr as string, undefined);
    if (this.reentrant) {
      const again = reentrant.nested(this.id, this.prefix + k);
      if (again !== undefined) return $multi(again, undefined, undefined);
    }
    ngx.update_time();
    const t0 = ngx.now();
    const [tok, terr] = (this.owner === "worker" ? token.worker : token.random)();
    if (tok === undefined) {
      meter.refused(this.meter, terr);
      return $multi(undefined, terr, undefined);
    }
    let [l, err, retryAfter] = acquire.acquire(this, this.kind, k, tok, ttlOrErr as number, wait);
    if (l === undefined) {
      meter.refused(this.meter, err);
      return $multi(l, err, retryAfter);
    }
    meter.acquired(this.meter, l.since / 1000 - t0);
    if (renew) [l, err, retryAfter] = watchdog.hold(l, onLost);
    if (l !== undefined && this.reentrant) l = reentrant.enter(this.id, l);
    return $multi(l, err, retryAfter);
  },

  /** Leases this nginx instance holds now (all workers), from the shared dict. */
  held(this: Locks): ledger.HeldLease[] {
    return ledger.held(this.dict);
  },

  with: lease.withLease,
};
const locksMt = { __index: locksMethods };
/** Factories made in this process: their ids for reentrant holds. */
let factories = 0;

/**
 * Create a lock factory. Returns locks, or nil and an error naming the bad option.
 * @customName new
 */
export function create(this: void, opts: unknown): LuaMultiReturn<[Locks | undefined, string | undefined]> {
  if (opts === undefined) {
    return $multi(undefined, "dlock: new needs an options table with at least dict");
  }
  const [o, oerr] = check.options("dlock.new options", opts, NEW_OPTIONS);
  if (o === undefined) return $multi(undefined, oerr);
  const [store, serr] = lease.parseStore(o, "dlock:", "dlock");
  if (store === undefined) return $multi(undefined, serr);
  let owner: "random" | "worker" = "random";
  const ov = o.get("owner");
  if (ov !== undefined) {
    if (ov !== "random" && ov !== "worker") {
      return check.fail("owner must be \"random\" or \"worker\"", ov);
    }
    owner = ov;
  }
  let fencing = false;
  if (o.get("fencing") !== undefined) {
    const [b, err] = check.bool("fencing", o.get("fencing"));
    if (b === undefined) return $multi(undefined, err);
    fencing = b;
  }
  if (fencing) {
    const refused = backend.refuses(store.redis, "fencing");
    if (refused !== undefined) return $multi(undefined, refused);
  }
  const kind = !backend.queues(store.redis) ? MAJORITY_LOCK : fencing ? FENCED_LOCK : LOCK;
  let reent = false;
  if (o.get("reentrant") !== undefined) {
    const [b, err] = check.bool("reentrant", o.get("reentrant"));
    if (b === undefined) return $multi(undefined, err);
    reent = b;
  }
  factories++;
  const locks = {
    dict: store.dict, redis: store.redis, prefix: store.prefix, ttl: store.ttl, wait: store.wait, meter: store.meter,
    owner, kind, reentrant: reent, id: tostring(factories),
  };
  recovery.register(store, kind);
  return $multi(setmetatable(locks, locksMt) as unknown as Locks, undefined);
}

/**
 * For init_worker_by_lua: release, owner-checked, the leases a worker that
 * died (SIGKILL, a crash) left in Redis, as soon as nginx replaces it (without
 * it this happens at the worker's first acquire). Returns true, or nil, err.
 */
export function init_worker(this: void): LuaMultiReturn<[true | undefined, string | undefined]> {
  const err = recovery.start();
  if (err !== undefined) return $multi(undefined, err);
  return $multi(true as const, undefined);
}
