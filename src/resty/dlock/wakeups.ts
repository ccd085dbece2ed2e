// Wake-ups across the fleet: a release publishes on the key's channel (inside
// the release script, so it costs no extra round trip), and each worker keeps
// ONE subscriber connection per Redis endpoint (not one per waiter or per key:
// a connection per waiter is how subscription pools run dry) for the keys its
// waiters wait for. A message wakes one local waiter of that key through
// wait.ts, within about one round trip of the release anywhere in the fleet.
//
// The subscriber is a timer that owns its connection: waiters only say which
// keys they want, and it sends SUBSCRIBE/UNSUBSCRIBE between reads (a read
// times out every TICK seconds to look for changes). Once Redis confirms a
// key's subscription, that key's waiters are woken to try once more: a
// release that happened before the subscription was live cannot be missed.
// While no subscription is live (not confirmed yet, connection down), waiters
// poll as before; with one, they sleep until a wake-up or the holder's PTTL.

import * as check from "./check";
import * as redis from "./redis";
import * as resp from "./resp";
import * as scripts from "./scripts";
import * as waits from "./wait";

const CHANNEL = scripts.CHANNEL;
/** Seconds a subscriber read waits before it looks for subscription changes. */
const TICK = 0.01;
/** Seconds a key stays subscribed after its last waiter of this worker. */
const GRACE = 2;
/** Seconds a subscriber with nothing to watch stays connected before it stops. */
const IDLE = 10;
/** Seconds between reconnection attempts after the connection failed. */
const RETRY = 0.5;

interface Subscriber {
  readonly conf: redis.RedisConf;
  /**
   * Keys waited for here, and when a waiter last said so: a key stays
   * subscribed while this worker has waiters for it or for GRACE seconds after
   * (a waiter between two attempts is in no queue). Nothing depends on waiters
   * saying goodbye: one whose request was killed cannot.
   */
  readonly wanted: LuaTable<string, number>;
  /**
   * Keys held elsewhere, and when (ngx.now()) their holder's lease ends or
   * a key handed to a waiter elsewhere must have been claimed: if no word
   * comes by then (a holder that died, a waiter that never came), the first
   * waiter here asks Redis, which passes the key on. Nobody else polls.
   */
  readonly due: LuaTable<string, number>;
  /** Keys whose subscription Redis confirmed on the current connection. */
  readonly live: LuaTable<string, boolean>;
  /** Keys subscribed (or asked for) on the current connection. */
  readonly sent: LuaTable<string, boolean>;
  running: boolean;
  /** Redis refused the subscription (ACL): never try again on this endpoint. */
  refused: boolean;
  /** Messages received, reconnections: for status pages and specs. */
  messages: number;
  connects: number;
}

const subscribers = new LuaTable<string, Subscriber>();

/**
 * Where the subscriber connects: the server itself, or (Cluster, Redlock) the
 * first node (PUBLISH reaches every node of a cluster). A pool of its own: the
 * connection is held for as long as there are waiters.
 */
function endpointOf(conf: redis.RedisConf): redis.RedisConf {
  return redis.apart(conf.nodes !== undefined ? conf.nodes[0]! : conf, "wakeups");
}

/** Bring the connection's subscriptions in line with what is wanted. */
function sync(s: Subscriber, sock: NgxTcpSocket): string | undefined {
  const add: string[] = ["subscribe"];
  const drop: string[] = ["unsubscribe"];
  const now = ngx.now();
  const stale: string[] = [];
  for (const [rkey, at] of s.wanted) {
    if (now - at > GRACE && waits.waiters(rkey) === 0) stale.push(rkey);
  }
  for (const rkey of stale) {
    s.wanted.delete(rkey);
    s.due.delete(rkey);
  }
  for (const [rkey] of s.wanted) {
    if (!s.sent.has(rkey)) {
      add.push(CHANNEL + rkey);
      s.sent.set(rkey, true);
    }
  }
  for (const [rkey] of s.sent) {
    if (!s.wanted.has(rkey)) {
      drop.push(CHANNEL + rkey);
      s.sent.delete(rkey);
      s.live.delete(rkey);
    }
  }
  for (const words of [add, drop]) {
    if (words.length > 1) {
      const [ok, err] = sock.send(resp.encode(words));
      if (ok === undefined) return tostring(err);
    }
  }
  return undefined;
}

