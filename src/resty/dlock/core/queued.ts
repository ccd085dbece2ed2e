// Waiting in line (locks, not under Redlock): the first attempt takes a ticket
// in the key's queue in Redis, and the waiter sleeps until a release hands the
// key to it by name (scripts.ts): first come, first served across the fleet,
// one contender per release, three commands per contended acquisition
// (ticket, claim, release). An uncontended acquire asks once and keeps nothing.

import * as backend from "../redis/backend";
import * as lease from "./lease";
import * as ledger from "./ledger";
import * as orphans from "./orphans";
import type * as redis from "../redis/client";
import * as retry from "./retry";
import * as scripts from "../redis/scripts";
import * as waits from "./wait";
import * as wakeups from "./wakeups";
import * as clock from "./clock";

type Store = lease.Store;
type Kind = lease.Kind;
type AcquireResult = lease.AcquireResult;
type Fault = backend.Fault;

const call = backend.call;
const make = lease.make;
const validity = backend.validity;
const clock_now = clock.now;
const ngx_update_time = ngx.update_time;
const math_floor = math.floor;
const math_max = math.max;
const math_min = math.min;
const math_random = math.random;
const lua_type = type;
const str_format = string.format;

/** ms a ticket ends before its waiter gives up: more than a round trip to Redis. */
const MARGIN = 10;
/** ms a waiter in line sleeps, at most, with no word (see between). */
const HORIZON = 2000;
/** ms a waiter in line waits for its wake-up subscription to be confirmed before it polls. */
const SETUP = 50;

/** An acquire waiting in line: what it asks for, what it leaves to clean up, and where its attempts stand. */
interface Place {
  readonly store: Store;
  readonly kind: Kind;
  readonly key: string;
  readonly rkey: string;
  /** The key's waiters' queue, and its fence counter (fenced kinds). */
  readonly qkey: string;
  readonly fkey: string | undefined;
  /** A reader's (shared = true): the key's readers (redis/rwscripts.ts). */
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
  /** Our place in this worker's line for the key. */
  readonly turn: waits.Turn;
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
    deadline: clock_now() + wait / 1000 + 1, settle: undefined,
  };
}

/** An attempt's outcome: true and the acquire's results when it is over, false to wait and try again. */
type Attempt = LuaMultiReturn<[boolean, lease.Lease | undefined, string | undefined, number | undefined]>;

/** Ask Redis for the key once, with our ticket ("" until we have one) lasting `left` ms. */
function ask(conf: redis.RedisConf, kind: Kind, rkey: string, qkey: string, fkey: string | undefined, skey: string | undefined,
  tok: string, ttl: number, left: number, ticket: string): backend.CallResult {
  if (skey !== undefined) {
    // A reader: its keys are the lock, its readers, (the fence counter,) the queue.
    if (fkey !== undefined) return call(conf, kind.acquire, rkey, skey, fkey, qkey, tok, ttl, left, ticket);
    return call(conf, kind.acquire, rkey, skey, qkey, tok, ttl, left, ticket);
  }
  if (fkey !== undefined) return call(conf, kind.acquire, rkey, fkey, qkey, tok, ttl, left, ticket);
  return call(conf, kind.acquire, rkey, qkey, tok, ttl, left, ticket);
}

/** How long our ticket lasts: MARGIN less than we wait, so that Redis skips it before we give up, never hands the key to us as we leave. */
function ticketMs(wait: number, deadline: number, sent: number): number {
  return wait > 0 ? math_max(1, math_floor(deadline - sent) - MARGIN) : 0;
}

/**
 * The lease Redis gave for an acquire sent at `sent`. An answer that came
 * once that lease had ended (a cold connection with a script loaded anew, a
 * Redis far away) gives no lease as it is: it is extended at once, the key
 * likely still ours (Redis counts its ttl from when it took it), and valid
 * from that extend's send; else (gone, or again too late) given back: nil
 * and the error, a transient one.
 */
