// Leases: what resty.dlock locks and resty.dlock.semaphore permits have in
// common. Options shared by both factories, the acquire loop (one script round
// trip per attempt; how to wait between attempts is wait.ts's), owner-checked
// release and extend (one lease, or many in one round trip), and `with`.

import * as check from "./check";
import * as ledger from "./ledger";
import * as meter from "./meter";
import * as orphans from "./orphans";
import * as backend from "../redis/backend";
import * as redis from "../redis/client";
import * as scripts from "../redis/scripts";
import * as waits from "./wait";
import * as wakeups from "./wakeups";

/** Longest key accepted, in bytes (before the prefix). */
export const MAX_KEY_LEN = 512;
/** Longest lease, in ms: one day. Longer jobs renew with lease:extend(). */
export const MAX_TTL = 86400000;

const DEFAULT_TTL = 30000;

/** The scripts of one kind of lease. */
export interface Kind {
  readonly acquire: scripts.Script;
  readonly release: scripts.Script;
  readonly extend: scripts.Script;
  /** Several holders per key (permits): bookkeeping per token, not per key. */
  readonly shared: boolean;
  /** The acquire script also counts fences, in backend.fenceKey(lock key). */
  readonly fenced: boolean;
  /**
   * Waiters take tickets in the key's queue and the release hands the key to
   * the first (scripts.ts): then `drop` takes a ticket (or a handed key) back.
   */
  readonly drop: scripts.Script | undefined;
}


/** What a factory (locks, semaphore) gives its leases. */
export interface Store {
  readonly dict: NgxSharedDict;
  readonly redis: redis.RedisConf;
  readonly prefix: string;
  readonly ttl: number;
  readonly wait: number;
  /** Its counters and histograms, under its name. */
  readonly meter: meter.Meter;
}

export interface Lease {
  readonly key: string;
  readonly token: string;
  ttl: number;
  readonly store: Store;
  readonly kind: Kind;
  readonly rkey: string;
  /** Its record in the shared dict (see ledger). */
  readonly rec: string;
  /** With fencing: larger than the fence of every earlier holder of the key. */
  readonly fence: number | undefined;
  /** Over: Redis confirmed the release, or said the key is not ours. */
  released: boolean;
  /**
   * Epoch ms before which the key cannot have expired in Redis: ttl counted
   * from when the acquire or the last confirmed extend was sent.
   */
  validUntil: number;
  /**
   * Epoch ms by which the key is gone from Redis at the latest, as far as this
   * worker knows: how long a release Redis did not confirm is retried.
   */
  expires: number;
  /** A release reached Redis in time, but its reply was lost: it may have deleted the key. */
  releaseSent: boolean;
  /** release() was called: the watchdog stops renewing it, and a failed renewal is not a loss. */
  releasing: boolean;
  /** The watchdog found it gone, or could not renew it before it expired. */
  lost: boolean;
  /** Told once when the lease is lost (renew = true only). */
  onLost: OnLost | undefined;
  /** Epoch ms when it was taken (for the hold-time histogram). */
  readonly since: number;
  valid(): boolean;
  release(): LuaMultiReturn<[true | undefined, string | undefined]>;
  extend(ttl?: number): LuaMultiReturn<[true | undefined, string | undefined]>;
}

export type AcquireResult = LuaMultiReturn<[Lease | undefined, string | undefined, number | undefined]>;

export function checkTtl(v: unknown): LuaMultiReturn<[number | undefined, string | undefined]> {
  return check.integer("ttl", v, 1, MAX_TTL, "a positive integer of ms");
}

export function checkWait(v: unknown): LuaMultiReturn<[number | undefined, string | undefined]> {
  return check.integer("wait", v, 0, MAX_TTL, "a non-negative integer of ms");
}

