// resty.dlock: a distributed lock on Redis for OpenResty.
//
//   local dlock = require "resty.dlock"
//   local locks = assert(dlock.new({ dict = "dlock", redis = { host = "127.0.0.1" } }))
//   local lease, err, retry_after = locks:acquire("orders:42", { ttl = 10000, wait = 0 })
//   ...
//   lease:release()

import * as check from "./dlock/check";
import * as ledger from "./dlock/ledger";
import * as redis from "./dlock/redis";
import * as scripts from "./dlock/scripts";
import * as token from "./dlock/token";

export const _VERSION = "0.1.0";

/** Longest key accepted, in bytes (before the prefix). */
export const MAX_KEY_LEN = 512;
/** Longest lease, in ms: one day. Longer jobs renew with lease:extend(). */
export const MAX_TTL = 86400000;

const DEFAULT_TTL = 30000;
const FIRST_BACKOFF = 2; // ms
const MAX_BACKOFF = 64; // ms

export interface Locks {
  readonly dict: NgxSharedDict;
  readonly redis: redis.RedisConf;
  readonly prefix: string;
  readonly owner: "random" | "worker";
  readonly ttl: number;
  readonly wait: number;
  acquire(key: string, opts?: LuaTable<string, unknown>): LuaMultiReturn<[Lease | undefined, string | undefined, number | undefined]>;
  held(): ledger.HeldLease[];
  with(key: string, opts: LuaTable<string, unknown> | undefined, fn: (this: void, ...args: unknown[]) => unknown, ...args: unknown[]): LuaMultiReturn<unknown[]>;
}

export interface Lease {
  readonly key: string;
  readonly token: string;
  ttl: number;
  readonly locks: Locks;
  readonly rkey: string;
  readonly serial: number;
  released: boolean;
  release(): LuaMultiReturn<[true | undefined, string | undefined]>;
  extend(ttl?: number): LuaMultiReturn<[true | undefined, string | undefined]>;
}

const NEW_OPTIONS = check.set("dict", "redis", "prefix", "owner", "ttl", "wait");
const ACQUIRE_OPTIONS = check.set("ttl", "wait");

function checkTtl(v: unknown): LuaMultiReturn<[number | undefined, string | undefined]> {
  return check.integer("ttl", v, 1, MAX_TTL, "a positive integer of ms");
}

function checkWait(v: unknown): LuaMultiReturn<[number | undefined, string | undefined]> {
  return check.integer("wait", v, 0, MAX_TTL, "a non-negative integer of ms");
}

function checkKey(v: unknown): LuaMultiReturn<[string | undefined, string | undefined]> {
  return check.str("key", v, MAX_KEY_LEN);
}

/**
 * One owner-checked script round trip. Returns the reply, or nil and an error
 * that names the endpoint; `lost` is true when the request may have reached
 * Redis but the reply did not come back (its outcome is unknown).
 */
