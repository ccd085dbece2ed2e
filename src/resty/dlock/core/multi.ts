// Several keys, all or nothing: locks:acquire_all({ "a", "b" }, opts) returns
// one lease holding every key, or nothing. Each key is a single lock's key
// (the token, PX ttl), so a set excludes single-key holders key by key, and
// each is recorded, released, renewed and recovered as a single lease is: the
// set's lease is its keys' leases (`_parts`, one per key, in the caller's
// order) behind one face.
//
// Taking them:
//   together   one script for all the keys (redis/multiscripts.ts) where they
//              can share a script call: standalone, Sentinel, and Cluster when
//              every key hashes to one slot (the same hash tag).
//   in order   otherwise (Cluster, keys of different slots): key by key in
//              sorted order, the keys taken given back at the first busy one.
//   majority   Redlock: the one script on every master, the majority decides
//              (redis/multiquorum.ts).
// Either way nothing is held when an attempt fails. Waiting (wait > 0) stands
// in the first busy key's line, as a single acquire of that key would, holding
// nothing else; once that key is ours, the set is tried again with it (a key
// that holds our token counts as free). Should another key be busy then, the
// key is given back (passed on to its line) and the wait moves to that key.
// No caller ever waits while holding a key another waits for, so no two
// callers deadlock, whatever order they name the keys in.

import * as acquire from "./acquire";
import * as backend from "../redis/backend";
import * as batch from "./batch";
import * as lease from "./lease";
import * as meter from "./meter";
import * as multilease from "./multilease";
import * as multiquorum from "../redis/multiquorum";
import * as multiscripts from "../redis/multiscripts";
import * as options from "./options";
import * as orphans from "./orphans";
import * as retry from "./retry";
import * as scripts from "../redis/scripts";

type Lease = lease.Lease;
type Store = lease.Store;
type Kind = lease.Kind;
type Fault = backend.Fault;

const ngx_ = ngx;
const ngx_now = ngx.now;
const ngx_update_time = ngx.update_time;
const lua_pairs = pairs;
const lua_tostring = tostring;
const lua_unpack = unpack as (this: void, t: (string | number)[]) => LuaMultiReturn<(string | number)[]>;
const table_sort = table.sort;
const math_min = math.min;
const hashed = scripts.hashed;
const queueKey = scripts.queueKey;
const fenceKey = backend.fenceKey;
type MultiLease = multilease.MultiLease;
export type AcquireAllResult = multilease.AcquireAllResult;

/** What a factory gives acquire_all: locks (dlock.ts). */
export interface Factory {
  readonly _store: Store;
  readonly _kind: Kind;
  readonly _mint: (this: void) => LuaMultiReturn<[string | undefined, string | undefined]>;
  readonly reentrant: boolean;
}

const REENTRANT = "dlock: acquire_all is refused by reentrant factories (reentrant = true): a set is never nested, " +
  "and a key of it the caller already held would wait for itself";

// ------------------------------------------------------------------ taking the keys

/** One attempt's plan: the keys, their Redis keys, and the order of calls (nil: one call for all). */
interface Plan {
  readonly store: Store;
  readonly kind: Kind;
  readonly keys: string[];
  readonly rkeys: string[];
  readonly order: number[] | undefined;
  readonly tok: string;
  readonly ttl: number;
  /** Per key index: its lease once taken (a key taken in line is there before the attempt). */
  parts: LuaTable<number, Lease>;
  fences: LuaTable<number, number>;
}

/** An attempt: "OK"; "busy" with the index of the first busy key and its holder's PTTL; or the error and its fault. */
type Attempt = LuaMultiReturn<[string, number, number | undefined, Fault | undefined]>;

