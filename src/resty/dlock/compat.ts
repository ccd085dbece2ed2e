// resty.dlock.compat: lua-resty-lock's API, fleet-wide. Code written for the
// in-nginx lock changes one require and then excludes every nginx sharing the
// Redis, not only the workers of one:
//
//   local resty_lock = require "resty.dlock.compat"   -- was "resty.lock"
//   local lock, err = resty_lock:new("my_locks", { exptime = 10, timeout = 2 })
//   local elapsed, err = lock:lock(key)      -- 0 when taken at once, "timeout" when waiting ran out
//   ...
//   lock:unlock()
//
// The shared dict named in new() keeps this nginx's bookkeeping; Redis decides
// who holds a key. Redis is the local one unless configure() says otherwise,
// once, in init_by_lua. One lock factory per dict serves every object, since
// lua-resty-lock's users make an object per request.

import * as dlock from "../dlock";
import * as check from "./core/check";
import * as options from "./core/options";
import * as schema from "./core/schema";
import * as lease from "./core/lease";
import * as letgo from "./core/letgo";

import * as version from "./version";
import * as clock from "./core/clock";
import * as token from "./core/token";
import * as retry from "./core/retry";
import * as meter from "./core/meter";
export const _VERSION = version.VERSION;

const lua_type = type;
const lua_tostring = tostring;
const lua_setmetatable = setmetatable;
const math_floor = math.floor;
const math_max = math.max;
const math_min = math.min;
const str_format = string.format;
const ngx_shared = ngx.shared;
const clock_now = clock.now;
const ngx_update_time = ngx.update_time;
const sha1_bin = ngx.sha1_bin;
const hex = token.hex;
const not_now = retry.notNow;
const meter_refused = meter.refused;
const phase_error = lease.phaseError;
const let_go = letgo.letGo;

/** Longest key the core takes as it is; lua-resty-lock's shared dict takes up to SHDICT_MAX_KEY. */
const MAX_KEY_LEN = options.MAX_KEY_LEN;
const SHDICT_MAX_KEY = 65535;

interface Settings {
  readonly redis: unknown;
  readonly prefix: string;
  readonly name: string;
}

/** The lock of one object: lua-resty-lock's fields are its own business too. */
interface CompatLock {
  readonly _locks: dlock.Locks;
  readonly _exptime: number;
  /** Reused acquire options: first a try without waiting, then the wait budget. */
  readonly _try: LuaTable<string, unknown>;
  readonly _wait: LuaTable<string, unknown> | undefined;
  _lease: lease.Lease | undefined;
}

/** lua-resty-lock's seconds (0.001 s precision) as ms; its default when absent. */
function seconds(name: string, dflt: number, min: number): (this: void, v: unknown) => LuaMultiReturn<[unknown, string | undefined]> {
  return (v: unknown) => {
    if (v === undefined) return $multi(dflt, undefined);
    if (lua_type(v) !== "number" || (v as number) !== (v as number) || (v as number) < min || (v as number) * 1000 > dlock.MAX_TTL) {
      return check.fail(str_format("%s must be a number of seconds from %s to %d", name, min, dlock.MAX_TTL / 1000), v);
    }
    return $multi(math_floor((v as number) * 1000 + 0.5), undefined);
  };
}

/** lua-resty-lock's polling steps: checked, not used (a waiter is woken when the key is released). */
function polling(name: string): (this: void, v: unknown) => LuaMultiReturn<[unknown, string | undefined]> {
  return (v: unknown) => {
    // NaN is a number, and not positive.
    if (v !== undefined && (lua_type(v) !== "number" || v !== v || (v as number) <= 0)) return check.fail(name + " must be a positive number", v);
    return $multi(v, undefined);
  };
}

/** new(dict, opts): exptime and timeout come back in ms. */
export const NEW: schema.Spec[] = [
  { name: "exptime", kind: "check", check: seconds("exptime", 30000, 0.001), doc: "30" },
  { name: "timeout", kind: "check", check: seconds("timeout", 5000, 0), doc: "5" },
  { name: "step", kind: "check", check: polling("step"), doc: "not used" },
  { name: "ratio", kind: "check", check: polling("ratio"), doc: "not used" },
  { name: "max_step", kind: "check", check: polling("max_step"), doc: "not used" },
];