function count(t: LuaTable<string, number>): number {
  let n = 0;
  for (const [_k] of pairs(t)) n++;
  return n;
}

/** Seconds of slack on a due time: the claim or release announcing it is on its way. */
const SLACK = 0.005;

/**
 * A message on rkey's channel: "" a release with nobody in line (the first
 * waiter here tries), "g<ms> <token>" the key handed to the waiter holding
 * token for ms, "c<ms>" the key claimed by a waiter for ms.
 */
function heard(s: Subscriber, rkey: string, payload: string): void {
  const c = string.sub(payload, 1, 1);
  if (c === "g") {
    const [ms, tok] = string.match(payload, "^g(%d+) (.*)$");
    s.due.set(rkey, ngx.now() + (tonumber(ms) ?? 0) / 1000 + SLACK);
    if (tok !== undefined) waits.wakeToken(rkey, tok);
  } else if (c === "c") {
    s.due.set(rkey, ngx.now() + (tonumber(string.sub(payload, 2)) ?? 0) / 1000 + SLACK);
  } else {
    s.due.delete(rkey);
    waits.wake(rkey);
  }
}

/**
 * Keys whose due time passed without a word: the first waiter here asks Redis
 * (which passes the key on). And waiters killed while they waited are noticed
 * here, within a TICK, so that their tickets are dropped before their turn.
 */
function overdue(s: Subscriber): void {
  for (const [rkey] of s.wanted) waits.waiters(rkey);
  const now = ngx.now();
  let late: string[] | undefined;
  for (const [rkey, at] of s.due) {
    if (now >= at) {
      if (late === undefined) late = [];
      late.push(rkey);
    }
  }
  if (late === undefined) return;
  for (const rkey of late) {
    s.due.delete(rkey);
    waits.wake(rkey);
  }
}

/** One connection's life: subscribe, read, wake; returns why it ended (nil: nothing left to watch). */
function session(s: Subscriber): string | undefined {
  const [red, err] = redis.connect(endpointOf(s.conf));
  if (red === undefined) return err;
  s.connects++;
  const sock = rawget(red as unknown as { _sock: NgxTcpSocket | undefined }, "_sock")!;
  const flags = red as unknown as { _subscribed: boolean };
  red.set_timeout(TICK * 1000);
  let idleSince = ngx.now();
  while (true) {
    // lua-resty-redis reads the replies; marked subscribed, a read timeout leaves
    // the connection open (it unmarks it when the last channel is unsubscribed).
    flags._subscribed = true;
    const serr = sync(s, sock);
    if (serr !== undefined) {
      red.close();
      return serr;
    }
    if (count(s.wanted) > 0) {
      idleSince = ngx.now();
    } else if (ngx.now() - idleSince >= IDLE || ngx.worker.exiting()) {
      red.close();
      return undefined;
    }
    const [msg, rerr] = red.read_reply();
    if (type(msg) === "table") {
      const m = msg as LuaTable<number, unknown>;
      const kind = m.get(1);
      const rkey = string.sub(tostring(m.get(2)), CHANNEL.length + 1);
      if (kind === "message") {
        s.messages++;
        heard(s, rkey, tostring(m.get(3)));
      } else if (kind === "subscribe" && s.sent.has(rkey)) {
        s.live.set(rkey, true);
        // A release, or a key handed to one of them, may have come before the subscription: they look once more.
        waits.recheck(rkey);
      }
    } else if (string.sub(tostring(rerr), 1, 6) === "NOPERM") {
      // An ACL user without channel permissions: no wake-ups on this endpoint, ever; its waiters poll.
      red.close();
      s.refused = true;
      ngx.log(ngx.WARN, "dlock: redis ", s.conf.endpoint, ": the user may not subscribe to ", CHANNEL,
        "*: waiters poll instead of being woken (grant it with ACL SETUSER <user> &", CHANNEL, "*): ", rerr);
      return undefined;
    } else if (rerr !== "timeout") {
      red.close();
      return "dlock: redis " + s.conf.endpoint + ": wake-up subscription: " + tostring(rerr);
    }
    overdue(s);
  }
}