/** Run the acquire script for the keys at `idx` (indexes into p.keys), making their leases when taken. */
function take(p: Plan, idx: number[]): Attempt {
  const store = p.store;
  const conf = store.redis;
  const n = idx.length;
  const fenced = p.kind.fenced;
  // Redlock locks do not queue (dlock.ts): their keys alone.
  const quorum = conf.topology === "redlock";
  const args: (string | number)[] = [];
  for (const j of $range(2, n)) args.push(p.rkeys[idx[j - 1]! - 1]!);
  if (fenced) for (const j of $range(1, n)) args.push(fenceKey(conf, p.rkeys[idx[j - 1]! - 1]!));
  if (!quorum) for (const j of $range(1, n)) args.push(queueKey(p.rkeys[idx[j - 1]! - 1]!, conf.slotted));
  args.push(p.tok);
  args.push(p.ttl);
  args.push(n);
  const s = multiscripts.acquire(n, quorum ? 1 : fenced ? 3 : 2);
  const rkey = p.rkeys[idx[0]! - 1]!;
  const sent = ngx_now() * 1000;
  let res: RedisValue | undefined;
  let err: string | undefined;
  let fault: Fault | undefined;
  if (quorum) {
    const rkeys: string[] = [];
    for (const j of $range(1, n)) rkeys[j - 1] = p.rkeys[idx[j - 1]! - 1]!;
    [res, err, fault] = multiquorum.call(conf, s, rkey, args, rkeys, p.tok, p.ttl);
  } else {
    [res, err, fault] = backend.call(conf, s, rkey, ...lua_unpack(args));
  }
  if (res === undefined) {
    if (fault === "lost" || fault === "replicas") {
      // The keys may be (replicas: are) ours on the master: give them back, owner-checked, in the background.
      const cleanup = p.kind.drop ?? p.kind.release;
      for (const j of $range(1, n)) orphans.adoptAcquire(conf, cleanup, p.rkeys[idx[j - 1]! - 1]!, p.tok);
      const what = fault === "lost" ? "; acquire outcome unknown, owner-checked cleanup scheduled" : "; released";
      return $multi(lua_tostring(err) + what, 0, undefined, "failed");
    }
    return $multi(err ?? "dlock: redis failed", 0, undefined, fault ?? "failed");
  }
  const [at, pttl] = multiscripts.busy(res);
  if (at !== undefined) return $multi("busy", idx[at - 1]!, pttl, undefined);
  for (const j of $range(1, n)) {
    const i = idx[j - 1]!;
    const fence = fenced ? multiscripts.fenceOf(res, j) : undefined;
    if (fence !== undefined) p.fences.set(i, fence);
    if (!p.parts.has(i)) p.parts.set(i, lease.make(store, p.kind, p.keys[i - 1]!, p.rkeys[i - 1]!, p.tok, p.ttl, sent, fence));
  }
  return $multi("OK", 0, undefined, undefined);
}

/** Try the whole set once: together, or key by key in order (a key already ours is skipped). */
function attempt(p: Plan): Attempt {
  const order = p.order;
  if (order === undefined) {
    const all: number[] = [];
    for (const i of $range(1, p.keys.length)) all[i - 1] = i;
    return take(p, all);
  }
  for (const k of $range(1, order.length)) {
    const i = order[k - 1]!;
    const held = p.parts.get(i);
    if (held !== undefined) {
      if (held.fence !== undefined) p.fences.set(i, held.fence);
    } else {
      const [what, at, pttl, fault] = take(p, [i]);
      if (what !== "OK") return $multi(what, at, pttl, fault);
    }
  }
  return $multi("OK", 0, undefined, undefined);
}

/** Give back every key the plan holds (owner-checked; unconfirmed ones go to the background sweep). */
function giveBack(p: Plan): void {
  const list: Lease[] = [];
  for (const [, l] of lua_pairs(p.parts)) list.push(l);
  p.parts = new LuaTable();
  p.fences = new LuaTable();
  if (list.length > 0) batch.releaseAll(list);
}

function byRkey(this: void, a: [string, number], b: [string, number]): boolean {
  return a[0] < b[0];
}

/** Cluster keys of more than one slot: the order to take them in (sorted by Redis key); nil when one call can take them all. */
function orderOf(store: Store, rkeys: string[]): number[] | undefined {
  if (!store.redis.slotted) return undefined;
  const h = hashed(rkeys[0]!);
  let one = true;
  for (const i of $range(2, rkeys.length)) {
    if (hashed(rkeys[i - 1]!) !== h) {
      one = false;
      break;
    }
  }
  if (one) return undefined;
  const pairsOf: [string, number][] = [];
  for (const i of $range(1, rkeys.length)) pairsOf[i - 1] = [rkeys[i - 1]!, i];
  table_sort(pairsOf, byRkey);
  const order: number[] = [];
  for (const i of $range(1, pairsOf.length)) order[i - 1] = pairsOf[i - 1]![1];
  return order;
}

