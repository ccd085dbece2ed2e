// Wake-ups across the fleet: a release publishes on the key's channel (inside
// the release script, so it costs no extra round trip), and each worker keeps
// ONE subscriber connection per Redis endpoint (not one per waiter or per key:
// a connection per waiter is how subscription pools run dry) for the keys its
// waiters wait for. A message wakes one local waiter of that key through
// wait.ts, within about one round trip of the release anywhere in the fleet.
//
// Waiters only say which keys they want and what they expect
// (subscriptions.ts); the subscriber (subscriber.ts) owns the connection.
// Once Redis confirms a key's subscription, that key's waiters are woken to
// try once more: a release that happened before the subscription was live
// cannot be missed. While no subscription is live (not confirmed yet,
// connection down), waiters poll as before; with one, they sleep until a
// wake-up, the holder's PTTL, or a probe of a holder nobody vouched for (it
// may be another client's, which announces nothing).

import * as redis from "../redis/client";
import * as subscriber from "../redis/subscriber";
import * as subs from "./subscriptions";
import * as waits from "./wait";
import * as clock from "./clock";

const clock_now = clock.now;

/**
 * A waiter of this worker waits for rkey (held elsewhere): have its releases
 * wake us. True when the subscription is live (then sleeping until the
 * holder's PTTL is safe); false while it is being set up or down (poll).
 */
export function want(conf: redis.RedisConf, rkey: string): boolean {
  const s = subs.subscriber(conf);
  if (s === undefined || s.refused) return false;
  s.wanted.set(rkey, clock_now());
  if (!s.running) {
    subscriber.start(s);
  } else if (!s.sent.has(rkey)) {
    subs.ring(s);
  }
  return s.live.has(rkey);
}

/**
 * A waiter here saw rkey held for ms more (its PTTL; -1: no expiry): unless
 * word comes first, look again then; and sooner when the holder may be
 * another client's (`foreign`; never for semaphores, whose holders are all
 * ours) and nobody vouched for it.
 */
export function expect(conf: redis.RedisConf, rkey: string, ms: number, foreign: boolean): void {
  const s = subs.existing(conf);
  if (s !== undefined) subs.expect(s, rkey, ms, foreign);
}

/** Is a subscription for rkey on its way (asked for, the subscriber connecting)? Its confirmation wakes the waiters. */
export function coming(conf: redis.RedisConf, rkey: string): boolean {
  const s = subs.existing(conf);
  return s !== undefined && s.running && !s.refused && s.wanted.has(rkey) && !s.live.has(rkey);
}

/** Is the subscription for rkey live now? */
export function live(conf: redis.RedisConf, rkey: string): boolean {
  const s = subs.existing(conf);
  return s !== undefined && s.live.has(rkey);
}

/**
 * The waiter is done waiting for rkey (acquired, timed out, or failed). The
 * key stays subscribed for GRACE seconds after the last one (subscriptions.ts
 * prune): under contention a worker's line empties and fills again all the
 * time, and each UNSUBSCRIBE/SUBSCRIBE pair would be two more commands for Redis.
 */
export function done(conf: redis.RedisConf, rkey: string): void {
  const s = subs.existing(conf);
  if (s === undefined || s.refused) return;
  if (waits.waiters(rkey) === 0) s.due.delete(rkey);
}

/** Messages and connections of this worker's subscriber for conf (status, specs). */
export function stats(conf: redis.RedisConf): LuaMultiReturn<[number, number]> {
  const s = subs.existing(conf);
  if (s === undefined) return $multi(0, 0);
  return $multi(s.messages, s.connects);
}
