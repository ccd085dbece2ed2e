// resty.dlock.semaphore: at most `permits` holders per key across the fleet.
//
//   local semaphore = require "resty.dlock.semaphore"
//   local sem = assert(semaphore.new({ dict = "dlock", permits = 3, redis = { ... } }))
//   local permit, err, retry_after = sem:acquire("reports:" .. ngx.var.remote_addr, { ttl = 60000, wait = 2000 })
//   ...
//   permit:release()
//
// Each permit is a lease of its own (random token, ttl, owner-checked release
// and extend), so capacity held by a crashed nginx comes back when its permits expire.

import * as acquire from "./core/acquire";
import * as backend from "./redis/backend";
import * as check from "./core/check";
import * as lease from "./core/lease";
import * as options from "./core/options";
import * as ledger from "./core/ledger";
import * as scripts from "./redis/scripts";
import * as recovery from "./core/recovery";
import * as token from "./core/token";
import * as watchdog from "./core/watchdog";
import * as scoped from "./core/with";

const metered = acquire.metered;
const opening = acquire.opening;
const lua_setmetatable = setmetatable;
const notSelf = check.notSelf;

import * as version from "./version";
export const _VERSION = version.VERSION;
/** Most permits per key. */
export const MAX_PERMITS = options.MAX_PERMITS;

/**
 * A semaphore factory: its methods, and its options as the typed API declares
 * them (api/index.d.ts: prefix, ttl, wait, permits), read-only. The rest is
 * the library's (`_` fields).
 */
export interface Semaphore {
  readonly prefix: string;
  readonly ttl: number;
  readonly wait: number;
  readonly permits: number;
  /** What the semaphore acts on: permits above is a copy to read (a write to it changes nothing). */
  readonly _permits: number;
  readonly _store: lease.Store;
  acquire(key: string, opts?: LuaTable<string, unknown>): lease.AcquireResult;
  /** acquire() whose busy answer is not metered (a guard's first try). */
  _try(key: string, opts?: LuaTable<string, unknown>): lease.AcquireResult;
  held(): ledger.HeldLease[];
  with(key: string, opts: LuaTable<string, unknown> | undefined,
    fn: (this: void, ...args: unknown[]) => unknown, ...args: unknown[]): LuaMultiReturn<unknown[]>;
}

const PERMIT: lease.Kind = {
  acquire: scripts.SEM_ACQUIRE, release: scripts.SEM_RELEASE, extend: scripts.SEM_EXTEND, shared: true, fenced: false, drop: undefined,
};

/** The semaphores' metatable (its __index, the methods, is set once they are). */
const semaphoreMt: { __index?: object } = {};

/** sem:acquire(), its busy answer metered when busyCounts. */
function take(sem: Semaphore, key: string, opts: LuaTable<string, unknown> | undefined, busyCounts: boolean): lease.AcquireResult {
  const refused = opening(sem, semaphoreMt, "sem:acquire()", "acquire");
  if (refused !== undefined) return $multi(undefined, refused, undefined);
  const store = sem._store;
  const [bad, k, rkey, ttl, wait, renew, onLost] = options.acquire(store, key, opts, false);
  if (bad !== undefined) return $multi(undefined, bad, undefined);
  const [l, err, retryAfter] = metered(store, PERMIT, k, rkey, token.random, undefined, ttl, wait, busyCounts, sem._permits);
  if (l === undefined || !renew) return $multi(l, err, retryAfter);
  return watchdog.hold(l, onLost);
}

const semaphoreMethods = {
  /**
   * permit, nil; nil, "busy", retry_after (wait = 0, all permits taken);
   * nil, "timeout", retry_after; nil, "dlock: ..." on bad input or Redis failure.
   * retry_after: ms until the earliest permit of the key expires.
   */
  acquire(this: Semaphore, key: string, opts?: LuaTable<string, unknown>): lease.AcquireResult {
    return take(this, key, opts, true);
  },

  /** acquire() whose busy answer is not metered: a guard's first try, which waits next (guard.ts). */
  _try(this: Semaphore, key: string, opts?: LuaTable<string, unknown>): lease.AcquireResult {
    return take(this, key, opts, false);
  },

  /** Permits (and locks) this nginx instance holds now, from the shared dict. */
  held(this: Semaphore): LuaMultiReturn<[ledger.HeldLease[] | undefined, string | undefined]> {
    const bad = notSelf(this, semaphoreMt, "sem:held()");
    if (bad !== undefined) return $multi(undefined, bad);
    return $multi(ledger.held(this._store.dict), undefined);
  },

  with: scoped.withLease,
};
semaphoreMt.__index = semaphoreMethods;

/**
 * Create a semaphore factory. Returns it, or nil and an error naming the bad option.
 * @customName new
 */
export function create(this: void, opts: unknown): LuaMultiReturn<[Semaphore | undefined, string | undefined]> {
  if (opts === undefined) {
    return $multi(undefined, "dlock: semaphore.new needs an options table with at least dict and permits");
  }
  const [o, oerr] = options.newSemaphore(opts);
  if (o === undefined) return $multi(undefined, oerr);
  const refused = backend.refuses(o.redis, "semaphore");
  if (refused !== undefined) return $multi(undefined, refused);
  const store = options.store(o);
  recovery.register(store, PERMIT);
  const sem = { prefix: store.prefix, ttl: store.ttl, wait: store.wait, permits: o.permits, _permits: o.permits, _store: store };
  return $multi(lua_setmetatable(sem, semaphoreMt) as unknown as Semaphore, undefined);
}