/** Take the set, waiting in line for one busy key at a time while `wait` allows. */
function takeAll(p: Plan, wait: number): AcquireAllResult {
  const deadline = ngx_now() * 1000 + wait;
  let backoff = retry.FIRST_BACKOFF;
  while (true) {
    const [what, at, pttl, fault] = attempt(p);
    if (what === "OK") {
      const parts: Lease[] = [];
      const fences: number[] = [];
      for (const i of $range(1, p.keys.length)) {
        parts[i - 1] = p.parts.get(i);
        if (p.kind.fenced) fences[i - 1] = p.fences.get(i);
      }
      return $multi(multilease.make(p.keys, parts, p.tok, p.ttl, p.kind.fenced ? fences : undefined,
        p.order === undefined && p.store.redis.topology !== "redlock"), undefined, undefined);
    }
    // Nothing stays held while we wait, nor when we give up.
    giveBack(p);
    ngx_update_time();
    const left = deadline - ngx_now() * 1000;
    if (what !== "busy") {
      if (fault !== "transient" || left <= 0) return $multi(undefined, what, undefined);
      const nap = math_min(retry.poll(backoff, undefined), left);
      backoff = math_min(backoff * 2, retry.MAX_BACKOFF);
      ngx_.sleep(nap / 1000);
    } else {
      if (wait === 0) return $multi(undefined, "busy", pttl);
      if (left <= 0) return $multi(undefined, "timeout", pttl);
      // In the busy key's line, as its single acquire waits; then the set again, with that key ours.
      const [l, err, retryAfter] = acquire.acquire(p.store, p.kind, p.keys[at - 1]!, p.tok, p.ttl, left);
      if (l === undefined) return $multi(undefined, err, retryAfter);
      p.parts.set(at, l);
      if (l.fence !== undefined) p.fences.set(at, l.fence);
    }
  }
}

/**
 * locks:acquire_all(keys, opts): one lease holding every key; nil, "busy",
 * retry_after (wait = 0, a key held); nil, "timeout", retry_after; nil,
 * "dlock: ..." on bad input or a Redis failure. Nothing is held but on success.
 */
export function acquireAll(f: Factory, keys: unknown, opts: unknown): AcquireAllResult {
  const perr = lease.phaseError("acquire_all");
  if (perr !== undefined) return $multi(undefined, perr, undefined);
  const store = f._store;
  const [list, ttlOrErr, wait, renew, onLost] = options.acquireAll(store, keys, opts);
  if (list === undefined) return $multi(undefined, ttlOrErr as string, undefined);
  if (f.reentrant) return $multi(undefined, REENTRANT, undefined);
  ngx_update_time();
  const t0 = ngx_now();
  const [tok, terr] = f._mint();
  if (tok === undefined) {
    meter.refused(store.meter, terr);
    return $multi(undefined, terr, undefined);
  }
  const rkeys: string[] = [];
  for (const i of $range(1, list.length)) rkeys[i - 1] = store.prefix + list[i - 1]!;
  const p: Plan = {
    store, kind: f._kind, keys: list, rkeys, order: orderOf(store, rkeys), tok, ttl: ttlOrErr as number,
    parts: new LuaTable(), fences: new LuaTable(),
  };
  const [m, err, retryAfter] = takeAll(p, wait);
  if (m === undefined) {
    meter.refused(store.meter, err);
    return $multi(undefined, err, retryAfter);
  }
  meter.acquired(store.meter, m._parts[0]!._since / 1000 - t0);
  if (renew) {
    const werr = multilease.watch(m, onLost as unknown as multilease.OnLost | undefined);
    if (werr !== undefined) return $multi(undefined, werr, undefined);
  }
  return $multi(m, undefined, undefined);
}
