// The `with` method of locks and semaphores: run a function while holding a
// key, and release whatever the function does.

import * as check from "./check";
import type * as lease from "./lease";
import * as settle from "./settle";

const lua_type = type;
const lua_select = select;

/** Anything with an acquire method: locks, semaphores. */
interface Acquirer {
  acquire(key: string, opts?: LuaTable<string, unknown>): lease.AcquireResult;
}

// pcall typed for any number of results, so they pass through without a table.
const protect = pcall as unknown as (this: void, fn: (this: void, ...args: unknown[]) => unknown, ...args: unknown[]) => LuaMultiReturn<unknown[]>;

/**
 * Release, then hand on fn's results (pcall's `ok, ...`) or its error. A
 * release Redis did not confirm goes to the background sweep and, when fn
 * succeeded, is the result: the caller must not believe the key free.
 */
function finish(this: void, l: lease.Lease, ...pcalled: unknown[]): LuaMultiReturn<unknown[]> {
  const [released, rerr] = l.release();
  const stuck = released === undefined && rerr !== "not_owner";
  if (stuck) {
    // A reentrant factory's handle (reentrant.ts): the lease left to the sweep is its root, which it released last.
    const hold = (l as unknown as { _hold?: { root: lease.Lease } })._hold;
    settle.orphan(hold !== undefined ? hold.root : l);
  }
  const [ok, e] = lua_select(1, ...pcalled);
  if (ok !== true) {
    return $multi(undefined, "dlock: callback failed while holding " + l.key + ": " + check.text(e));
  }
  if (stuck) {
    return $multi(undefined, "dlock: could not release " + l.key + " after the callback (retried until it expires): " +
      check.reason(rerr));
  }
  return lua_select(2, ...pcalled);
}

/**
 * Run fn(...) while holding key; the lease is released whatever fn does.
 * Returns fn's results, or nil, err when the lease was not acquired, fn
 * raised, or the release failed.
 */
export function withLease(this: Acquirer, key: string, opts: LuaTable<string, unknown> | undefined,
  fn: (this: void, ...args: unknown[]) => unknown, ...args: unknown[]): LuaMultiReturn<unknown[]> {
  // The factory's own acquire: locks:with() and sem:with() share this function.
  if (lua_type(this) !== "table" || lua_type(this.acquire) !== "function") {
    return check.fail("with() was called without its object (with \".\" where \":\" was meant)", this);
  }
  if (lua_type(fn) !== "function") {
    return check.fail("with needs a function", fn);
  }
  const [l, err, retryAfter] = this.acquire(key, opts);
  if (l === undefined) {
    return $multi(undefined, err, retryAfter);
  }
  return finish(l, ...protect(fn, ...args));
}