/** The options every factory takes: dict, redis, prefix, ttl, wait, name (from a table already checked for unknown names). */
export function parseStore(o: LuaTable<string, unknown>, defaultPrefix: string, defaultName: string): LuaMultiReturn<[Store | undefined, string | undefined]> {
  const [dict, derr] = check.sharedDict(o.get("dict"));
  if (dict === undefined) return $multi(undefined, derr);
  let name = defaultName;
  if (o.get("name") !== undefined) {
    const [n, err] = meter.checkName(o.get("name"));
    if (n === undefined) return $multi(undefined, err);
    name = n;
  }
  const [conf, rerr] = backend.parse(o.get("redis"), dict);
  if (conf === undefined) return $multi(undefined, rerr);
  let prefix = defaultPrefix;
  // "" is a choice: keys shared with other clients' locks (node-redlock, redis-py) under their own names.
  if (o.get("prefix") === "") {
    prefix = "";
  } else if (o.get("prefix") !== undefined) {
    const [p, err] = check.str("prefix", o.get("prefix"), 256);
    if (p === undefined) return $multi(undefined, err);
    prefix = p;
  }
  let ttl = DEFAULT_TTL;
  if (o.get("ttl") !== undefined) {
    const [n, err] = checkTtl(o.get("ttl"));
    if (n === undefined) return $multi(undefined, err);
    ttl = n;
  }
  let wait = 0;
  if (o.get("wait") !== undefined) {
    const [n, err] = checkWait(o.get("wait"));
    if (n === undefined) return $multi(undefined, err);
    wait = n;
  }
  ledger.prepare(dict);
  return $multi({ dict, redis: conf, prefix, ttl, wait, meter: meter.make(dict, name) }, undefined);
}

const ACQUIRE_OPTIONS = check.set("ttl", "wait", "renew", "on_lost");

// Where ngx_lua allows cosockets. Elsewhere (init, set, header/body filter, log,
// balancer) a Redis call would raise; say so as an error instead.
const COSOCKET_PHASES = check.set("rewrite", "server_rewrite", "access", "content", "timer",
  "ssl_cert", "ssl_session_fetch", "ssl_client_hello", "preread");

function phaseError(op: string): string | undefined {
  const phase = ngx.get_phase();
  if (COSOCKET_PHASES.has(phase)) {
    return undefined;
  }
  return "dlock: " + op + " needs cosockets, which nginx does not allow in the " + phase +
    " phase (use it in access/content, or from ngx.timer.at)";
}

/** What the lease's holder is told when the watchdog finds it lost. */
export type OnLost = (this: void, lease: Lease, why: string) => void;

/**
 * key, ttl, wait, renew, on_lost of an acquire call, with the factory's
 * defaults; nil and the error (in place of ttl) when the input is bad.
 */
export function parseAcquire(store: Store, key: unknown, opts: unknown): LuaMultiReturn<[string | undefined, string | number, number, boolean, OnLost | undefined]> {
  const perr = phaseError("acquire");
  if (perr !== undefined) return $multi(undefined, perr, 0, false, undefined);
  const [k, kerr] = check.str("key", key, MAX_KEY_LEN);
  if (k === undefined) return $multi(undefined, kerr!, 0, false, undefined);
  if (opts === undefined) return $multi(k, store.ttl, store.wait, false, undefined);
  if (type(opts) !== "table") {
    const [, err] = check.fail("acquire options must be a table", opts);
    return $multi(undefined, err, 0, false, undefined);
  }
  // Read by name, then counted: no walk over the table on every acquire (check.onlyKnown).
  const o = opts as LuaTable<string, unknown>;
  const t = o.get("ttl");
  const w = o.get("wait");
  const r = o.get("renew");
  const onLost = o.get("on_lost");
  const found = (t !== undefined ? 1 : 0) + (w !== undefined ? 1 : 0) + (r !== undefined ? 1 : 0) + (onLost !== undefined ? 1 : 0);
  const uerr = check.onlyKnown("acquire options", o, found, ACQUIRE_OPTIONS);
  if (uerr !== undefined) return $multi(undefined, uerr, 0, false, undefined);
  let ttl = store.ttl;
  if (t !== undefined) {
    const [n, err] = checkTtl(t);
    if (n === undefined) return $multi(undefined, err!, 0, false, undefined);
    ttl = n;
  }
  let wait = store.wait;
  if (w !== undefined) {
    const [n, err] = checkWait(w);
    if (n === undefined) return $multi(undefined, err!, 0, false, undefined);
    wait = n;
  }
  let renew = false;
  if (r !== undefined) {
    const [b, err] = check.bool("renew", r);
    if (b === undefined) return $multi(undefined, err!, 0, false, undefined);
    renew = b;
  }
  if (onLost !== undefined) {
    if (type(onLost) !== "function") {
      const [, err] = check.fail("on_lost must be a function", onLost);
      return $multi(undefined, err, 0, false, undefined);
    }
    if (!renew) {
      // Nothing would ever notice the loss.
      return $multi(undefined, "dlock: on_lost needs renew = true", 0, false, undefined);
    }
  }
  return $multi(k, ttl, wait, renew, onLost as OnLost | undefined);
}

