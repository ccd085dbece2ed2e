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
const MAX_BACKOFF = 64; // ms

/** The scripts of one kind of lease. */
export interface Kind {
  readonly acquire: scripts.Script;
  readonly release: scripts.Script;
  readonly extend: scripts.Script;
  /** Several holders per key (permits): bookkeeping per token, not per key. */
  readonly shared: boolean;
}

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

/** key, ttl, wait of an acquire call, with the factory's defaults. */
export function parseAcquire(store: Store, key: unknown, opts: unknown): LuaMultiReturn<[string | undefined, string | number, number]> {
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
 * One script round trip on a pooled connection. Returns the reply, or nil and
 * an error that names the endpoint; `lost` is true when the request may have
 * reached Redis but the reply did not come back (its outcome is unknown).
 */
export function call(conf: redis.RedisConf, s: scripts.Script, rkey: string, ...args: (string | number)[]): LuaMultiReturn<[RedisValue | undefined, string | undefined, boolean]> {
  const [red, cerr] = redis.connect(conf);
  if (red === undefined) {
    return $multi(undefined, cerr, false);
  }
  const [res, err] = scripts.run(red, s, rkey, ...args);
  redis.done(red, conf, res !== undefined);
  if (res === undefined) {
    return $multi(undefined, "dlock: redis " + conf.endpoint + ": " + tostring(err) + " during " + s.name, true);
  }
  if (res === false) {
    return $multi(undefined, "dlock: redis " + conf.endpoint + ": " + tostring(err), false);
  }
  return $multi(res, undefined, false);
}

/**
 * Delete a lease whose acquire reply was lost, owner-checked, from a timer.
 * Redis may be paused or unreachable right now (that is often why the reply was
 * lost), so retry with backoff until the lease would have expired anyway.
 */
function cleanup(this: void, premature: boolean, conf: redis.RedisConf, s: scripts.Script, rkey: string, tok: string, deadline: number, delay: number): void {
  if (premature) {
    return;
  }
  const [res, err] = call(conf, s, rkey, tok);
  if (res !== undefined) {
    if (res === 1) {
      ngx.log(ngx.NOTICE, "dlock: removed ", rkey, " acquired by a request whose reply was lost");
    }
    return;
  }
  if (ngx.now() + delay >= deadline) {
    ngx.log(ngx.WARN, "dlock: giving up cleanup of ", rkey, ", it expires on its own: ", err);
    return;
  }
  ngx.timer.at(delay, cleanup, conf, s, rkey, tok, deadline, math.min(delay * 2, 5));
}

const leaseMethods = {
  /** true, or nil, "not_owner" when the lease expired and the key is gone or someone else's. */
  release(this: Lease): LuaMultiReturn<[true | undefined, string | undefined]> {
    if (this.released || ledger.superseded(this.store.dict, this.rec, this.serial)) {
      this.released = true;
      return $multi(undefined, "not_owner");
    }
    this.released = true;
    ledger.forget(this.store.dict, this.rec, this.serial);
    const [res, err] = call(this.store.redis, this.kind.release, this.rkey, this.token);
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
 * Try, and while `wait` allows, try again: lease on success; nil, "busy",
 * retry_after when wait = 0; nil, "timeout", retry_after at the deadline;
 * nil, "dlock: ..." on a Redis failure. `extra` goes to the script after ttl.
 */
export function acquire(store: Store, kind: Kind, key: string, tok: string, ttl: number, wait: number, ...extra: (string | number)[]): AcquireResult {
  const rkey = store.prefix + key;
  const deadline = ngx.now() * 1000 + wait;
  let backoff = FIRST_BACKOFF;
  while (true) {
    const [res, err, lost] = call(store.redis, kind.acquire, rkey, tok, ttl, ...extra);
    if (res === undefined) {
      if (lost) {
        // The write may have landed: delete it if it did, so it cannot block others for a whole ttl.
        ngx.timer.at(0, cleanup, store.redis, kind.release, rkey, tok, ngx.now() + ttl / 1000, 0.1);
        return $multi(undefined, err + "; acquire outcome unknown, owner-checked cleanup scheduled", undefined);
      }
      return $multi(undefined, err, undefined);
    }
    if (res === "OK") {
      const rec = ledger.recordKey(rkey, tok, kind.shared);
      const serial = ledger.record(store.dict, rec, tok, key, ttl);
      const lease = { key, token: tok, ttl, store, kind, rkey, rec, serial, released: false };
      return $multi(setmetatable(lease, leaseMt) as Lease, undefined, undefined);
    }
    const retryAfter = type(res) === "number" && (res as number) >= 0 ? (res as number) : undefined;
    if (wait === 0) {
      return $multi(undefined, "busy", retryAfter);
    }
    ngx.update_time();
    const left = deadline - ngx.now() * 1000;
    if (left <= 0) {
      return $multi(undefined, "timeout", retryAfter);
    }
    // Jittered exponential backoff, never past the holder's expiry nor our deadline.
    let nap = backoff / 2 + math.random() * backoff / 2;
    if (retryAfter !== undefined && retryAfter + 1 < nap) nap = retryAfter + 1;
    if (left < nap) nap = left;
    ngx.sleep(nap / 1000);
    backoff = math.min(backoff * 2, MAX_BACKOFF);
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