/** configure(opts): where the locks live. */
export const CONFIGURE: schema.Spec[] = [
  options.REDIS,
  { name: "prefix", kind: "string", maxLen: 256, empty: true, default: "dlock:compat:" },
  { name: "name", kind: "check", check: options.checkName, default: "compat" },
];

interface NewOptions {
  readonly exptime: number;
  readonly timeout: number;
}

interface Configured {
  readonly prefix: string;
  readonly name: string;
}

const newOptions = schema.compile<NewOptions>("compat new options", NEW, { labels: "" });
const configureOptions = schema.compile<Configured>("compat.configure options", CONFIGURE, { labels: "" });

let settings: Settings = { redis: undefined, prefix: "dlock:compat:", name: "compat" };
/** A factory per shared dict, made at the first new() that names it. */
let factories = new LuaTable<string, dlock.Locks>();

/**
 * Where the locks live, for every object made after it: redis (as for dlock.new),
 * prefix (default "dlock:compat:"), name (metrics; default "compat"). true, or nil, err.
 */
export function configure(this: void, opts?: unknown): LuaMultiReturn<[true | undefined, string | undefined]> {
  // Checked now, so that a mistake shows in init_by_lua rather than at the first lock.
  const [o, err] = configureOptions(opts);
  if (o === undefined) return $multi(undefined, err);
  // The factories get the table as given: dlock.new checks it again, with their dict.
  // No table at all (configure()) means every default, as the schema took it.
  let redis: unknown;
  if (lua_type(opts) === "table") redis = (opts as LuaTable<string, unknown>).get("redis");
  settings = { redis, prefix: o.prefix, name: o.name };
  factories = new LuaTable();
  return $multi(true as const, undefined);
}

function makeFactory(dictName: string): LuaMultiReturn<[dlock.Locks | undefined, string | undefined]> {
  const o = new LuaTable<string, unknown>();
  o.set("dict", dictName);
  o.set("redis", settings.redis);
  o.set("prefix", settings.prefix);
  o.set("name", settings.name);
  return dlock.create(o);
}


/** expire()'s time, as exptime is checked (its default is the lock's own exptime). */
const expireSeconds = seconds("time", 0, 0.001);