function taken(store: lease.Store, kind: lease.Kind, key: string, rkey: string, tok: string, ttl: number, sent: number,
  fence: number | undefined): LuaMultiReturn<[lease.Lease | undefined, string | undefined]> {
  const l = make(store, kind, key, rkey, tok, ttl, sent, fence);
  ngx_update_time();
  const took = clock_now() * 1000 - sent;
  if (took < validity(store.redis, ttl)) return $multi(l, undefined);
  const [ok] = l.extend(ttl);
  if (ok !== undefined && l.valid()) return $multi(l, undefined);
  if (!l._released) {
    l.release();
  } else {
    // Its token gone from the key (not_owner): the owner-checked release still frees what it leaves (a reader's key).
    const [gone] = backend.own(store.redis, kind.release, rkey, tok);
    if (gone === undefined) orphans.adoptAcquire(store.redis, kind.release, rkey, tok);
  }
  return $multi(undefined, str_format("dlock: redis %s: took the key, but its answer came after %d ms of a %d ms ttl",
    store.redis.endpoint, took, ttl));
}

/** What Redis answered an attempt of the waiting acquire at `place`, sent at `sent`. */
function heard(place: Place, sent: number, res: RedisValue | undefined, err: string | undefined, fault: Fault | undefined): Attempt {
  const store = place.store;
  const kind = place.kind;
  const rkey = place.rkey;
  const tok = place.tok;
  place.answered = res !== undefined;
  if (res === undefined) {
    const e = retry.failed(store, kind, rkey, tok, err, fault, place.wait, place.deadline, kind.drop!);
    if (e !== undefined) {
      // A cleanup of a lost reply drops the ticket too.
      if (fault === "lost") place.ticket = "";
      return $multi(true, undefined, e, undefined);
    }
    place.failure = err;
    return $multi(false, undefined, undefined, undefined);
  }
  let won = res === "OK";
  let fence: number | undefined;
  if (lua_type(res) === "table") {
    const reply = res as LuaTable<number, string | number>;
    won = reply.get(1) === "OK";
    if (won) fence = reply.get(2) as number;
  }
  if (won) {
    const [l, e] = taken(store, kind, place.key, rkey, tok, place.ttl, sent, fence);
    // Its ticket was spent on the key, given back since.
    if (l === undefined) place.ticket = "";
    return $multi(true, l, e, undefined);
  }
  if (lua_type(res) === "table") {
    const reply = res as LuaTable<number, string | number>;
    // Busy: the holder's PTTL, and our ticket.
    const pttl = reply.get(1) as number;
    place.retryAfter = pttl >= 0 ? pttl : undefined;
    const t = reply.get(2) as string;
    if (t !== "" && place.ticket === "") {
      place.ticket = t;
      place.ahead = reply.get(3) as number;
      place.rec = ledger.waiting(store.dict, store.redis.keyspace, rkey, tok, place.key, place.wait);
      waits.holdTicket(place.turn, dropOf(store, kind, rkey, tok, place.wait), place.ahead);
    }
  } else {
    // Busy, from the script without the queue (scripts.ts `alone`): the holder's PTTL.
    place.retryAfter = retry.pttlOf(res);
  }
  return $multi(false, undefined, undefined, undefined);
}

/** Ask Redis for the key again, our ticket along. */
function attempt(place: Place): Attempt {
  const sent = clock_now() * 1000;
  const [res, err, fault] = ask(place.store.redis, place.kind, place.rkey, place.qkey, place.fkey, place.skey, place.tok, place.ttl,
    ticketMs(place.wait, place.deadline, sent), place.ticket);
  return heard(place, sent, res, err, fault);
}

/** Between attempts: sleep until the key may be ours (or our deadline). True and the results when the wait is over. */
function between(place: Place): Attempt {
  const conf = place.store.redis;
  const rkey = place.rkey;
  ngx_update_time();
  const rest = place.deadline - clock_now() * 1000;
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
    wakeups.expect(conf, rkey, retryAfter, !retry.heldHere(place.store, rkey));
    nap = HORIZON + math_random() * HORIZON / 4;
  } else if (place.answered && retryAfter !== undefined && coming) {
    // First in line: the key may come to us before the subscription does. Its confirmation wakes us to look.
    nap = math_min(SETUP, retryAfter + 1);
  } else {
    // No wake-up can come (not subscribed yet, subscription down, a holder
    // whose key has no expiry): poll, well within a handed key's GRANT.
    nap = retry.poll(place.backoff, retryAfter);
    place.backoff = math_min(place.backoff * 2, retry.MAX_BACKOFF);
  }
  if (!waits.pause(place.turn, math_min(nap, rest)) && nap >= rest) {
    // Slept to the deadline with no word: the key was not handed to us.
    let left: number | undefined;
    if (retryAfter !== undefined) left = math_max(0, math_floor(retryAfter - rest));
    return $multi(true, undefined, "timeout", left);
  }
  return $multi(false, undefined, undefined, undefined);
}

