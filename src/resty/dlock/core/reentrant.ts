// Reentrancy (dlock.new({ reentrant = true })): a request (or a timer, outside
// requests) that acquires a key it already holds gets a nested lease at once,
// counted here, per worker; the Redis key stays one plain string with a PX
// expiry, so other clients (node-redlock, redis-py) still see an ordinary
// lock. The key is freed when the last of the nested leases is released.
//
// Every lease of a reentrant factory is a handle on a shared hold: its fields
// are the real lease's (ttl read through, as an extend changes it), release()
// counts down, extend() and valid() are the real lease's. A hold is found
// again only by the request that took it while that request is alive (a later
// request can get the same address), or by the very coroutine that took it
// outside requests.

import type * as lease from "./lease";
import * as check from "./check";
import * as request from "./request";

const co_running = coroutine.running;
const lua_tostring = tostring;
const lua_setmetatable = setmetatable;
const lua_pairs = pairs;
const lua_ipairs = ipairs;
const notSelf = check.notSelf;

interface Hold {
  readonly root: lease.Lease;
  count: number;
  readonly anchor: request.Anchor | undefined;
  readonly co: LuaThread | undefined;
  readonly slot: string;
}

/** Holds of this worker, by "<owner>\0<factory>\0<redis key>". */
const holds = new LuaTable<string, Hold>();
/** enter() calls since holds whose owner is gone were last dropped. */
let entered = 0;
const PRUNE_EVERY = 64;

interface Handle {
  readonly key: string;
  readonly token: string;
  readonly fence: number | undefined;
  readonly shared: boolean;
  readonly _hold: Hold;
  /** This handle was released (the key itself may still be held by another). */
  _done: boolean;
}

/** The handles' metatable (its __index is set once the methods are). */
const handleMt: { __index?: (this: void, x: Handle, k: string) => unknown } = {};

const handleMethods = {
  /** true (the key is freed with the last handle), or the real release's nil, err. */
  release(this: Handle): LuaMultiReturn<[true | undefined, string | undefined]> {
    const bad = notSelf(this, handleMt, "lease:release()");
    if (bad !== undefined) return $multi(undefined, bad);
    if (this._done) return $multi(undefined, "not_owner");
    const h = this._hold;
    if (h.count > 1) {
      h.count--;
      this._done = true;
      // The key is no longer ours (it ran out, or the watchdog lost it): say so
      // now, not only at the last release, which asks Redis.
      if (!h.root.valid()) return $multi(undefined, "not_owner");
      return $multi(true as const, undefined);
    }
    const [ok, err] = h.root.release();
    if (ok !== undefined || err === "not_owner") {
      this._done = true;
      h.count = 0;
      if (holds.get(h.slot) === h) holds.delete(h.slot);
    }
    return $multi(ok, err);
  },
  extend(this: Handle, ttl?: number): LuaMultiReturn<[true | undefined, string | undefined]> {
    const bad = notSelf(this, handleMt, "lease:extend()");
    if (bad !== undefined) return $multi(undefined, bad);
    if (this._done) return $multi(undefined, "not_owner");
    return this._hold.root.extend(ttl);
  },
  valid(this: Handle): boolean {
    if (notSelf(this, handleMt, "lease:valid()") !== undefined) return false;
    return !this._done && this._hold.root.valid();
  },
};
/** ttl is the real lease's as it is now: an extend through any handle changes it for all. */
handleMt.__index = (x: Handle, k: string): unknown => {
  if (k === "ttl") return x._hold.root.ttl;
  return (handleMethods as unknown as LuaTable<string, unknown>).get(k);
};

function handle(h: Hold): lease.Lease {
  const r = h.root;
  const x: Handle = { key: r.key, token: r.token, fence: r.fence, shared: r.shared, _hold: h, _done: false };
  return lua_setmetatable(x, handleMt) as unknown as lease.Lease;
}

/** Who is asking: the request (by address), else the running coroutine. */
function owner(): LuaMultiReturn<[string, request.Anchor | undefined, LuaThread | undefined]> {
  const a = request.anchor();
  if (a !== undefined) return $multi("r" + lua_tostring(a.id), a, undefined);
  const co = co_running();
  return $multi(lua_tostring(co), undefined, co);
}

/**
 * A nested lease when the caller already holds rkey through this factory's
 * `factory` id, else nil. A hold whose lease is over (released, lost, expired)
 * or whose owner is gone is dropped.
 */
export function nested(factory: string, rkey: string): lease.Lease | undefined {
  const [who, anchor, co] = owner();
  const slot = who + "\0" + factory + "\0" + rkey;
  const h = holds.get(slot);
  if (h === undefined) return undefined;
  let same: boolean;
  if (h.anchor !== undefined) same = anchor !== undefined && request.alive(h.anchor) && h.anchor.id === anchor.id;
  else same = h.co === co;
  if (!same || !h.root.valid()) {
    holds.delete(slot);
    return undefined;
  }
  h.count++;
  return handle(h);
}

function gone(h: Hold): boolean {
  if (h.anchor !== undefined) return !request.alive(h.anchor);
  return h.co === undefined || request.finished(h.co);
}

/**
 * Drop holds of requests and timers that ended without releasing: their
 * leases expire in Redis by their ttl; here they would only take memory.
 */
function prune(): void {
  const dead: string[] = [];
  for (const [slot, h] of lua_pairs(holds)) {
    if (h.count === 0 || gone(h) || h.root._released) dead.push(slot);
  }
  for (const [_, slot] of lua_ipairs(dead)) holds.delete(slot);
}

/** The first lease of rkey by this caller: registered, and handed out as a handle. */
export function enter(factory: string, root: lease.Lease): lease.Lease {
  entered++;
  if (entered >= PRUNE_EVERY) {
    entered = 0;
    prune();
  }
  const [who, anchor, co] = owner();
  const slot = who + "\0" + factory + "\0" + root._rkey;
  const h: Hold = { root, count: 1, anchor, co, slot };
  holds.set(slot, h);
  return handle(h);
}
