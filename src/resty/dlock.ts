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
import * as options from "./dlock/core/options";
import * as ledger from "./dlock/core/ledger";
import * as multi from "./dlock/core/multi";
import * as recovery from "./dlock/core/recovery";
import * as workers from "./dlock/core/workers";
import * as reentrant from "./dlock/core/reentrant";
import * as majority from "./dlock/redis/majority";
import * as rwscripts from "./dlock/redis/rwscripts";
import * as scripts from "./dlock/redis/scripts";
import * as token from "./dlock/core/token";
import * as watchdog from "./dlock/core/watchdog";
import * as scoped from "./dlock/core/with";

const metered = acquire.metered;
const opening = acquire.opening;
const lua_setmetatable = setmetatable;
const lua_tostring = tostring;
const notSelf = check.notSelf;

import * as version from "./dlock/version";
export const _VERSION = version.VERSION;
export const MAX_KEY_LEN = options.MAX_KEY_LEN;
export const MAX_TTL = options.MAX_TTL;

/**
 * A lock factory: its methods, and its options as the typed API declares them
 * (api/index.d.ts: prefix, ttl, wait, owner, reentrant), read-only. The rest
 * is the library's (`_` fields), the Redis configuration (password included)
 * with it.
 */
export interface Locks {
  readonly prefix: string;
  readonly ttl: number;
  readonly wait: number;
  readonly owner: "random" | "worker";
  readonly reentrant: boolean;
  /**
   * A caller that holds a key gets nested leases on it (see reentrant.ts). The
   * public fields are copies to read: what the factory does never follows a
   * write to one of them.
   */
  readonly _reentrant: boolean;
  readonly _store: lease.Store;
  /** Makes its leases' tokens (owner = "random" or "worker"). */
  readonly _mint: (this: void) => LuaMultiReturn<[string | undefined, string | undefined]>;
  /** The kind of lease it hands out: with or without fencing. */
  readonly _kind: lease.Kind;
  /** The kind of its readers' leases (shared = true); nil when it refuses them, for `_noReaders`. */
  readonly _readers: lease.Kind | undefined;
  readonly _noReaders: string | undefined;
  readonly _id: string;
  acquire(key: string, opts?: LuaTable<string, unknown>): lease.AcquireResult;
  /** acquire() whose busy answer is not metered (a guard's first try). */
  _try(key: string, opts?: LuaTable<string, unknown>): lease.AcquireResult;
  /** (multikey) Several keys, all or nothing: one lease (core/multi.ts). */
  acquire_all(keys: string[], opts?: LuaTable<string, unknown>): multi.AcquireAllResult;
  held(): ledger.HeldLease[];
  with(key: string, opts: LuaTable<string, unknown> | undefined,
    fn: (this: void, ...args: unknown[]) => unknown, ...args: unknown[]): LuaMultiReturn<unknown[]>;
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
// A valid lease's extend puts its key back on a master that restarted empty (redis/majority.ts).
const MAJORITY_LOCK: lease.Kind = {
  acquire: scripts.ACQUIRE, release: scripts.RELEASE, extend: scripts.EXTEND, shared: false, fenced: false, drop: undefined,
  restore: majority.EXTEND_RESTORING,
};
// Readers of shared locks (redis/rwscripts.ts); their writers are the locks above.
const READ_LOCK: lease.Kind = {
  acquire: rwscripts.READ_ACQUIRE, release: rwscripts.READ_RELEASE, extend: rwscripts.READ_EXTEND, shared: true,
  fenced: false, drop: rwscripts.READ_DROP, reader: true,
};
const FENCED_READ_LOCK: lease.Kind = {
  acquire: rwscripts.READ_ACQUIRE_FENCED, release: rwscripts.READ_RELEASE, extend: rwscripts.READ_EXTEND, shared: true,
  fenced: true, drop: rwscripts.READ_DROP, reader: true,
};
// Why readers are refused by reentrant factories: a reader that took its key
// again as a writer would wait for itself. (Redlock's reason: its backend.)
const READERS_REENTRANT = "dlock: shared = true is refused by reentrant factories (reentrant = true): a reader " +
  "that took its key again as a writer would wait for itself";

/** The factories' metatable (its __index, the methods, is set once they are). */
const locksMt: { __index?: object } = {};

/**
 * lease, nil on success; nil, "busy", retry_after when wait = 0 and the key
 * is held; nil, "timeout", retry_after when waiting ran out; nil, "dlock: ..."
 * on bad input or Redis failure. retry_after: ms until the holder's lease ends.
 */
function take(locks: Locks, key: string, opts: LuaTable<string, unknown> | undefined, busyCounts: boolean): lease.AcquireResult {
  const refused = opening(locks, locksMt, "locks:acquire()", "acquire");
  if (refused !== undefined) return $multi(undefined, refused, undefined);
  const store = locks._store;
  const [bad, k, rkey, ttl, wait, renew, onLost, shared] = options.acquire(store, key, opts, true);
  if (bad !== undefined) return $multi(undefined, bad, undefined);
  let kind = locks._kind;
  if (shared) {
    const readers = locks._readers;
    if (readers === undefined) return $multi(undefined, locks._noReaders, undefined);
    kind = readers;
  }
  if (locks._reentrant) {
    const again = reentrant.nested(locks._id, rkey);
    if (again !== undefined) return $multi(again, undefined, undefined);
  }
  // A reader's token says so: its ticket in line, and a key handed to it (rwscripts.ts).
  let [l, err, retryAfter] = metered(store, kind, k, rkey, locks._mint, shared ? rwscripts.READER : undefined, ttl, wait,
    busyCounts);
  if (l === undefined) return $multi(l, err, retryAfter);
  if (renew) [l, err, retryAfter] = watchdog.hold(l, onLost);
  if (l !== undefined && locks._reentrant) l = reentrant.enter(locks._id, l);
  return $multi(l, err, retryAfter);
}

const locksMethods = {
  /**
   * lease, nil on success; nil, "busy", retry_after when wait = 0 and the key
   * is held; nil, "timeout", retry_after when waiting ran out; nil, "dlock: ..."
   * on bad input or Redis failure. retry_after: ms until the holder's lease ends.
   */
  acquire(this: Locks, key: string, opts?: LuaTable<string, unknown>): lease.AcquireResult {
    return take(this, key, opts, true);
  },

  /** acquire() whose busy answer is not metered: a guard's first try, which waits next (guard.ts). */
  _try(this: Locks, key: string, opts?: LuaTable<string, unknown>): lease.AcquireResult {
    return take(this, key, opts, false);
  },

  /**
   * (multikey) Several keys, all or nothing: one lease holding every key, or
   * the results of acquire (busy and timeout name the first busy key's holder).
   */
  acquire_all(this: Locks, keys: string[], opts?: LuaTable<string, unknown>): multi.AcquireAllResult {
    const refused = opening(this, locksMt, "locks:acquire_all()", "acquire_all");
    if (refused !== undefined) return $multi(undefined, refused, undefined);
    return multi.acquireAll(this, keys, opts);
  },

  /** Leases this nginx instance holds now (all workers), from the shared dict. */
  held(this: Locks): LuaMultiReturn<[ledger.HeldLease[] | undefined, string | undefined]> {
    const bad = notSelf(this, locksMt, "locks:held()");
    if (bad !== undefined) return $multi(undefined, bad);
    return $multi(ledger.held(this._store.dict), undefined);
  },

  with: scoped.withLease,
};
locksMt.__index = locksMethods;
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
  const [o, oerr] = options.newLocks(opts);
  if (o === undefined) return $multi(undefined, oerr);
  if (o.fencing) {
    const no = backend.refuses(o.redis, "fencing");
    if (no !== undefined) return $multi(undefined, no);
  }
  const kind = !backend.queues(o.redis) ? MAJORITY_LOCK : o.fencing ? FENCED_LOCK : LOCK;
  const store = options.store(o);
  const noReaders = backend.refuses(o.redis, "shared") ?? (o.reentrant ? READERS_REENTRANT : undefined);
  const readers = noReaders === undefined ? (o.fencing ? FENCED_READ_LOCK : READ_LOCK) : undefined;
  factories++;
  const locks = {
    prefix: store.prefix, ttl: store.ttl, wait: store.wait, owner: o.owner, reentrant: o.reentrant,
    _reentrant: o.reentrant, _store: store, _mint: o.owner === "worker" ? token.worker : token.random, _kind: kind, _readers: readers, _noReaders: noReaders,
    _id: lua_tostring(factories),
  };
  recovery.register(store, kind);
  // Readers' records (one per token) are given back with the readers' release.
  if (readers !== undefined) recovery.register(store, readers);
  return $multi(lua_setmetatable(locks, locksMt) as unknown as Locks, undefined);
}

/**
 * For init_worker_by_lua: release, owner-checked, the leases a worker that
 * died (SIGKILL, a crash) left in Redis, as soon as nginx replaces it (without
 * it this happens at the worker's first acquire). Returns true, or nil, err.
 */
export function init_worker(this: void): LuaMultiReturn<[true | undefined, string | undefined]> {
  const err = recovery.start();
  if (err !== undefined) return $multi(undefined, err);
  workers.started();
  return $multi(true as const, undefined);
}
