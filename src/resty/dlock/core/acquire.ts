// Taking a key: one script round trip per attempt, and between attempts the
// waiting. Two ways to wait:
//   in line    locks (not under Redlock): the first attempt takes a ticket in
//              the key's queue in Redis, and the waiter sleeps until a release
//              hands the key to it by name (scripts.ts): first come, first
//              served across the fleet, one contender per release, three
//              commands per contended acquisition (ticket, claim, release).
//   by turns   permits, and locks under Redlock (no queue spans majorities):
//              one waiter per worker and key asks Redis when a release is
//              announced or the holder's lease ends (wait.ts, wakeups.ts).

import * as backend from "../redis/backend";
import * as lease from "./lease";
import * as ledger from "./ledger";
import * as orphans from "./orphans";
import * as scripts from "../redis/scripts";
import * as waits from "./wait";
import * as wakeups from "./wakeups";

type Store = lease.Store;
type Kind = lease.Kind;
type AcquireResult = lease.AcquireResult;
type Fault = backend.Fault;
const call = backend.call;

const FIRST_BACKOFF = 2; // ms
const MAX_BACKOFF = 64; // ms, between Redis polls while no wake-up can come (below scripts.GRANT)
/** ms a ticket ends before its waiter gives up: more than a round trip to Redis. */
const MARGIN = 10;
/** ms a waiter in line sleeps, at most, with no word (see inLine). */
const HORIZON = 2000;
/** ms a waiter in line waits for its wake-up subscription to be confirmed before it polls. */
const SETUP = 50;
/** ms a waiter that joins this worker's turn for a key sleeps, at most, before it asks Redis itself. */
const QUEUE_CAP = 1000;

/** The next nap of a waiter that polls: jittered, doubling, never past the holder's expiry. */
function poll(backoff: number, retryAfter: number | undefined): number {
  let nap = backoff / 2 + math.random() * backoff / 2;
  if (retryAfter !== undefined && retryAfter + 1 < nap) nap = retryAfter + 1;
  return nap;
}

/**
 * An attempt failed on the way to or from Redis: the error to return now, or
 * nil to try again (a transient fault while there is time to wait). `release`
 * gives back a key taken on the master only; `cleanup` removes what a lost
 * reply may have left.
 */
function failed(store: Store, kind: Kind, rkey: string, tok: string, err: string | undefined, fault: Fault | undefined,
  wait: number, deadline: number, cleanup: scripts.Script): string | undefined {
  if (fault === "replicas") {
    // Taken on the master only: a failover now would hand it to someone else. Give it back.
    const [gone] = backend.own(store.redis, kind.release, rkey, tok);
    if (gone === undefined) orphans.adoptAcquire(store.redis, kind.release, rkey, tok);
    return err + "; released";
  }
  if (fault === "lost") {
    // The write may have landed: delete it if it did, so it cannot block others for a whole ttl.
    orphans.adoptAcquire(store.redis, cleanup, rkey, tok);
    return err + "; acquire outcome unknown, owner-checked cleanup scheduled";
  }
  if (fault !== "transient" || wait === 0 || deadline - ngx.now() * 1000 <= 0) return err === undefined ? "dlock: redis failed" : err;
  return undefined;
}

/** Is rkey held in this nginx (its shared dict says so)? Then its release is announced: it is ours. */
function heldHere(store: Store, rkey: string): boolean {
  const [pid] = ledger.holder(store.dict, ledger.recordKey(rkey, "", false));
  return pid !== undefined;
}

/** A busy reply's PTTL of the holder as retry_after (nil: the key has no expiry). */
function pttlOf(res: RedisValue): number | undefined {
  return type(res) === "number" && (res as number) >= 0 ? res as number : undefined;
}

/** The deadline passed: why the last attempt failed (Redis never able to answer), or "timeout". */
function ended(res: RedisValue | undefined, err: string | undefined, retryAfter: number | undefined): AcquireResult {
  if (res === undefined) return $multi(undefined, err, undefined);
  return $multi(undefined, "timeout", retryAfter);
}

// ------------------------------------------------------------------ in line

