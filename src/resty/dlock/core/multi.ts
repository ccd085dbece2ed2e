// Several keys, all or nothing: locks:acquire_all({ "a", "b" }, opts) returns one lease holding
// every key, or nothing. Each key is a single lock's key (the token, PX ttl), so a set excludes
// single-key holders key by key, and each is recorded, released, renewed and recovered as a single
// lease is: the set's lease is its keys' leases (`_parts`, one per key, in the caller's order)
// behind one face.
//
// Taking them:
//   together   one script for all the keys (redis/multiscripts.ts) where they
//              can share a script call: standalone, Sentinel, and Cluster when
//              every key hashes to one slot (the same hash tag).
//   in order   otherwise (Cluster, keys of different slots): key by key in
//              sorted order, the keys taken given back at the first busy one.
//   majority   Redlock: the one script on every master, the majority decides
//              (redis/multiquorum.ts).
// Either way nothing is held when an attempt fails. Waiting (wait > 0), once an attempt found a key
// busy: the keys are taken one at a time in one global order (sorted by Redis key), each waiting in
// its key's line (first come, first served) as a single acquire of it does, holding the keys before
// it in that order. Every waiting caller takes keys in the same order, and a caller taking a set in
// one go never waits holding anything, so no cycle of waits can form: no deadlock, whatever order
// callers name the keys in, and each line serves its waiters in turn (no starvation). Once every
// key is held, all are renewed to the full ttl at once, owner-checked; a key that ran out meanwhile
// sends the set back to waiting, holding nothing.

import * as acquire from "./acquire";
import * as backend from "../redis/backend";
import * as batch from "./batch";
import * as lease from "./lease";
import * as keyorder from "./keyorder";
import * as meter from "./meter";
import * as multilease from "./multilease";
import * as multiquorum from "../redis/multiquorum";
import * as multiscripts from "../redis/multiscripts";
import * as multioptions from "./multioptions";
import * as orphans from "./orphans";
import * as retry from "./retry";
import * as scripts from "../redis/scripts";
import * as settle from "./settle";
import * as clock from "./clock";

type Lease = lease.Lease;
type Store = lease.Store;
type Kind = lease.Kind;
type Fault = backend.Fault;

const clock_sleep = clock.sleep;
const clock_now = clock.now;
const ngx_update_time = ngx.update_time;
const lua_pairs = pairs;
const lua_ipairs = ipairs;
const lua_tostring = tostring;
const lua_unpack = unpack as (this: void, t: (string | number)[]) => LuaMultiReturn<(string | number)[]>;
const math_min = math.min;
const queueKey = scripts.queueKey;
const fenceKey = backend.fenceKey;
export type AcquireAllResult = multilease.AcquireAllResult;

/** What a factory gives acquire_all: locks (dlock.ts). */
export interface Factory {
  readonly _store: Store;
  readonly _kind: Kind;
  readonly _mint: (this: void) => LuaMultiReturn<[string | undefined, string | undefined]>;
  readonly _reentrant: boolean;
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
  /** A busy answer said a master that did not answer may hold keys for tok (Redlock): see acquireAll. */
  stray: boolean;
}

/** An attempt: "OK"; "busy" with the index of the first busy key and its holder's PTTL; or the error and its fault. */
type Attempt = LuaMultiReturn<[string, number, number | undefined, Fault | undefined]>;

