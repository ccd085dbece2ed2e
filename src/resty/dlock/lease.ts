// Leases: what resty.dlock locks and resty.dlock.semaphore permits have in
// common. Options shared by both factories, the acquire loop (one script round
// trip per attempt, jittered backoff while waiting), owner-checked release and
// extend, the cleanup of acquires whose reply was lost, and `with`.

import * as check from "./check";
import * as ledger from "./ledger";
import * as redis from "./redis";
import * as scripts from "./scripts";

/** Longest key accepted, in bytes (before the prefix). */
export const MAX_KEY_LEN = 512;
/** Longest lease, in ms: one day. Longer jobs renew with lease:extend(). */
export const MAX_TTL = 86400000;

const DEFAULT_TTL = 30000;
const FIRST_BACKOFF = 2; // ms
const MAX_BACKOFF = 64; // ms, between Redis polls while a holder elsewhere has the key
const MAX_LOCAL_BACKOFF = 8; // ms, between shared-dict checks while a holder in this nginx has it

const semaphore = require("ngx.semaphore") as NgxSemaphoreModule;

/**
 * Waiters of this worker, per Redis key. A release in this worker wakes one of
 * them at once (hand-off in one round trip instead of a backoff nap).
 */
interface Waiters {
  readonly sem: NgxSemaphore;
  count: number;
}
const waiting = new LuaTable<string, Waiters>();

/** Sleep up to `ms`, or less if a release of rkey in this worker wakes us. */
function pause(rkey: string, ms: number): void {
  let w = waiting.get(rkey);
  if (w === undefined) {
    const [sem] = semaphore.new(0);
    if (sem === undefined) {
      ngx.sleep(ms / 1000);
      return;
    }
    w = { sem, count: 0 };
    waiting.set(rkey, w);
  }
  w.count++;
  w.sem.wait(ms / 1000);
  w.count--;
  if (w.count === 0 && waiting.get(rkey) === w) {
    waiting.delete(rkey);
  }
}

function wake(rkey: string): void {
  const w = waiting.get(rkey);
  if (w !== undefined && w.count > 0) {
    w.sem.post(1);
  }
}

/** The scripts of one kind of lease. */
export interface Kind {
  readonly acquire: scripts.Script;
  readonly release: scripts.Script;
  readonly extend: scripts.Script;
  /** Several holders per key (permits): bookkeeping per token, not per key. */
  readonly shared: boolean;
  /** The acquire script also counts fences in the key `<lock key>:fence`. */
  readonly fenced: boolean;
}

/** Suffix of the fence counter's key (next to the lock key). */
export const FENCE_SUFFIX = ":fence";