/** An acquire in line: what it asks for, what it leaves to clean up, and where its attempts stand. */
interface Place {
  readonly store: Store;
  readonly kind: Kind;
  readonly key: string;
  readonly rkey: string;
  /** The key's waiters' queue, and its fence counter (fenced kinds). */
  readonly qkey: string;
  readonly fkey: string | undefined;
  /** (rwlock) A reader's: the key's readers (redis/rwscripts.ts). */
  readonly skey: string | undefined;
  readonly tok: string;
  readonly ttl: number;
  readonly wait: number;
  /** Epoch ms when the wait ends. */
  readonly deadline: number;
  /** Our ticket ("<issued> <deadline>"), "" while we have none. */
  ticket: string;
  /** Its ledger record, for crash recovery. */
  rec: string | undefined;
  /** How many waited ahead of us when we took the ticket. */
  ahead: number;
  /** Our place in this worker's line for the key (only a waiting acquire has one: wait > 0). */
  readonly turn: waits.Turn | undefined;
  /** Did Redis answer the last attempt? If not, why. */
  answered: boolean;
  failure: string | undefined;
  /** ms until the holder's lease ends, from the last busy answer. */
  retryAfter: number | undefined;
  /** The next poll's backoff (ms), when no wake-up can come. */
  backoff: number;
}

/** Take our ticket back: in the background, and at once (a key handed to us meanwhile goes on to the next). */
function dropOf(store: Store, kind: Kind, rkey: string, tok: string, wait: number): orphans.Orphan {
  return {
    lost: "ticket", conf: store.redis, release: kind.drop!, rkey, token: tok,
    deadline: ngx.now() + wait / 1000 + 1, settle: undefined,
  };
}

/** An attempt's outcome: true and the acquire's results when it is over, false to wait and try again. */
type Attempt = LuaMultiReturn<[boolean, lease.Lease | undefined, string | undefined, number | undefined]>;

/** Ask Redis for the key once (our ticket along, once we have one). */
function attempt(place: Place): Attempt {
  const store = place.store;
  const kind = place.kind;
  const rkey = place.rkey;
  const tok = place.tok;
  const ttl = place.ttl;
  const wait = place.wait;
  const deadline = place.deadline;
  const conf = store.redis;
  const sent = ngx.now() * 1000;
  // How long our ticket lasts: MARGIN less than we wait, so that Redis
  // skips it before we give up, never hands the key to us as we leave.
  const left = wait > 0 ? math.max(1, math.floor(deadline - sent) - MARGIN) : 0;
  let res: RedisValue | undefined;
  let err: string | undefined;
  let fault: Fault | undefined;
  if (place.skey !== undefined) {
    // (rwlock) A reader: its keys are the lock, its readers, (the fence counter,) the queue.
    if (place.fkey !== undefined) {
      [res, err, fault] = call(conf, kind.acquire, rkey, place.skey, place.fkey, place.qkey, tok, ttl, left, place.ticket);
    } else {
      [res, err, fault] = call(conf, kind.acquire, rkey, place.skey, place.qkey, tok, ttl, left, place.ticket);
    }
  } else if (place.fkey !== undefined) {
    [res, err, fault] = call(conf, kind.acquire, rkey, place.fkey, place.qkey, tok, ttl, left, place.ticket);
  } else {
    [res, err, fault] = call(conf, kind.acquire, rkey, place.qkey, tok, ttl, left, place.ticket);
  }
  place.answered = res !== undefined;
  if (res === undefined) {
    const e = failed(store, kind, rkey, tok, err, fault, wait, deadline, kind.drop!);
    if (e !== undefined) {
      // A cleanup of a lost reply drops the ticket too.
      if (fault === "lost") place.ticket = "";
      return $multi(true, undefined, e, undefined);
    }
    place.failure = err;
    return $multi(false, undefined, undefined, undefined);
  }
  if (res === "OK") {
    return $multi(true, lease.make(store, kind, place.key, tok, ttl, sent, undefined), undefined, undefined);
  }
  if (type(res) === "table") {
    const reply = res as LuaTable<number, string | number>;
    if (reply.get(1) === "OK") {
      return $multi(true, lease.make(store, kind, place.key, tok, ttl, sent, reply.get(2) as number), undefined, undefined);
    }
    // Busy: the holder's PTTL, and our ticket.
    const pttl = reply.get(1) as number;
    place.retryAfter = pttl >= 0 ? pttl : undefined;
    if (wait === 0) return $multi(true, undefined, "busy", place.retryAfter);
    const t = reply.get(2) as string;
    if (t !== "" && place.ticket === "") {
      place.ticket = t;
      place.ahead = reply.get(3) as number;
      place.rec = ledger.waiting(store.dict, rkey, tok, place.key, wait);
      waits.holdTicket(place.turn!, dropOf(store, kind, rkey, tok, wait), place.ahead);
    }
  } else {
    // Busy, from the script without the queue (scripts.ts `alone`): the holder's PTTL.
    place.retryAfter = pttlOf(res);
    if (wait === 0) return $multi(true, undefined, "busy", place.retryAfter);
  }
  return $multi(false, undefined, undefined, undefined);
}

