// What each worker knows of the keys its waiters wait for, per Redis
// endpoint (see wakeups.ts): which keys to subscribe to, what the messages on
// their channels mean, and when the first waiter of this worker asks Redis
// again without a word (a holder whose lease ran out, a key handed to a waiter
// that never came, a holder nobody vouched for). subscriber.ts keeps the
// connection; this module does no I/O.
//
// Holders that are not ours (node-redlock, redis-py, a plain SET NX PX; with
// prefix = "") announce nothing when they DEL. A key whose holder nobody
// vouched for (no hand-off or claim heard since it was free) is looked at
// again after PROBE seconds, doubling to PROBE_MAX, by the first waiter of
// this worker: a foreign release is seen within PROBE_MAX, at one script call
// per worker and key per PROBE_MAX while such a holder holds on.

import * as redis from "../redis/client";
import * as waits from "./wait";
import * as clock from "./clock";

/** Seconds a key stays subscribed after its last waiter of this worker. */
const GRACE = 2;
/** Seconds of slack on a due time: the claim or release announcing it is on its way. */
const SLACK = 0.005;
/** Seconds until the first look at a key whose holder nobody vouched for, and the most between looks. */
const PROBE = 0.05;
const PROBE_MAX = 0.2;

export interface Subscriber {
  readonly conf: redis.RedisConf;
  /**
   * Keys waited for here, and when a waiter last said so: a key stays
   * subscribed while this worker has waiters for it or for GRACE seconds after
   * (a waiter between two attempts is in no queue). Nothing depends on waiters
   * saying goodbye: one whose request was killed cannot.
   */
  readonly wanted: LuaTable<string, number>;
  /**
   * Keys held elsewhere, and when (ngx.now()) the first waiter here asks
   * Redis about them again: their holder's lease ends, a key handed to a
   * waiter elsewhere must have been claimed, or a holder nobody vouched for is
   * probed. If no word comes by then, Redis passes the key on. Nobody else polls.
   */
  readonly due: LuaTable<string, number>;
  /** Keys whose holder took them in line (a hand-off or a claim was heard): its release will be announced. */
  readonly vouched: LuaTable<string, boolean>;
  /** Per key whose holder nobody vouched for, the seconds until the next probe. */
  readonly probe: LuaTable<string, number>;
  /** Keys whose subscription Redis confirmed on the current connection. */
  readonly live: LuaTable<string, boolean>;
  /** Keys subscribed (or asked for) on the current connection. */
  readonly sent: LuaTable<string, boolean>;
  /** Wakes the subscriber's control thread: a key to subscribe, an earlier due time, the worker exiting. */
  readonly bell: NgxSemaphore;
  /** Has the bell been rung since the control thread last woke? */
  rung: boolean;
  /** When (ngx.now()) the control thread wakes next unless rung. */
  wakeAt: number;
  /** Its timer runs (set by that timer, not when it is started: nginx may drop a started one). */
  running: boolean;
  /** When start() started a timer that has not run yet (nil: none). */
  scheduled?: number;
  /** Redis refused the subscription (ACL): never try again on this endpoint. */
  refused: boolean;
  /** Is the connection down (told once in the log, until it is back)? */
  down: boolean;
  /** Under Cluster and Redlock, the node the subscription last connected to: tried first next time. */
  node: string | undefined;
  /** Messages received, reconnections: for status pages and specs. */
  messages: number;
  connects: number;
}

const semaphore = require("ngx.semaphore") as NgxSemaphoreModule;

const clock_now = clock.now;
const math_min = math.min;
const str_sub = string.sub;
const str_match = string.match;
const lua_tonumber = tonumber;
const lua_pairs = pairs;
const lua_ipairs = ipairs;
const subscribers = new LuaTable<string, Subscriber>();

/** Wake the control thread (once: it looks at everything when it wakes). */
function ring(s: Subscriber): void {
  if (s.rung) return;
  s.rung = true;
  s.bell.post(1);
}

function count(t: LuaTable<string, number>): number {
  let n = 0;
  for (const [_k] of lua_pairs(t)) n++;
  return n;
}

/** Does this worker wait for any key of s? */
export function idle(s: Subscriber): boolean {
  return count(s.wanted) === 0;
}

/** Forget what was known of rkey's holder. */
function forget(s: Subscriber, rkey: string): void {
  s.due.delete(rkey);
  s.vouched.delete(rkey);
  s.probe.delete(rkey);
}

/**
 * Keys no waiter of this worker wanted for `grace` seconds (GRACE unless
 * said): out of `wanted`, to be unsubscribed; and waiters killed while they
 * waited are noticed here (wait.ts drops their tickets).
 */
