// Taking a key: one script round trip per attempt, and between attempts the
// waiting. Two ways to wait:
//   in line    locks (not under Redlock): see queued.ts.
//   by turns   permits, and locks under Redlock (no queue spans majorities):
//              one waiter per worker and key asks Redis when a release is
//              announced or the holder's lease ends (wait.ts, wakeups.ts).

import * as backend from "../redis/backend";
import * as lease from "./lease";
import * as meter from "./meter";
import * as orphans from "./orphans";
import * as queued from "./queued";
import * as recovery from "./recovery";
import * as retry from "./retry";
import * as waits from "./wait";
import * as wakeups from "./wakeups";
import * as clock from "./clock";
import * as check from "./check";

type Store = lease.Store;
type Kind = lease.Kind;
type Fault = backend.Fault;

const call = backend.call;
const taken = queued.taken;
const clock_now = clock.now;
const ngx_update_time = ngx.update_time;
const math_min = math.min;
const lua_type = type;
const refused = meter.refused;
const acquired = meter.acquired;
const notSelf = check.notSelf;
const phaseError = lease.phaseError;

/** ms a waiter that joins this worker's turn for a key sleeps, at most, before it asks Redis itself. */
const QUEUE_CAP = 1000;

/**
 * The results of an acquire by turns, whether it asked for the releases of its
 * key (wakeups.want), and whether a busy answer said a master that did not
 * answer may hold the key for our token (Redlock: a paused master).
 */
type ByTurns = LuaMultiReturn<[lease.Lease | undefined, string | undefined, number | undefined, boolean, boolean]>;

/** The deadline passed: why the last attempt failed (Redis never able to answer), or "timeout". */
function ended(res: RedisValue | undefined, err: string | undefined, retryAfter: number | undefined, subscribed: boolean,
  stray: boolean): ByTurns {
  if (res === undefined) return $multi(undefined, err, undefined, subscribed, stray);
  return $multi(undefined, "timeout", retryAfter, subscribed, stray);
}

/** Acquire by turns; `turn` is nil when not waiting (wait = 0). */
function byTurns(turn: waits.Turn | undefined, store: Store, kind: Kind, key: string, rkey: string, tok: string, ttl: number,
  wait: number, ...extra: (string | number)[]): ByTurns {
  const conf = store.redis;
  const deadline = clock_now() * 1000 + wait;
  let backoff = retry.FIRST_BACKOFF;
  let retryAfter: number | undefined;
  let subscribed = false;
  let stray = false;
  // One Redis contender per worker and key: a waiter that finds others of this
  // worker already waiting for a key held elsewhere, with its releases coming
  // (a live subscription), queues behind them without asking Redis; releases
  // wake them one at a time, first come first served.
  if (wait > 0 && waits.waiters(rkey) > 0 && wakeups.live(conf, rkey)) {
    subscribed = true;
    wakeups.want(conf, rkey);
    waits.pause(turn!, math_min(wait, QUEUE_CAP));
  }
  // A waiter that finds the key held in this nginx queues up locally at once:
  // asking Redis first would only hear "busy". (Without `wait`, Redis answers.)
  if (wait > 0 && !kind.shared) {
    const [state, left] = waits.awaitLocalHolder(store.dict, store.redis.keyspace, turn!, deadline);
    if (state === "timeout") {
      return $multi(undefined, "timeout", left, subscribed, false);
    }
  }
  while (true) {
    let fence: number | undefined;
    const sent = clock_now() * 1000;
    let res: RedisValue | undefined;
    let err: string | undefined;
    let fault: Fault | undefined;
    if (kind.fenced) {
      [res, err, fault] = call(conf, kind.acquire, rkey, backend.fenceKey(conf, rkey), tok, ttl);
    } else {
      [res, err, fault] = call(conf, kind.acquire, rkey, tok, ttl, ...extra);
    }
    if (lua_type(res) === "table") {
      // { "OK", fence } from the fenced script
      const reply = res as LuaTable<number, string | number>;
      fence = reply.get(2) as number;
      res = reply.get(1);
    }
    if (res === undefined) {
      const e = retry.failed(store, kind, rkey, tok, err, fault, wait, deadline, kind.release);
      if (e !== undefined) return $multi(undefined, e, undefined, subscribed, stray);
    } else if (res === "OK") {
      const [l, spent] = taken(store, kind, key, rkey, tok, ttl, sent, fence);
      if (l !== undefined) return $multi(l, undefined, undefined, subscribed, false);
      // Its answer came too late for a lease: a transient failure, which a waiter tries again.
      const e = retry.failed(store, kind, rkey, tok, spent, "transient", wait, deadline, kind.release);
      if (e !== undefined) return $multi(undefined, e, undefined, subscribed, stray);
    } else {
      if (fault === "lost") stray = true;
      retryAfter = retry.pttlOf(res);
      if (wait === 0) {
        return $multi(undefined, "busy", retryAfter, subscribed, stray);
      }
    }
    ngx_update_time();
    const left = deadline - clock_now() * 1000;
    if (left <= 0) return ended(res, err, retryAfter, subscribed, stray);
    const t = turn!;
    let here: "none" | "free" | "timeout" = "none";
    if (!kind.shared) {
      let holderLeft: number | undefined;
      [here, holderLeft] = waits.awaitLocalHolder(store.dict, store.redis.keyspace, t, deadline);
      if (here === "timeout") {
        return $multi(undefined, "timeout", holderLeft, subscribed, stray);
      }
    }
    if (here === "none") {
      // The holder is elsewhere: its release wakes us (wakeups.ts) once our
      // subscription is live; until then, or without one, poll Redis with
      // jittered exponential backoff. Never past the holder's expiry nor our deadline.
      subscribed = true;
      wakeups.want(conf, rkey);
      let nap: number;
      if (retryAfter !== undefined && wakeups.live(conf, rkey)) {
        // The first of this worker's line sleeps until a release wakes it (or
        // the holder's lease ends); the others until they are first, looking
        // now and then in case the first is stuck.
        nap = waits.first(t) || waits.waiters(rkey) === 0 ? retryAfter + 1 : math_min(retryAfter + 1, QUEUE_CAP);
        // A lock's holder may be another client's, which announces nothing: it is probed sooner (subscriptions.ts).
        if (!kind.shared) wakeups.expect(conf, rkey, retryAfter, !retry.heldHere(store, rkey));
      } else {
        nap = retry.poll(backoff, retryAfter);
        backoff = math_min(backoff * 2, retry.MAX_BACKOFF);
      }
      if (left < nap) nap = left;
      waits.pause(t, nap);
    }
  }
}