/** Between attempts: sleep until the key may be ours (or our deadline). True and the results when the wait is over. */
function between(place: Place): Attempt {
  const conf = place.store.redis;
  const rkey = place.rkey;
  ngx.update_time();
  const rest = place.deadline - ngx.now() * 1000;
  const retryAfter = place.retryAfter;
  if (rest <= 0) {
    // The deadline passed: why the last attempt failed (Redis never able to answer), or "timeout".
    if (!place.answered) return $multi(true, undefined, place.failure, undefined);
    return $multi(true, undefined, "timeout", retryAfter);
  }
  let nap: number;
  const live = wakeups.want(conf, rkey);
  const coming = !live && wakeups.coming(conf, rkey);
  if (place.answered && retryAfter !== undefined && (live || (coming && place.ahead > 0))) {
    // Asleep until the key is handed to us by name (with others ahead of us,
    // that comes after the subscription does). Should the holder die, or a
    // waiter it was handed to never come, the subscriber wakes the first
    // waiter here once that is overdue, and Redis passes the key on. Should
    // we have missed our turn all the same, we look again after HORIZON and
    // are back at our place. A holder that may be another client's (it
    // announces nothing) is probed sooner (subscriptions.ts).
    wakeups.expect(conf, rkey, retryAfter, !heldHere(place.store, rkey));
    nap = HORIZON + math.random() * HORIZON / 4;
  } else if (place.answered && retryAfter !== undefined && coming) {
    // First in line: the key may come to us before the subscription does. Its confirmation wakes us to look.
    nap = math.min(SETUP, retryAfter + 1);
  } else {
    // No wake-up can come (not subscribed yet, subscription down, a holder
    // whose key has no expiry): poll, well within a handed key's GRANT.
    nap = poll(place.backoff, retryAfter);
    place.backoff = math.min(place.backoff * 2, MAX_BACKOFF);
  }
  if (!waits.pause(place.turn!, math.min(nap, rest)) && nap >= rest) {
    // Slept to the deadline with no word: the key was not handed to us.
    let left: number | undefined;
    if (retryAfter !== undefined) left = math.max(0, math.floor(retryAfter - rest));
    return $multi(true, undefined, "timeout", left);
  }
  return $multi(false, undefined, undefined, undefined);
}

function queued(store: Store, kind: Kind, key: string, tok: string, ttl: number, wait: number): AcquireResult {
  const rkey = store.prefix + key;
  const place: Place = {
    store, kind, key, rkey, qkey: scripts.queueKey(rkey, store.redis.slotted),
    fkey: kind.fenced ? backend.fenceKey(store.redis, rkey) : undefined,
    skey: kind.reader === true ? scripts.readersKey(rkey, store.redis.slotted) : undefined, tok, ttl, wait,
    deadline: ngx.now() * 1000 + wait,
    ticket: "", rec: undefined, ahead: -1, turn: wait > 0 ? waits.turn(rkey, tok) : undefined, answered: false,
    failure: undefined, retryAfter: undefined, backoff: FIRST_BACKOFF,
  };
  // The key may be handed to us by name while our first question is on its
  // way: be in this worker's line by then, if word can come here at all.
  if (place.turn !== undefined && wakeups.live(store.redis, rkey)) waits.enter(place.turn);
  // The first attempt comes before the loop: an uncontended acquire never
  // reaches it, and LuaJIT compiles a path that runs into no loop (check.onlyKnown).
  let [over, l, err, retryAfter] = attempt(place);
  while (!over) {
    [over, l, err, retryAfter] = between(place);
    if (!over) [over, l, err, retryAfter] = attempt(place);
  }
  if (place.turn !== undefined) {
    waits.leave(place.turn);
    wakeups.done(store.redis, rkey);
  }
  if (place.rec !== undefined) ledger.forget(store.dict, place.rec, tok);
  if (l === undefined && place.ticket !== "" && err !== "timeout") {
    // Gave up in line before our deadline (a Redis error): leave now, and pass on a key handed to us meanwhile.
    // At the deadline, Redis skips our ticket by itself.
    orphans.adopt(dropOf(store, kind, rkey, tok, wait));
  }
  return $multi(l, err, retryAfter);
}

// ------------------------------------------------------------------ by turns

/** Did this acquire ask for the releases of its key (wakeups.want)? Then it says when it is done. */
interface Subscription {
  on: boolean;
}