export function prune(s: Subscriber, grace = GRACE): void {
  const now = clock_now();
  let stale: string[] | undefined;
  for (const [rkey, at] of lua_pairs(s.wanted)) {
    if (waits.waiters(rkey) === 0 && now - at >= grace) {
      if (stale === undefined) stale = [];
      stale.push(rkey);
    }
  }
  if (stale === undefined) return;
  for (const [_, rkey] of lua_ipairs(stale)) {
    s.wanted.delete(rkey);
    forget(s, rkey);
  }
}

/**
 * A message on rkey's channel: "" a release with nobody in line (the first
 * waiter here tries), "g<ms> <token>" the key handed to the waiter holding
 * token for ms, "c<ms>" the key claimed by a waiter for ms.
 */
export function heard(s: Subscriber, rkey: string, payload: string): void {
  s.messages++;
  const c = str_sub(payload, 1, 1);
  if (c === "g") {
    const [ms, tok] = str_match(payload, "^g(%d+) (.*)$");
    s.vouched.set(rkey, true);
    s.due.set(rkey, clock_now() + (lua_tonumber(ms) ?? 0) / 1000 + SLACK);
    if (tok !== undefined) waits.wakeToken(rkey, tok);
  } else if (c === "c") {
    s.vouched.set(rkey, true);
    s.due.set(rkey, clock_now() + (lua_tonumber(str_sub(payload, 2)) ?? 0) / 1000 + SLACK);
  } else {
    forget(s, rkey);
    waits.wake(rkey);
  }
}

/** Keys whose due time passed without a word: the first waiter here asks Redis (which passes the key on). */
export function overdue(s: Subscriber): void {
  const now = clock_now();
  let late: string[] | undefined;
  for (const [rkey, at] of lua_pairs(s.due)) {
    if (now >= at) {
      if (late === undefined) late = [];
      late.push(rkey);
    }
  }
  if (late === undefined) return;
  for (const [_, rkey] of lua_ipairs(late)) {
    s.due.delete(rkey);
    // Its lease ran out, or it was handed on, without a word: who holds it next is not known.
    if (s.vouched.has(rkey)) {
      s.vouched.delete(rkey);
      s.probe.delete(rkey);
    }
    waits.wake(rkey);
  }
}

/** When the control thread must look again, no later than `latest`: the first due time, or the end of a grace. */
export function nextLook(s: Subscriber, latest: number): number {
  let at = latest;
  for (const [rkey, since] of lua_pairs(s.wanted)) {
    if (waits.waiters(rkey) === 0) at = math_min(at, since + GRACE);
  }
  for (const [_rkey, due] of lua_pairs(s.due)) at = math_min(at, due);
  return at;
}

/** A subscription went down (its connection ended): waiters sleeping until word comes poll again. */
export function lost(s: Subscriber): void {
  for (const [k] of lua_pairs(s.sent)) s.sent.delete(k);
  const wasLive: string[] = [];
  for (const [k] of lua_pairs(s.live)) wasLive.push(k);
  for (const [_, k] of lua_ipairs(wasLive)) s.live.delete(k);
  for (const [_, k] of lua_ipairs(wasLive)) waits.wakeAll(k);
  for (const [k] of lua_pairs(s.wanted)) if (!s.live.has(k)) waits.wakeAll(k);
}

/** This worker's subscriber for conf, made on first use (nil when no semaphore can be made). */
export function subscriber(conf: redis.RedisConf): Subscriber | undefined {
  let s = subscribers.get(conf.pool);
  if (s === undefined) {
    const [bell] = semaphore.new(0);
    if (bell === undefined) return undefined;
    s = {
      conf, wanted: new LuaTable(), due: new LuaTable(), vouched: new LuaTable(), probe: new LuaTable(),
      live: new LuaTable(), sent: new LuaTable(), bell, rung: false, wakeAt: 0, running: false,
      refused: false, down: false, node: undefined, messages: 0, connects: 0,
    };
    subscribers.set(conf.pool, s);
  }
  return s;
}

/** This worker's subscriber for conf, if it has one. */
export function existing(conf: redis.RedisConf): Subscriber | undefined {
  return subscribers.get(conf.pool);
}

/**
 * A waiter here saw rkey held for ms more (its PTTL; -1: no expiry): unless
 * word comes first, look again then; and sooner should the holder not be
 * vouched for and `foreign` holders be possible.
 */
export function expect(s: Subscriber, rkey: string, ms: number, foreign: boolean): void {
  let wait = ms >= 0 ? ms / 1000 : undefined;
  if (foreign && !s.vouched.has(rkey)) {
    const p = s.probe.get(rkey) ?? PROBE;
    s.probe.set(rkey, math_min(p * 2, PROBE_MAX));
    wait = wait === undefined ? p : math_min(wait, p);
  }
  if (wait === undefined) return;
  const at = clock_now() + wait + SLACK;
  s.due.set(rkey, at);
  if (at < s.wakeAt) ring(s);
}

// Exported by name: this module's own uses of them are locals, not lookups in its exports table.
export { ring };