/** Run the acquire script for the keys at `idx` (indexes into p.keys), making their leases when taken. */
function take(p: Plan, idx: number[]): Attempt {
  const conf = p.store.redis;
  const n = idx.length;
  const fenced = p.kind.fenced;
  // Redlock locks do not queue (dlock.ts): their keys alone.
  const quorum = !backend.queues(conf);
  const args: (string | number)[] = [];
  for (const j of $range(2, n)) args.push(p.rkeys[idx[j - 1]! - 1]!);
  if (fenced) for (const j of $range(1, n)) args.push(fenceKey(conf, p.rkeys[idx[j - 1]! - 1]!));
  if (!quorum) for (const j of $range(1, n)) args.push(queueKey(p.rkeys[idx[j - 1]! - 1]!, conf.slotted));
  args.push(p.tok);
  args.push(p.ttl);
  args.push(n);
  const s = multiscripts.acquire(n, quorum ? 1 : fenced ? 3 : 2);
  const rkey = p.rkeys[idx[0]! - 1]!;
  const sent = clock_now() * 1000;
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
  if (at !== undefined && fault === "lost") p.stray = true;
  if (at !== undefined) return $multi("busy", idx[at - 1]!, pttl, undefined);
  for (const j of $range(1, n)) {
    const i = idx[j - 1]!;
    let fence: number | undefined;
    if (fenced) fence = multiscripts.fenceOf(res, j);
    if (fence !== undefined) p.fences.set(i, fence);
    if (!p.parts.has(i)) p.parts.set(i, lease.make(p.store, p.kind, p.keys[i - 1]!, p.rkeys[i - 1]!, p.tok, p.ttl, sent, fence));
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
  for (const [_, l] of lua_pairs(p.parts)) list.push(l);
  p.parts = new LuaTable();
  p.fences = new LuaTable();
  if (list.length > 0) batch.releaseAll(list, true);
}

/** The set's lease, from the plan's parts. */
function leaseOf(p: Plan): multilease.MultiLease {
  const parts: Lease[] = [];
  const fences: number[] = [];
  for (const i of $range(1, p.keys.length)) {
    parts[i - 1] = p.parts.get(i);
    if (p.kind.fenced) fences[i - 1] = p.fences.get(i);
  }
  return multilease.make(p.keys, parts, p.tok, p.ttl, p.kind.fenced ? fences : undefined,
    p.order === undefined && p.store.redis.topology !== "redlock");
}

type Waited = LuaMultiReturn<[boolean, string | undefined, number | undefined]>;

/**
 * Wait for the keys one at a time in the global order, each in its key's
 * line, holding those before it: true once all are held; false, why
 * (timeout, an error) and retry_after otherwise (what is held stays in the plan).
 */
function inOrder(p: Plan, deadline: number): Waited {
  const order = p.order ?? keyorder.sorted(p.rkeys);
  for (const k of $range(1, order.length)) {
    const i = order[k - 1]!;
    ngx_update_time();
    const left = deadline - clock_now() * 1000;
    if (left <= 0) return $multi(false, "timeout", undefined);
    const [l, err, retryAfter] = acquire.acquire(p.store, p.kind, p.keys[i - 1]!, p.rkeys[i - 1]!, p.tok, p.ttl, left);
    if (l === undefined) return $multi(false, err, retryAfter);
    p.parts.set(i, l);
    if (l.fence !== undefined) p.fences.set(i, l.fence);
  }
  return $multi(true, undefined, undefined);
}

/**
 * Every key held after waiting: renewed to the full ttl at once, owner-checked
 * (the first keys were taken a while ago). false when one was lost meanwhile
 * (its ttl ran out while we waited for another), or Redis did not answer.
 */
function confirm(p: Plan): boolean {
  const list: Lease[] = [];
  const targets: backend.Target[] = [];
  const mss: number[] = [];
  for (const i of $range(1, p.keys.length)) {
    const l = p.parts.get(i);
    list[i - 1] = l;
    targets[i - 1] = { rkey: l._rkey, token: p.tok };
    mss[i - 1] = p.ttl;
  }
  const sent = clock_now() * 1000;
  const out = backend.batch(p.store.redis, p.kind.extend, targets, mss);
  let all = true;
  for (const i of $range(1, list.length)) {
    const reply = out.replies.get(i);
    if (reply === 1) settle.extended(list[i - 1]!, reply, p.ttl, sent);
    else if (reply !== undefined) settle.ranOut(list[i - 1]!);
    if (reply !== 1) all = false;
  }
  return all;
}

/**
 * Take the set: in one go; when a key is busy and `wait` allows, in the global
 * order, waiting in each key's line (see the top of this file).
 */
function takeAll(p: Plan, wait: number): AcquireAllResult {
  const deadline = clock_now() * 1000 + wait;
  let backoff = retry.FIRST_BACKOFF;
  while (true) {
    const [what, _at, pttl, fault] = attempt(p);
    if (what === "OK") return $multi(leaseOf(p), undefined, undefined);
    giveBack(p);
    ngx_update_time();
    const left = deadline - clock_now() * 1000;
    if (what !== "busy") {
      if (fault !== "transient" || left <= 0) return $multi(undefined, what, undefined);
      const nap = math_min(retry.poll(backoff, undefined), left);
      backoff = math_min(backoff * 2, retry.MAX_BACKOFF);
      clock_sleep(nap / 1000);
    } else {
      if (wait === 0) return $multi(undefined, "busy", pttl);
      if (left <= 0) return $multi(undefined, "timeout", pttl);
      const [held, err, retryAfter] = inOrder(p, deadline);
      if (held && confirm(p)) return $multi(leaseOf(p), undefined, undefined);
      // Gave up, or a key was lost while we waited: nothing stays held.
      giveBack(p);
      if (!held) return $multi(undefined, err, retryAfter ?? pttl);
    }
  }
}

/**
 * locks:acquire_all(keys, opts): one lease holding every key; nil, "busy",
 * retry_after (wait = 0, a key held); nil, "timeout", retry_after; nil,
 * "dlock: ..." on bad input or a Redis failure. Nothing is held but on success.
 */
export function acquireAll(f: Factory, keys: unknown, opts: unknown): AcquireAllResult {
  const store = f._store;
  const [bad, list, rkeys, ttl, wait, renew, onLost] = multioptions.acquireAll(store, keys, opts);
  if (bad !== undefined) return $multi(undefined, bad, undefined);
  if (f._reentrant) return $multi(undefined, REENTRANT, undefined);
  ngx_update_time();
  const t0 = clock_now();
  const [tok, terr] = f._mint();
  if (tok === undefined) {
    meter.refused(store.meter, terr);
    return $multi(undefined, terr, undefined);
  }
  const p: Plan = {
    store, kind: f._kind, keys: list, rkeys, order: keyorder.of(store.redis.slotted, rkeys), tok, ttl,
    parts: new LuaTable(), fences: new LuaTable(), stray: false,
  };
  const [m, err, retryAfter] = takeAll(p, wait);
  if (m === undefined) {
    // Only now that no attempt will use tok again: a sweep could delete a key a later attempt took.
    if (p.stray) for (const i of $range(1, rkeys.length)) orphans.adoptAcquire(store.redis, p.kind.release, rkeys[i - 1]!, tok);
    meter.refused(store.meter, err);
    return $multi(undefined, err, retryAfter);
  }
  // The set is held from now: its wait ends here, and its keys' hold times start here.
  ngx_update_time();
  const now = clock_now();
  meter.acquired(store.meter, now - t0);
  for (const [_, l] of lua_ipairs(m._parts)) l._since = now * 1000;
  if (renew) {
    const werr = multilease.watch(m, onLost as unknown as multilease.OnLost | undefined);
    if (werr !== undefined) return $multi(undefined, werr, undefined);
  }
  return $multi(m, undefined, undefined);
}