function byTurns(sub: Subscription, turn: waits.Turn, store: Store, kind: Kind, key: string, tok: string, ttl: number, wait: number, ...extra: (string | number)[]): AcquireResult {
  const rkey = turn.rkey;
  const deadline = ngx.now() * 1000 + wait;
  let backoff = FIRST_BACKOFF;
  let retryAfter: number | undefined;
  // One Redis contender per worker and key: a waiter that finds others of this
  // worker already waiting for a key held elsewhere, with its releases coming
  // (a live subscription), queues behind them without asking Redis; releases
  // wake them one at a time, first come first served.
  if (wait > 0 && waits.waiters(rkey) > 0 && wakeups.live(store.redis, rkey)) {
    sub.on = true;
    wakeups.want(store.redis, rkey);
    waits.pause(turn, math.min(wait, QUEUE_CAP));
  }
  // A waiter that finds the key held in this nginx queues up locally at once:
  // asking Redis first would only hear "busy". (Without `wait`, Redis answers.)
  if (wait > 0 && !kind.shared) {
    const [state, left] = waits.awaitLocalHolder(store.dict, turn, deadline);
    if (state === "timeout") {
      return $multi(undefined, "timeout", left);
    }
  }
  while (true) {
    let fence: number | undefined;
    const sent = ngx.now() * 1000;
    let res: RedisValue | undefined;
    let err: string | undefined;
    let fault: Fault | undefined;
    if (kind.fenced) {
      [res, err, fault] = call(store.redis, kind.acquire, rkey, backend.fenceKey(store.redis, rkey), tok, ttl);
    } else {
      [res, err, fault] = call(store.redis, kind.acquire, rkey, tok, ttl, ...extra);
    }
    if (type(res) === "table") {
      // { "OK", fence } from the fenced script
      const reply = res as LuaTable<number, string | number>;
      fence = reply.get(2) as number;
      res = reply.get(1);
    }
    if (res === undefined) {
      const e = failed(store, kind, rkey, tok, err, fault, wait, deadline, kind.release);
      if (e !== undefined) return $multi(undefined, e, undefined);
    } else if (res === "OK") {
      return $multi(lease.make(store, kind, key, tok, ttl, sent, fence), undefined, undefined);
    } else {
      retryAfter = pttlOf(res);
      if (wait === 0) {
        return $multi(undefined, "busy", retryAfter);
      }
    }
    ngx.update_time();
    const left = deadline - ngx.now() * 1000;
    if (left <= 0) return ended(res, err, retryAfter);
    let here: "none" | "free" | "timeout" = "none";
    if (!kind.shared) {
      let holderLeft: number | undefined;
      [here, holderLeft] = waits.awaitLocalHolder(store.dict, turn, deadline);
      if (here === "timeout") {
        return $multi(undefined, "timeout", holderLeft);
      }
    }
    if (here === "none") {
      // The holder is elsewhere: its release wakes us (wakeups.ts) once our
      // subscription is live; until then, or without one, poll Redis with
      // jittered exponential backoff. Never past the holder's expiry nor our deadline.
      sub.on = true;
      wakeups.want(store.redis, rkey);
      let nap: number;
      if (retryAfter !== undefined && wakeups.live(store.redis, rkey)) {
        // The first of this worker's line sleeps until a release wakes it (or
        // the holder's lease ends); the others until they are first, looking
        // now and then in case the first is stuck.
        nap = waits.first(turn) || waits.waiters(rkey) === 0 ? retryAfter + 1 : math.min(retryAfter + 1, QUEUE_CAP);
        // A lock's holder may be another client's, which announces nothing: it is probed sooner (subscriptions.ts).
        if (!kind.shared) wakeups.expect(store.redis, rkey, retryAfter, !heldHere(store, rkey));
      } else {
        nap = poll(backoff, retryAfter);
        backoff = math.min(backoff * 2, MAX_BACKOFF);
      }
      if (left < nap) nap = left;
      waits.pause(turn, nap);
    }
  }
}

/**
 * Try, and while `wait` allows, try again: lease on success; nil, "busy",
 * retry_after when wait = 0; nil, "timeout", retry_after at the deadline;
 * nil, "dlock: ..." on a Redis failure. `extra` goes to the script after ttl
 * (by turns only).
 */
export function acquire(store: Store, kind: Kind, key: string, tok: string, ttl: number, wait: number, ...extra: (string | number)[]): AcquireResult {
  if (kind.drop !== undefined) return queued(store, kind, key, tok, ttl, wait);
  const sub: Subscription = { on: false };
  const rkey = store.prefix + key;
  const turn = waits.turn(rkey);
  const [l, err, retryAfter] = byTurns(sub, turn, store, kind, key, tok, ttl, wait, ...extra);
  waits.leave(turn);
  if (sub.on) {
    wakeups.done(store.redis, rkey);
    // Gave up (timeout, error) while others of this worker wait: the next one takes its turn.
    if (l === undefined) waits.wake(rkey);
  }
  return $multi(l, err, retryAfter);
}