type Fault = backend.Fault;

/** Epoch ms now, fresh (not the time cached at the start of this event loop cycle). */
function nowMs(): number {
  ngx.update_time();
  return ngx.now() * 1000;
}

/** An extend or a release of l failed: what its outcome may have changed in Redis. */
function unconfirmed(l: Lease, fault: Fault | undefined, release: boolean): void {
  if (fault !== "lost") {
    return;
  }
  if (release) {
    // Sent (at the latest now) while the key could not have expired yet.
    if (nowMs() < l.validUntil) {
      l.releaseSent = true;
    }
  } else {
    // A PEXPIRE queued in a paused Redis runs when Redis resumes, whenever that is.
    l.expires = math.max(l.expires, nowMs() + orphans.LOST_HORIZON * 1000);
  }
}

/** Its record out of the shared dict, and out of the held gauge. */
function forget(l: Lease): void {
  const expires = ledger.forget(l.store.dict, l.rec, l.token);
  if (expires !== undefined) meter.forgotten(l.store.meter, expires);
}

/** Redis says the key is not ours any more: counted lost, unless the watchdog did already. */
function gone(l: Lease): void {
  if (!l.lost) meter.lost(l.store.meter);
}

/**
 * Redis answered the owner-checked release of l (1: deleted, else not ours):
 * the lease is over. A key found gone after a release reached Redis in time
 * was deleted by that release (or expired after it was asked to go), so that
 * still counts as released.
 */
function settle(l: Lease, reply: RedisValue): LuaMultiReturn<[true | undefined, string | undefined]> {
  l.released = true;
  forget(l);
  if (type(reply) === "string") {
    // Handed to the first waiter in line (its token): if it waits in this
    // worker, it goes now, without waiting for the announcement to come back.
    waits.wakeToken(l.rkey, reply as string);
    meter.released(l.store.meter, (nowMs() - l.since) / 1000);
    return $multi(true as const, undefined);
  }
  // With a live subscription the release's PUBLISH wakes our waiters; waking
  // one here too would send two of this worker's waiters after the key.
  if (!wakeups.live(l.store.redis, l.rkey)) waits.wake(l.rkey);
  if (reply === 1 || l.releaseSent) {
    meter.released(l.store.meter, (nowMs() - l.since) / 1000);
    return $multi(true as const, undefined);
  }
  gone(l);
  return $multi(undefined, "not_owner");
}


/** Redis answered the owner-checked extend of l, sent at `sent` (epoch ms), to `ms`. */
function extended(l: Lease, reply: RedisValue, ms: number, sent: number): LuaMultiReturn<[true | undefined, string | undefined]> {
  if (reply !== 1) {
    // Never ours again: tokens are unique per lease.
    l.released = true;
    forget(l);
    gone(l);
    return $multi(undefined, "not_owner");
  }
  l.ttl = ms;
  l.validUntil = sent + backend.validity(l.store.redis, ms);
  l.expires = math.max(l.expires, nowMs() + ms);
  const [from, to] = ledger.renew(l.store.dict, l.rec, l.token, l.key, ms);
  if (from !== undefined) meter.moved(l.store.meter, from, to);
  return $multi(true as const, undefined);
}

interface Unreleased extends orphans.Orphan {
  readonly lease: Lease;
}

function swept(this: void, o: orphans.Orphan, reply: RedisValue | undefined): void {
  const l = (o as Unreleased).lease;
  if (!l.released) {
    if (reply === undefined) {
      // Given up at its expiry: the key is gone by now.
      l.released = true;
      forget(l);
    } else {
      settle(l, reply);
    }
  }
}

/** Hand a lease whose release Redis did not confirm to the sweep, which retries it until the key expires. */
function orphan(l: Lease): void {
  const o: Unreleased = {
    lost: "release", conf: l.store.redis, release: l.kind.release, rkey: l.rkey, token: l.token,
    deadline: l.expires / 1000, settle: swept, lease: l,
  };
  orphans.adopt(o);
}