function call(conf: redis.RedisConf, s: scripts.Script, rkey: string, ...args: (string | number)[]): LuaMultiReturn<[RedisValue | undefined, string | undefined, boolean]> {
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
function cleanup(this: void, premature: boolean, conf: redis.RedisConf, rkey: string, tok: string, deadline: number, delay: number): void {
  if (premature) {
    return;
  }
  const [res, err] = call(conf, scripts.RELEASE, rkey, tok);
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
  ngx.timer.at(delay, cleanup, conf, rkey, tok, deadline, math.min(delay * 2, 5));
}

const leaseMethods = {
  /** true, or nil, "not_owner" when the lease expired and the key is gone or someone else's. */
  release(this: Lease): LuaMultiReturn<[true | undefined, string | undefined]> {
    if (this.released || ledger.superseded(this.locks.dict, this.rkey, this.serial)) {
      this.released = true;
      return $multi(undefined, "not_owner");
    }
    this.released = true;
    ledger.forget(this.locks.dict, this.rkey, this.serial);
    const [res, err] = call(this.locks.redis, scripts.RELEASE, this.rkey, this.token);
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
    if (this.released || ledger.superseded(this.locks.dict, this.rkey, this.serial)) {
      return $multi(undefined, "not_owner");
    }
    const [res, err] = call(this.locks.redis, scripts.EXTEND, this.rkey, this.token, ms);
    if (res === undefined) {
      return $multi(undefined, err);
    }
    if (res !== 1) {
      ledger.forget(this.locks.dict, this.rkey, this.serial);
      return $multi(undefined, "not_owner");
    }
    this.ttl = ms;
    ledger.renew(this.locks.dict, this.rkey, this.serial, this.token, this.key, ms);
    return $multi(true as const, undefined);
  },
};
const leaseMt = { __index: leaseMethods };

// pcall typed for any number of results, so they pass through without a table.
const protect = pcall as unknown as (this: void, fn: (this: void, ...args: unknown[]) => unknown, ...args: unknown[]) => LuaMultiReturn<unknown[]>;

/** Release, then hand on fn's results (pcall's `ok, ...`) or its error. */
function finish(this: void, lease: Lease, ...pcalled: unknown[]): LuaMultiReturn<unknown[]> {
  lease.release();
  const [ok, e] = select(1, ...pcalled);
  if (ok !== true) {
    return $multi(undefined, "dlock: callback failed while holding " + lease.key + ": " + tostring(e));
  }
  return select(2, ...pcalled);
}

const locksMethods = {
  /**
   * lease, nil on success; nil, "busy", retry_after when wait = 0 and the key
   * is held; nil, "timeout", retry_after when waiting ran out; nil, "dlock: ..."
   * on bad input or Redis failure. retry_after: ms until the holder's lease ends.
   */
  acquire(this: Locks, key: string, opts?: LuaTable<string, unknown>): LuaMultiReturn<[Lease | undefined, string | undefined, number | undefined]> {
    const [k, kerr] = checkKey(key);
    if (k === undefined) return $multi(undefined, kerr, undefined);
    const [o, oerr] = check.options("acquire options", opts, ACQUIRE_OPTIONS);
    if (o === undefined) return $multi(undefined, oerr, undefined);
    let ttl = this.ttl;
    if (o.get("ttl") !== undefined) {
      const [n, err] = checkTtl(o.get("ttl"));
      if (n === undefined) return $multi(undefined, err, undefined);
      ttl = n;
    }
    let wait = this.wait;
    if (o.get("wait") !== undefined) {
      const [n, err] = checkWait(o.get("wait"));
      if (n === undefined) return $multi(undefined, err, undefined);
      wait = n;
    }

    let [tok, terr] = token.random();
    if (this.owner === "worker") {
      [tok, terr] = token.worker();
    }
    if (tok === undefined) return $multi(undefined, terr, undefined);
    const rkey = this.prefix + k;
    const deadline = ngx.now() * 1000 + wait;
    let backoff = FIRST_BACKOFF;
    while (true) {
      const [res, err, lost] = call(this.redis, scripts.ACQUIRE, rkey, tok, ttl);
      if (res === undefined) {
        if (lost) {
          // The SET may have landed: delete it if it did, so it cannot block others for a whole ttl.
          ngx.timer.at(0, cleanup, this.redis, rkey, tok, ngx.now() + ttl / 1000, 0.1);
          return $multi(undefined, err + "; acquire outcome unknown, owner-checked cleanup scheduled", undefined);
        }
        return $multi(undefined, err, undefined);
      }
      if (res === "OK") {
        const serial = ledger.record(this.dict, rkey, tok, k, ttl);
        const lease = { key: k, token: tok, ttl, locks: this, rkey, serial, released: false };
        return $multi(setmetatable(lease, leaseMt) as Lease, undefined, undefined);
      }
      const pttl = type(res) === "number" && (res as number) >= 0 ? (res as number) : undefined;
      if (wait === 0) {
        return $multi(undefined, "busy", pttl);
      }
      ngx.update_time();
      const left = deadline - ngx.now() * 1000;
      if (left <= 0) {
        return $multi(undefined, "timeout", pttl);
      }
      // Jittered exponential backoff, never past the holder's expiry nor our deadline.
      let nap = backoff / 2 + math.random() * backoff / 2;
      if (pttl !== undefined && pttl + 1 < nap) nap = pttl + 1;
      if (left < nap) nap = left;
      ngx.sleep(nap / 1000);
      backoff = math.min(backoff * 2, MAX_BACKOFF);
    }
  },

  /** Leases this nginx instance holds now (all workers), from the shared dict. */
  held(this: Locks): ledger.HeldLease[] {
    return ledger.held(this.dict);
  },

  /**
   * Run fn(...) while holding key; the lease is released whatever fn does.
   * Returns fn's results, or nil, err when the lock was not acquired or fn raised.
   */
  with(this: Locks, key: string, opts: LuaTable<string, unknown> | undefined, fn: (this: void, ...args: unknown[]) => unknown, ...args: unknown[]): LuaMultiReturn<unknown[]> {
    if (type(fn) !== "function") {
      return check.fail("with needs a function", fn);
    }
    const [lease, err, retryAfter] = this.acquire(key, opts);
    if (lease === undefined) {
      return $multi(undefined, err, retryAfter);
    }
    return finish(lease, ...protect(fn, ...args));
  },
};
const locksMt = { __index: locksMethods };

/**
 * Create a lock factory. Returns locks, or nil and an error naming the bad option.
 * @customName new
 */
export function create(this: void, opts: unknown): LuaMultiReturn<[Locks | undefined, string | undefined]> {
  if (opts === undefined) {
    return $multi(undefined, "dlock: new needs an options table with at least dict");
  }
  const [o, oerr] = check.options("dlock.new options", opts, NEW_OPTIONS);
  if (o === undefined) return $multi(undefined, oerr);

  const [dictName, derr] = check.str("dict", o.get("dict"), 256);
  if (dictName === undefined) return $multi(undefined, derr);
  const dict = ngx.shared.get(dictName);
  if (dict === undefined) {
    return check.fail("no lua_shared_dict named " + dictName + " (declare it in nginx.conf)", dictName);
  }
  const [conf, rerr] = redis.parse(o.get("redis"));
  if (conf === undefined) return $multi(undefined, rerr);

  let prefix = "dlock:";
  if (o.get("prefix") !== undefined) {
    const [p, err] = check.str("prefix", o.get("prefix"), 256);
    if (p === undefined) return $multi(undefined, err);
    prefix = p;
  }
  let owner: "random" | "worker" = "random";
  const ov = o.get("owner");
  if (ov !== undefined) {
    if (ov !== "random" && ov !== "worker") {
      return check.fail("owner must be \"random\" or \"worker\"", ov);
    }
    owner = ov;
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
  const locks = { dict, redis: conf, prefix, owner, ttl, wait };
  return $multi(setmetatable(locks, locksMt) as unknown as Locks, undefined);
}