const methods = {
  /**
   * Take key, waiting up to the timeout: the seconds waited (0 when taken at once),
   * or nil and "timeout", "locked" (this object holds a key already), "nil key",
   * or "dlock: ..." (Redis failed, bad key).
   */
  lock(this: CompatLock, key: unknown): LuaMultiReturn<[number | undefined, string | undefined]> {
    if (key === undefined) return $multi(undefined, "nil key");
    if (this._lease !== undefined) return $multi(undefined, "locked");
    // lua-resty-lock keys its shared dict, which takes a number as its string.
    if (lua_type(key) === "number") key = lua_tostring(key);
    if (lua_type(key) === "string" && (key as string).length > MAX_KEY_LEN) {
      const n = (key as string).length;
      if (n > SHDICT_MAX_KEY) {
        return $multi(undefined, "dlock: key must be at most " + lua_tostring(SHDICT_MAX_KEY) + " bytes, got " + lua_tostring(n) + " bytes");
      }
      // A cache key built from a URI can be long: it is held under its digest,
      // a Redis key of fixed length. Keys the core takes keep the Redis key they always had.
      key = "sha1:" + hex(sha1_bin(key as string));
    }
    // Its busy answer is not metered: the wait that follows is the outcome (or the refusal, counted below).
    let [l, err] = this._locks._try(key as string, this._try);
    if (l !== undefined) {
      this._lease = l;
      return $multi(0, undefined);
    }
    if (err === "busy" && this._wait === undefined) meter_refused(this._locks._store.meter, "busy");
    // Taken, or a Redis that answered "not now" (BUSY, LOADING, a failover):
    // either is waited out within the timeout, as a waiting acquire does.
    if ((err === "busy" || not_now(err)) && this._wait !== undefined) {
      ngx_update_time();
      const t0 = clock_now();
      [l, err] = this._locks.acquire(key as string, this._wait);
      if (l !== undefined) {
        this._lease = l;
        ngx_update_time();
        // Never 0: callers read 0 as "nobody held it" (and skip re-checking their cache).
        return $multi(math_max(0.001, clock_now() - t0), undefined);
      }
    }
    if (err === "busy" || err === "timeout") return $multi(undefined, "timeout");
    return $multi(undefined, err);
  },

  /**
   * Release the key: 1, or nil and "unlocked" (nothing held), "not_owner" (it ran out, taken since or not),
   * "dlock: ..." (Redis failed: call again). Where nginx allows no cosockets (log, header filter): 1 at
   * once, the release on its way (core/letgo.ts).
   */
  unlock(this: CompatLock): LuaMultiReturn<[number | undefined, string | undefined]> {
    const l = this._lease;
    if (l === undefined) return $multi(undefined, "unlocked");
    if (phase_error("release") !== undefined) {
      // lua-resty-lock's unlock works in any phase, the log phase too, where a
      // request ends however it ends: here the release goes without waiting.
      this._lease = undefined;
      let_go(l);
      return $multi(1, undefined);
    }
    const [ok, err] = l.release();
    if (ok) {
      this._lease = undefined;
      return $multi(1, undefined);
    }
    // Redis did not answer: the key may still be ours, so unlock() can be called again.
    if (err === "not_owner") this._lease = undefined;
    return $multi(undefined, err);
  },

  /** Reset the held key's expiry to time seconds (default: exptime): true, or nil and "unlocked", "not_owner", "dlock: ...". */
  expire(this: CompatLock, time: unknown): LuaMultiReturn<[true | undefined, string | undefined]> {
    const l = this._lease;
    if (l === undefined) return $multi(undefined, "unlocked");
    let ms = this._exptime;
    if (time !== undefined) {
      const [given, terr] = expireSeconds(time);
      if (terr !== undefined) return $multi(undefined, terr);
      ms = given as number;
    }
    const [ok, err] = l.extend(ms);
    // Held on to even when it is no longer ours, as lua-resty-lock keeps its key after a failed expire:
    // unlock() says what became of it and ends it.
    if (!ok) return $multi(undefined, err);
    return $multi(true as const, undefined);
  },
};
const mt = { __index: methods };

/**
 * lock:new(dict_name, opts): a lock object, or nil, err ("dictionary not found",
 * or "dlock: ..." naming a bad option). opts: exptime (s, default 30), timeout
 * (s, default 5, at most exptime), step, ratio, max_step (checked, not used:
 * waiters are woken when the key is released instead of polling).
 * @customName new
 */
export function create(this: void, _module: unknown, dictName: unknown, opts?: unknown): LuaMultiReturn<[CompatLock | undefined, string | undefined]> {
  if (lua_type(dictName) !== "string" || ngx_shared.get(dictName as string) === undefined) {
    return $multi(undefined, "dictionary not found");
  }
  const [o, oerr] = newOptions(opts);
  if (o === undefined) return $multi(undefined, oerr);
  const exptime = o.exptime;
  const timeout = o.timeout;
  let locks = factories.get(dictName as string);
  if (locks === undefined) {
    const [f, ferr] = makeFactory(dictName as string);
    if (f === undefined) return $multi(undefined, ferr);
    factories.set(dictName as string, f);
    locks = f;
  }
  const ttl = exptime;
  // lua-resty-lock never waits longer than the lock it waits for lives.
  const wait = math_min(timeout, ttl);
  const tryOpts = new LuaTable<string, unknown>();
  tryOpts.set("ttl", ttl);
  tryOpts.set("wait", 0);
  let waitOpts: LuaTable<string, unknown> | undefined;
  if (wait > 0) {
    waitOpts = new LuaTable();
    waitOpts.set("ttl", ttl);
    waitOpts.set("wait", wait);
  }
  const lock: CompatLock = { _locks: locks, _exptime: exptime, _try: tryOpts, _wait: waitOpts, _lease: undefined };
  return $multi(lua_setmetatable(lock, mt) as CompatLock, undefined);
}