/** What a factory (locks, semaphore) gives its leases. */
export interface Store {
  readonly dict: NgxSharedDict;
  readonly redis: redis.RedisConf;
  readonly prefix: string;
  readonly ttl: number;
  readonly wait: number;
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
  readonly serial: number;
  /** With fencing: larger than the fence of every earlier holder of the key. */
  readonly fence: number | undefined;
  released: boolean;
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

/** The options every factory takes: dict, redis, prefix, ttl, wait (from a table already checked for unknown names). */
export function parseStore(o: LuaTable<string, unknown>, defaultPrefix: string): LuaMultiReturn<[Store | undefined, string | undefined]> {
  const [dictName, derr] = check.str("dict", o.get("dict"), 256);
  if (dictName === undefined) return $multi(undefined, derr);
  const dict = ngx.shared.get(dictName);
  if (dict === undefined) {
    return check.fail("no lua_shared_dict named " + dictName + " (declare it in nginx.conf)", dictName);
  }
  const [conf, rerr] = redis.parse(o.get("redis"));
  if (conf === undefined) return $multi(undefined, rerr);
  let prefix = defaultPrefix;
  if (o.get("prefix") !== undefined) {
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
  return $multi({ dict, redis: conf, prefix, ttl, wait }, undefined);
}

const ACQUIRE_OPTIONS = check.set("ttl", "wait");

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

/** key, ttl, wait of an acquire call, with the factory's defaults. */
export function parseAcquire(store: Store, key: unknown, opts: unknown): LuaMultiReturn<[string | undefined, string | number, number]> {
  const perr = phaseError("acquire");
  if (perr !== undefined) return $multi(undefined, perr, 0);
  const [k, kerr] = check.str("key", key, MAX_KEY_LEN);
  if (k === undefined) return $multi(undefined, kerr!, 0);
  const [o, oerr] = check.options("acquire options", opts, ACQUIRE_OPTIONS);
  if (o === undefined) return $multi(undefined, oerr!, 0);
  let ttl = store.ttl;
  if (o.get("ttl") !== undefined) {
    const [n, err] = checkTtl(o.get("ttl"));
    if (n === undefined) return $multi(undefined, err!, 0);
    ttl = n;
  }
  let wait = store.wait;
  if (o.get("wait") !== undefined) {
    const [n, err] = checkWait(o.get("wait"));
    if (n === undefined) return $multi(undefined, err!, 0);
    wait = n;
  }
  return $multi(k, ttl, wait);
}

/**
 * How a failed call failed. "lost": the request may have reached Redis but the
 * reply did not come back (its outcome is unknown). "transient": Redis said it
 * cannot serve right now (loading its data set, busy script, failover) and did
 * nothing; worth another try while waiting. "failed": anything else.
 */
export type Fault = "lost" | "transient" | "failed";

const TRANSIENT = check.set("LOADING", "BUSY", "TRYAGAIN", "MASTERDOWN", "CLUSTERDOWN");

/**
 * One script round trip on a pooled connection. Returns the reply, or nil, an
 * error that names the endpoint, and the kind of fault.
 */
export function call(conf: redis.RedisConf, s: scripts.Script, rkey: string, ...args: (string | number)[]): LuaMultiReturn<[RedisValue | undefined, string | undefined, Fault | undefined]> {
  const [red, cerr] = redis.connect(conf);
  if (red === undefined) {
    return $multi(undefined, cerr, "failed");
  }
  const [res, err] = scripts.run(red, s, rkey, ...args);
  redis.done(red, conf, res !== undefined);
  if (res === undefined) {
    return $multi(undefined, "dlock: redis " + conf.endpoint + ": " + tostring(err) + " during " + s.name, "lost");
  }
  if (res === false) {
    const [code] = string.match(tostring(err), "^(%u+)");
    const fault: Fault = code !== undefined && TRANSIENT.has(code) ? "transient" : "failed";
    return $multi(undefined, "dlock: redis " + conf.endpoint + ": " + tostring(err), fault);
  }
  return $multi(res, undefined, undefined);
}

// Acquires whose reply was lost ("orphans"): the SET may have landed, and then
// the key would block everyone for a whole ttl. One sweep per worker deletes
// them, owner-checked, retrying until Redis answers: Redis may be paused or
// unreachable right now (that is often why the reply was lost), and a SET
// queued in a paused Redis runs when Redis resumes, with its ttl starting then.
// One timer for all orphans, not one each: an outage can orphan thousands.
const CLEANUP_FOR = 600; // seconds an orphan is retried
const MAX_SWEEP_DELAY = 0.5; // seconds between sweeps, at most

interface Orphan {
  readonly conf: redis.RedisConf;
  readonly release: scripts.Script;
  readonly rkey: string;
  readonly token: string;
  readonly deadline: number;
}

let orphans: Orphan[] = [];
let sweeping = false;

function sweepOrphans(this: void, premature: boolean, delay: number): void {
  // Adoptions during this sweep (it yields) go to a fresh list.
  const batch = orphans;
  orphans = [];
  // Endpoints (pools) that failed in this sweep: their other orphans would only wait for the same timeouts.
  const down = new LuaSet<string>();
  for (const o of batch) {
    if (down.has(o.conf.pool)) {
      orphans.push(o);
    } else if (ngx.now() > o.deadline) {
      ngx.log(ngx.WARN, "dlock: giving up cleanup of ", o.rkey, " after ", CLEANUP_FOR, " s, it expires on its own");
    } else {
      const [res, , fault] = call(o.conf, o.release, o.rkey, o.token);
      if (res === 1) {
        ngx.log(ngx.NOTICE, "dlock: removed ", o.rkey, ", acquired by a request whose reply was lost");
      } else if (res === undefined) {
        orphans.push(o);
        if (fault !== "transient") {
          down.add(o.conf.pool);
        }
      }
    }
  }
  if (orphans.length === 0 || premature) {
    sweeping = false;
    return;
  }
  const later = math.min(delay * 2, MAX_SWEEP_DELAY);
  const [ok] = ngx.timer.at(later, sweepOrphans, later);
  if (!ok) {
    sweeping = false;
  }
}

function adopt(conf: redis.RedisConf, release: scripts.Script, rkey: string, token: string): void {
  orphans.push({ conf, release, rkey, token, deadline: ngx.now() + CLEANUP_FOR });
  if (!sweeping) {
    const [ok] = ngx.timer.at(0, sweepOrphans, 0.05);
    sweeping = ok !== undefined;
  }
}

const leaseMethods = {
  /** true, or nil, "not_owner" when the lease expired and the key is gone or someone else's. */
  release(this: Lease): LuaMultiReturn<[true | undefined, string | undefined]> {
    const perr = phaseError("release");
    if (perr !== undefined) return $multi(undefined, perr);
    if (this.released) {
      return $multi(undefined, "not_owner");
    }
    this.released = true;
    if (!ledger.forget(this.store.dict, this.rec, this.serial)) {
      return $multi(undefined, "not_owner");
    }
    const [res, err] = call(this.store.redis, this.kind.release, this.rkey, this.token);
    wake(this.rkey);
    if (res === undefined) {
      return $multi(undefined, err);
    }
    if (res !== 1) {
      return $multi(undefined, "not_owner");
    }
    return $multi(true as const, undefined);
  },

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
    if (this.released || ledger.superseded(this.store.dict, this.rec, this.serial)) {
      return $multi(undefined, "not_owner");
    }
    const [res, err] = call(this.store.redis, this.kind.extend, this.rkey, this.token, ms);
    if (res === undefined) {
      return $multi(undefined, err);
    }
    if (res !== 1) {
      ledger.forget(this.store.dict, this.rec, this.serial);
      return $multi(undefined, "not_owner");
    }
    this.ttl = ms;
    ledger.renew(this.store.dict, this.rec, this.serial, this.token, this.key, ms);
    return $multi(true as const, undefined);
  },
};
const leaseMt = { __index: leaseMethods };

/**
 * Release many leases that share one Redis endpoint in one round trip (a
 * pipeline of the owner-checked release script): how queued releases of a busy
 * gateway keep up. Returns how many could not be confirmed and the last error.
 */
export function releaseAll(list: Lease[]): LuaMultiReturn<[number, string | undefined]> {
  const todo: Lease[] = [];
  for (const l of list) {
    if (!l.released) {
      l.released = true;
      if (ledger.forget(l.store.dict, l.rec, l.serial)) {
        todo.push(l);
      }
    }
  }
  const first = todo[0];
  if (first === undefined) {
    return $multi(0, undefined);
  }
  const conf = first.store.redis;
  const [red, cerr] = redis.connect(conf);
  if (red === undefined) {
    return $multi(todo.length, cerr);
  }
  red.init_pipeline(todo.length);
  for (const l of todo) {
    red.evalsha(l.kind.release.sha, 1, l.rkey, l.token);
  }
  const [replies, perr] = red.commit_pipeline();
  redis.done(red, conf, replies !== undefined);
  let failed = 0;
  let lastErr: string | undefined;
  if (replies === undefined) {
    failed = todo.length;
    lastErr = "dlock: redis " + conf.endpoint + ": " + tostring(perr) + " during release";
  }
  for (const i of $range(1, todo.length)) {
    const l = todo[i - 1]!;
    const r = replies !== undefined ? replies.get(i) : undefined;
    if (type(r) === "table") {
      // An error reply; NOSCRIPT (scripts flushed) gets one more try on its own, with EVAL.
      const [res, err] = call(conf, l.kind.release, l.rkey, l.token);
      if (res === undefined) {
        failed++;
        lastErr = err;
      }
    }
    wake(l.rkey);
  }
  return $multi(failed, lastErr);
}

/**
 * While a worker of this nginx holds the key, wait without polling Redis: a
 * holder in this worker wakes one waiter when it releases (waiters queue on a
 * semaphore, first come first served); a holder in another worker drops its
 * shared-dict record, which costs nothing to watch. "none": no holder here;
 * "free": try Redis now; "timeout": the deadline passed, and then the ms until
 * the holder's lease ends (retry_after).
 */
function awaitLocalHolder(dict: NgxSharedDict, rkey: string, deadline: number): LuaMultiReturn<["none" | "free" | "timeout", number | undefined]> {
  const rec = ledger.recordKey(rkey, "", false);
  let step = 1;
  let seen = false;
  while (true) {
    const [pid, expires] = ledger.holder(dict, rec);
    if (pid === undefined) {
      return $multi(seen ? "free" : "none", undefined);
    }
    seen = true;
    ngx.update_time();
    const now = ngx.now() * 1000;
    if (now >= deadline) {
      return $multi("timeout", math.max(0, math.floor(expires - now)));
    }
    if (pid === ngx.worker.pid()) {
      // Woken by its release, or at its expiry if it never releases.
      pause(rkey, math.min(deadline - now, math.max(1, expires - now + 1)));
      return $multi("free", undefined);
    }
    pause(rkey, math.min(deadline - now, step / 2 + math.random() * step / 2));
    step = math.min(step * 2, MAX_LOCAL_BACKOFF);
  }
}

/**
 * Try, and while `wait` allows, try again: lease on success; nil, "busy",
 * retry_after when wait = 0; nil, "timeout", retry_after at the deadline;
 * nil, "dlock: ..." on a Redis failure. `extra` goes to the script after ttl.
 */
export function acquire(store: Store, kind: Kind, key: string, tok: string, ttl: number, wait: number, ...extra: (string | number)[]): AcquireResult {
  const rkey = store.prefix + key;
  const deadline = ngx.now() * 1000 + wait;
  let backoff = FIRST_BACKOFF;
  let retryAfter: number | undefined;
  // A waiter that finds the key held in this nginx queues up locally at once:
  // asking Redis first would only hear "busy". (Without `wait`, Redis answers.)
  if (wait > 0 && !kind.shared) {
    const [state, left] = awaitLocalHolder(store.dict, rkey, deadline);
    if (state === "timeout") {
      return $multi(undefined, "timeout", left);
    }
  }
  while (true) {
    let res: RedisValue | undefined;
    let err: string | undefined;
    let fault: Fault | undefined;
    let fence: number | undefined;
    if (kind.fenced) {
      [res, err, fault] = call(store.redis, kind.acquire, rkey, rkey + FENCE_SUFFIX, tok, ttl);
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
      if (fault === "lost") {
        // The write may have landed: delete it if it did, so it cannot block others for a whole ttl.
        adopt(store.redis, kind.release, rkey, tok);
        return $multi(undefined, err + "; acquire outcome unknown, owner-checked cleanup scheduled", undefined);
      }
      if (fault !== "transient" || wait === 0 || deadline - ngx.now() * 1000 <= 0) {
        return $multi(undefined, err, undefined);
      }
    } else if (res === "OK") {
      const rec = ledger.recordKey(rkey, tok, kind.shared);
      const serial = ledger.record(store.dict, rec, tok, key, ttl);
      const lease = { key, token: tok, ttl, store, kind, rkey, rec, serial, fence, released: false };
      return $multi(setmetatable(lease, leaseMt) as Lease, undefined, undefined);
    } else {
      retryAfter = type(res) === "number" && (res as number) >= 0 ? (res as number) : undefined;
      if (wait === 0) {
        return $multi(undefined, "busy", retryAfter);
      }
    }
    ngx.update_time();
    const left = deadline - ngx.now() * 1000;
    if (left <= 0) {
      if (res === undefined) {
        return $multi(undefined, err, undefined); // Redis never became able to answer: say why
      }
      return $multi(undefined, "timeout", retryAfter);
    }
    let here: "none" | "free" | "timeout" = "none";
    if (!kind.shared) {
      let holderLeft: number | undefined;
      [here, holderLeft] = awaitLocalHolder(store.dict, rkey, deadline);
      if (here === "timeout") {
        return $multi(undefined, "timeout", holderLeft);
      }
    }
    if (here === "none") {
      // The holder is elsewhere: poll Redis with jittered exponential backoff,
      // never past the holder's expiry nor our deadline.
      let nap = backoff / 2 + math.random() * backoff / 2;
      if (retryAfter !== undefined && retryAfter + 1 < nap) nap = retryAfter + 1;
      if (left < nap) nap = left;
      pause(rkey, nap);
      backoff = math.min(backoff * 2, MAX_BACKOFF);
    }
  }
}

/** Anything with an acquire method: locks, semaphores. */
interface Acquirer {
  acquire(key: string, opts?: LuaTable<string, unknown>): AcquireResult;
}

// pcall typed for any number of results, so they pass through without a table.
const protect = pcall as unknown as (this: void, fn: (this: void, ...args: unknown[]) => unknown, ...args: unknown[]) => LuaMultiReturn<unknown[]>;

/** Release, then hand on fn's results (pcall's `ok, ...`) or its error. */
function finish(this: void, lease: Lease, ...pcalled: unknown[]): LuaMultiReturn<unknown[]> {
  lease.release();
  const [ok, e] = select(1, ...pcalled);
  if (ok !== true) {
    return $multi(undefined, "dlock: callback failed while holding " + lease.key + ": " + check.text(e));
  }
  return select(2, ...pcalled);
}

/**
 * The `with` method of locks and semaphores: run fn(...) while holding key; the
 * lease is released whatever fn does. Returns fn's results, or nil, err when
 * the lease was not acquired or fn raised.
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