function run(this: void, premature: boolean, s: Subscriber): void {
  while (!premature) {
    // A raise must not leave `running` set with nobody running: wake-ups would stop for good.
    const [ok, res] = pcall(session, s);
    const err = ok ? res as string | undefined : "dlock: wake-up subscriber failed: " + tostring(res);
    for (const [k] of s.sent) s.sent.delete(k);
    const wasLive: string[] = [];
    for (const [k] of s.live) wasLive.push(k);
    for (const k of wasLive) s.live.delete(k);
    // Waiters sleeping until word comes (or the subscription does) would not hear it now: they poll again.
    for (const k of wasLive) waits.wakeAll(k);
    for (const [k] of s.wanted) if (!s.live.has(k)) waits.wakeAll(k);
    if (err === undefined) break;
    ngx.log(ngx.WARN, "dlock: ", check.reason(err), " (waiters poll meanwhile)");
    ngx.sleep(RETRY);
    if (count(s.wanted) === 0 || ngx.worker.exiting()) break;
  }
  s.running = false;
}

function subscriber(conf: redis.RedisConf): Subscriber {
  let s = subscribers.get(conf.pool);
  if (s === undefined) {
    s = { conf, wanted: new LuaTable(), due: new LuaTable(), live: new LuaTable(), sent: new LuaTable(), running: false, refused: false, messages: 0, connects: 0 };
    subscribers.set(conf.pool, s);
  }
  return s;
}

/**
 * A waiter of this worker waits for rkey (held elsewhere): have its releases
 * wake us. True when the subscription is live (then sleeping until the
 * holder's PTTL is safe); false while it is being set up or down (poll).
 */
export function want(conf: redis.RedisConf, rkey: string): boolean {
  const s = subscriber(conf);
  if (s.refused) return false;
  s.wanted.set(rkey, ngx.now());
  if (!s.running) {
    const [ok] = ngx.timer.at(0, run, s);
    s.running = ok !== undefined;
  }
  return s.live.has(rkey);
}

/**
 * A waiter here saw rkey held for ms more (its PTTL; -1: no expiry): unless
 * word comes first, look again then.
 */
export function expect(conf: redis.RedisConf, rkey: string, ms: number): void {
  const s = subscribers.get(conf.pool);
  if (s === undefined || ms < 0) return;
  s.due.set(rkey, ngx.now() + ms / 1000 + SLACK);
}

/** Is a subscription for rkey on its way (asked for, the subscriber connecting)? Its confirmation wakes the waiters. */
export function coming(conf: redis.RedisConf, rkey: string): boolean {
  const s = subscribers.get(conf.pool);
  return s !== undefined && s.running && !s.refused && s.wanted.has(rkey) && !s.live.has(rkey);
}

/** Is the subscription for rkey live now? */
export function live(conf: redis.RedisConf, rkey: string): boolean {
  const s = subscribers.get(conf.pool);
  return s !== undefined && s.live.has(rkey);
}

/**
 * The waiter is done waiting for rkey (acquired, timed out, or failed). The
 * key stays subscribed for GRACE seconds after the last one (see sync): under
 * contention a worker's line empties and fills again all the time, and each
 * UNSUBSCRIBE/SUBSCRIBE pair would be two more commands for Redis.
 */
export function done(conf: redis.RedisConf, rkey: string): void {
  const s = subscribers.get(conf.pool);
  if (s === undefined || s.refused) return;
  if (waits.waiters(rkey) === 0) s.due.delete(rkey);
}

/** Messages and connections of this worker's subscriber for conf (status, specs). */
export function stats(conf: redis.RedisConf): LuaMultiReturn<[number, number]> {
  const s = subscribers.get(conf.pool);
  if (s === undefined) return $multi(0, 0);
  return $multi(s.messages, s.connects);
}