/**
 * lease:valid(): may the holder still act on it? No round trip: false once it
 * is released or lost, or when its ttl has run out by the local clock since
 * the acquire or the last renewal Redis confirmed.
 */
function valid(this: Lease): boolean {
  return !this.released && !this.lost && nowMs() < this.validUntil;
}

const leaseMethods = {
  /**
   * true, or nil, "not_owner" when the lease expired and the key is gone or
   * someone else's. On a Redis failure nil, "dlock: redis ...": the lease is
   * still ours as far as we know, and release() may be called again.
   */
  release(this: Lease): LuaMultiReturn<[true | undefined, string | undefined]> {
    const perr = phaseError("release");
    if (perr !== undefined) return $multi(undefined, perr);
    if (this.released) {
      return $multi(undefined, "not_owner");
    }
    this.releasing = true;
    const [res, err, fault] = backend.own(this.store.redis, this.kind.release, this.rkey, this.token);
    if (res === undefined) {
      unconfirmed(this, fault, true);
      return $multi(undefined, err);
    }
    return settle(this, res);
  },

  valid,

  /** Reset the lease to `ttl` ms from now (default: its current ttl). */
  extend(this: Lease, ttl?: number): LuaMultiReturn<[true | undefined, string | undefined]> {
    const perr = phaseError("extend");
    if (perr !== undefined) return $multi(undefined, perr);
    let ms = this.ttl;
    if (ttl !== undefined) {
      const [n, terr] = checkTtl(ttl);
      if (n === undefined) return $multi(undefined, terr);
      ms = n;
    }
    if (this.released) {
      return $multi(undefined, "not_owner");
    }
    const sent = ngx.now() * 1000;
    const [res, err, fault] = backend.own(this.store.redis, this.kind.extend, this.rkey, this.token, ms);
    if (res === undefined) {
      unconfirmed(this, fault, false);
      return $multi(undefined, err);
    }
    return extended(this, res, ms, sent);
  },
};
const leaseMt = { __index: leaseMethods };


/**
 * Leases of the list grouped for pipelining: one group per Redis endpoint and
 * script (locks and permits run different scripts), each with the indexes of
 * its leases in the list.
 */
function byEndpoint(list: Lease[], script: (this: void, l: Lease) => scripts.Script): LuaTable<string, number[]> {
  const groups = new LuaTable<string, number[]>();
  for (const i of $range(1, list.length)) {
    const l = list[i - 1]!;
    if (!l.released) {
      const g = l.store.redis.pool + " " + script(l).sha;
      let idx = groups.get(g);
      if (idx === undefined) {
        idx = [];
        groups.set(g, idx);
      }
      idx.push(i);
    }
  }
  return groups;
}

function releaseScript(this: void, l: Lease): scripts.Script {
  return l.kind.release;
}

function extendScript(this: void, l: Lease): scripts.Script {
  return l.kind.extend;
}

/**
 * Release many leases in one round trip per Redis endpoint (a pipeline of the
 * owner-checked release script): how queued releases of a busy gateway keep
 * up. A release Redis did not confirm leaves its lease to a background sweep
 * that retries it until Redis answers or the key expires; the lease ends when
 * the sweep gets an answer. Returns how many were not confirmed now, and the
 * last error.
 */
export function releaseAll(list: Lease[]): LuaMultiReturn<[number, string | undefined]> {
  let failed = 0;
  let lastErr: string | undefined;
  for (const [, idx] of byEndpoint(list, releaseScript)) {
    const group: Lease[] = [];
    for (const i of idx) {
      group.push(list[i - 1]!);
    }
    const first = group[0]!;
    const out = backend.batch(first.store.redis, first.kind.release, group);
    for (const j of $range(1, group.length)) {
      const l = group[j - 1]!;
      const reply = out.replies.get(j);
      if (reply === undefined) {
        unconfirmed(l, out.faults.get(j), true);
        failed++;
        lastErr = out.errors.get(j);
        orphan(l);
      } else {
        settle(l, reply);
      }
    }
  }
  return $multi(failed, lastErr);
}