/**
 * Try, and while `wait` allows, try again: lease on success; nil, "busy",
 * retry_after when wait = 0; nil, "timeout", retry_after at the deadline;
 * nil, "dlock: ..." on a Redis failure. rkey is key's Redis key (with the
 * prefix: options.acquire). `extra` goes to the script after ttl (by turns only).
 */
function acquire(store: Store, kind: Kind, key: string, rkey: string, tok: string, ttl: number, wait: number,
  ...extra: (string | number)[]): lease.AcquireResult {
  if (kind.drop !== undefined) return queued.queued(store, kind, key, rkey, tok, ttl, wait);
  // Without waiting there is no line to stand in: no turn to make.
  const turn = wait > 0 ? waits.turn(rkey) : undefined;
  const [l, err, retryAfter, subscribed, stray] = byTurns(turn, store, kind, key, rkey, tok, ttl, wait, ...extra);
  // Busy answers (Redlock) left keys a paused master may have taken for tok: cleaned up, owner-checked, once no
  // attempt of this acquire will use tok again (earlier, a sweep could delete the key a later attempt took).
  if (l === undefined && stray) orphans.adoptAcquire(store.redis, kind.release, rkey, tok);
  if (turn !== undefined) waits.leave(turn, true);
  if (subscribed) {
    wakeups.done(store.redis, rkey);
    // Gave up (timeout, error) while others of this worker wait: the next one takes its turn.
    if (l === undefined) waits.wake(rkey);
  }
  return $multi(l, err, retryAfter);
}

/**
 * acquire() as the factories' faces run it: a token minted (with `mark` in
 * front: a reader's), the key taken, the outcome and the wait metered (a
 * busy answer only when busyCounts: not a guard's first try, which waits next).
 */
/**
 * Why an acquire on obj (a factory of metatable mt) cannot start: called with
 * "." (`method` names it), or in a phase without cosockets (`op`); nil when it
 * can. A worker's first acquire starts the recovery of the leases a reload
 * left behind, before it takes anything.
 */
function opening(obj: object, mt: object, method: string, op: string): string | undefined {
  const notOurs = notSelf(obj, mt, method);
  if (notOurs !== undefined) return notOurs;
  recovery.start();
  const perr = phaseError(op);
  return perr;
}

export function metered(store: Store, kind: Kind, key: string, rkey: string, mint: (this: void) => LuaMultiReturn<[string | undefined, string | undefined]>,
  mark: string | undefined, ttl: number, wait: number, busyCounts: boolean, ...extra: (string | number)[]): lease.AcquireResult {
  ngx_update_time();
  const t0 = clock_now();
  const [tok, terr] = mint();
  if (tok === undefined) {
    refused(store.meter, terr);
    return $multi(undefined, terr, undefined);
  }
  const [l, err, retryAfter] = acquire(store, kind, key, rkey, mark === undefined ? tok : mark + tok, ttl, wait, ...extra);
  if (l === undefined) {
    // A first try whose caller waits next (a guard) has no outcome yet: the wait that follows has.
    if (busyCounts || err !== "busy") refused(store.meter, err);
    return $multi(undefined, err, retryAfter);
  }
  acquired(store.meter, l._since / 1000 - t0);
  return $multi(l, undefined, undefined);
}

// Exported by name: this module's own uses of them are locals, not lookups in its exports table.
export { acquire, opening };