/**
 * The first answer did not end the acquire: wait in line, from a place that
 * starts with that answer, until the key is ours, the deadline, or an error.
 */
function inLine(store: Store, kind: Kind, key: string, rkey: string, qkey: string, fkey: string | undefined,
  skey: string | undefined, tok: string,
  ttl: number, wait: number, deadline: number, turn: waits.Turn, sent: number,
  res: RedisValue | undefined, err: string | undefined, fault: Fault | undefined): AcquireResult {
  const place: Place = {
    store, kind, key, rkey, qkey, fkey, skey, tok, ttl, wait, deadline,
    ticket: "", rec: undefined, ahead: -1, turn, answered: false,
    failure: undefined, retryAfter: undefined, backoff: retry.FIRST_BACKOFF,
  };
  let [over, l, e, retryAfter] = heard(place, sent, res, err, fault);
  while (!over) {
    [over, l, e, retryAfter] = between(place);
    if (!over) [over, l, e, retryAfter] = attempt(place);
  }
  waits.leave(turn, false);
  wakeups.done(store.redis, rkey);
  if (place.rec !== undefined) ledger.forget(store.dict, place.rec, tok);
  if (l === undefined && place.ticket !== "" && e !== "timeout") {
    // Gave up in line before our deadline (a Redis error): leave now, and pass on a key handed to us meanwhile.
    // At the deadline, Redis skips our ticket by itself.
    orphans.adopt(dropOf(store, kind, rkey, tok, wait));
  }
  return $multi(l, e, retryAfter);
}

/**
 * Acquire in line: lease; nil, "busy", retry_after (wait = 0); nil,
 * "timeout", retry_after; nil, "dlock: ...". The first question comes
 * before any bookkeeping: an uncontended acquire allocates nothing but its
 * lease, and LuaJIT compiles a path that runs into no loop (check.nkeys).
 */
export function queued(store: Store, kind: Kind, key: string, rkey: string, tok: string, ttl: number, wait: number): AcquireResult {
  const conf = store.redis;
  const qkey = scripts.queueKey(rkey, conf.slotted);
  const fkey = kind.fenced ? backend.fenceKey(conf, rkey) : undefined;
  const skey = kind.reader === true ? scripts.readersKey(rkey, conf.slotted) : undefined;
  const sent = clock_now() * 1000;
  const deadline = sent + wait;
  // The key may be handed to us by name while our first question is on its
  // way: be in this worker's line by then, if word can come here at all.
  let turn: waits.Turn | undefined;
  if (wait > 0 && wakeups.live(conf, rkey)) {
    turn = waits.turn(rkey, tok);
    waits.enter(turn);
  }
  const [res, err, fault] = ask(conf, kind, rkey, qkey, fkey, skey, tok, ttl, ticketMs(wait, deadline, sent), "");
  // Taken: "OK", or { "OK", fence } from the fenced script.
  let won = res === "OK";
  let fence: number | undefined;
  if (!won && lua_type(res) === "table" && (res as LuaTable<number, string | number>).get(1) === "OK") {
    won = true;
    fence = (res as LuaTable<number, string | number>).get(2) as number;
  }
  if (won) {
    if (wait > 0) {
      if (turn !== undefined) waits.leave(turn, false);
      wakeups.done(conf, rkey);
    }
    const [l, e] = taken(store, kind, key, rkey, tok, ttl, sent, fence);
    return $multi(l, e, undefined);
  }
  if (wait > 0) {
    return inLine(store, kind, key, rkey, qkey, fkey, skey, tok, ttl, wait, deadline, turn ?? waits.turn(rkey, tok), sent, res, err, fault);
  }
  // Not waiting: this answer is the outcome.
  if (res === undefined) return $multi(undefined, retry.failed(store, kind, rkey, tok, err, fault, 0, deadline, kind.drop!), undefined);
  if (lua_type(res) === "table") {
    // Busy: the holder's PTTL (and a ticket we did not ask for).
    const pttl = (res as LuaTable<number, string | number>).get(1) as number;
    return $multi(undefined, "busy", pttl >= 0 ? pttl : undefined);
  }
  // Busy, from the script without the queue (scripts.ts `alone`): the holder's PTTL.
  return $multi(undefined, "busy", retry.pttlOf(res));
}

// Exported by name: acquire.ts takes by turns the way this module takes in line.
export { taken };