/**
 * Extend many leases, each to its own ttl, in one round trip per Redis
 * endpoint: how a gateway renews the leases of its in-flight requests. Results
 * are aligned with the list: true, "not_owner" (the lease ran out; it is over,
 * as after extend()), or an error message ("dlock: redis ...").
 */
export function extendAll(list: Lease[]): (true | string)[] {
  const results: (true | string)[] = [];
  for (const _ of list) {
    results.push("not_owner");
  }
  const sent = ngx.now() * 1000;
  for (const [, idx] of byEndpoint(list, extendScript)) {
    const group: Lease[] = [];
    const ms: number[] = [];
    for (const i of idx) {
      const l = list[i - 1]!;
      group.push(l);
      ms.push(l.ttl);
    }
    const first = group[0]!;
    const out = backend.batch(first.store.redis, first.kind.extend, group, ms);
    for (const j of $range(1, group.length)) {
      const l = group[j - 1]!;
      const reply = out.replies.get(j);
      const i = idx[j - 1]!;
      if (reply === undefined) {
        unconfirmed(l, out.faults.get(j), false);
        results[i - 1] = out.errors.get(j)!;
      } else {
        const [ok, err] = extended(l, reply, l.ttl, sent);
        if (ok) {
          results[i - 1] = true;
        } else {
          results[i - 1] = err!;
        }
      }
    }
  }
  return results;
}

/** A lease just taken: sent is when its acquire was sent (epoch ms), fence its fence (fenced kinds). */
export function make(store: Store, kind: Kind, key: string, tok: string, ttl: number, sent: number, fence: number | undefined): Lease {
  const rkey = store.prefix + key;
  const rec = ledger.recordKey(rkey, tok, kind.shared);
  const recorded = ledger.record(store.dict, rec, tok, key, ttl);
  if (recorded !== undefined) meter.recorded(store.meter, recorded);
  const now = nowMs();
  const lease = {
    key, token: tok, ttl, store, kind, rkey, rec, fence, released: false,
    validUntil: sent + backend.validity(store.redis, ttl), expires: now + ttl, releaseSent: false,
    releasing: false, lost: false, onLost: undefined, since: now,
  };
  // Not a tail call: LuaJIT gives up a trace that tail-calls a builtin on its
  // way out ("leaving loop in root trace"), and leaves the function interpreted.
  const l = setmetatable(lease, leaseMt) as Lease;
  return l;
}

/** Anything with an acquire method: locks, semaphores. */
interface Acquirer {
  acquire(key: string, opts?: LuaTable<string, unknown>): AcquireResult;
}

// pcall typed for any number of results, so they pass through without a table.
const protect = pcall as unknown as (this: void, fn: (this: void, ...args: unknown[]) => unknown, ...args: unknown[]) => LuaMultiReturn<unknown[]>;

/**
 * Release, then hand on fn's results (pcall's `ok, ...`) or its error. A
 * release Redis did not confirm goes to the background sweep and, when fn
 * succeeded, is the result: the caller must not believe the key free.
 */
function finish(this: void, lease: Lease, ...pcalled: unknown[]): LuaMultiReturn<unknown[]> {
  const [released, rerr] = lease.release();
  const stuck = released === undefined && rerr !== "not_owner";
  if (stuck) {
    orphan(lease);
  }
  const [ok, e] = select(1, ...pcalled);
  if (ok !== true) {
    return $multi(undefined, "dlock: callback failed while holding " + lease.key + ": " + check.text(e));
  }
  if (stuck) {
    return $multi(undefined, "dlock: could not release " + lease.key + " after the callback (retried until it expires): " +
      check.reason(rerr));
  }
  return select(2, ...pcalled);
}

/**
 * The `with` method of locks and semaphores: run fn(...) while holding key; the
 * lease is released whatever fn does. Returns fn's results, or nil, err when
 * the lease was not acquired, fn raised, or the release failed.
 */
export function withLease(this: Acquirer, key: string, opts: LuaTable<string, unknown> | undefined, fn: (this: void, ...args: unknown[]) => unknown, ...args: unknown[]): LuaMultiReturn<unknown[]> {
  if (type(fn) !== "function") {
    return check.fail("with needs a function", fn);
  }
  const [lease, err, retryAfter] = this.acquire(key, opts);
  if (lease === undefined) {
    return $multi(undefined, err, retryAfter);
  }
  return finish(lease, ...protect(fn, ...args));
}
