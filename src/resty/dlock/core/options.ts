// The option tables of the lock faces, declared once (schema.ts): dlock.new,
// semaphore.new and the options of an acquire. The gateway takes some of
// these declarations for its own table (gateway/options.ts); the README's
// tables are checked against them (spec/options_spec.lua).

import * as check from "./check";
import type * as lease from "./lease";
import * as ledger from "./ledger";
import * as meter from "./meter";
import * as backend from "../redis/backend";
import * as script from "../redis/script";
import type * as redis from "../redis/client";
import * as schema from "./schema";

const lua_type = type;
const lua_tostring = tostring;
const math_floor = math.floor;
const check_str = check.str;
const lockKey = script.lockKey;

/** Longest key accepted, in bytes (before the prefix). */
const MAX_KEY = 512;
export const MAX_KEY_LEN = MAX_KEY;
/** Longest lease, in ms: one day. Longer jobs renew with lease:extend(). */
export const MAX_TTL = 86400000;
/** Most permits per key. */
export const MAX_PERMITS = 100000;

// ------------------------------------------------------------------ declarations

export const TTL: schema.IntegerSpec = {
  name: "ttl", kind: "integer", min: 1, max: MAX_TTL, unit: "a positive integer of ms", default: 30000,
};
export const WAIT: schema.IntegerSpec = {
  name: "wait", kind: "integer", min: 0, max: MAX_TTL, unit: "a non-negative integer of ms", default: 0,
};
export const PERMITS: schema.IntegerSpec = {
  name: "permits", kind: "integer", min: 1, max: MAX_PERMITS, unit: "a positive integer", required: true,
};

/** A lua_shared_dict by name: the dict itself is what the factory keeps. */
export const DICT: schema.CheckSpec = { name: "dict", kind: "check", check: check.sharedDict, required: true };

/**
 * The `redis` table (redis/client.ts declares its options), with the backend
 * that will serve it (redis/backend.ts); the eviction finding is kept in the
 * dict checked before it.
 */
export const REDIS: schema.CheckSpec = {
  name: "redis", kind: "check", doc: "local Redis",
  check: (v, out) => backend.parse(v, out.get("dict") as NgxSharedDict | undefined),
};

/** A name given: it becomes a label in metrics. Absent, the face picks one. */
export function checkName(this: void, v: unknown): LuaMultiReturn<[unknown, string | undefined]> {
  if (v === undefined) return $multi(undefined, undefined);
  return meter.checkName(v);
}

function name(dflt: string): schema.CheckSpec {
  return { name: "name", kind: "check", check: checkName, default: dflt };
}

// "" is a choice: keys shared with other clients' locks (node-redlock, redis-py) under their own names.
function prefix(dflt: string): schema.StringSpec {
  return { name: "prefix", kind: "string", maxLen: 256, empty: true, default: dflt };
}

/** What dlock.new's schema hands back. */
export interface NewLocks {
  readonly dict: NgxSharedDict;
  readonly name: string;
  readonly redis: redis.RedisConf;
  readonly prefix: string;
  readonly ttl: number;
  readonly wait: number;
  readonly owner: "random" | "worker";
  readonly fencing: boolean;
  readonly reentrant: boolean;
}

export type NewSemaphore = Omit<NewLocks, "owner" | "fencing" | "reentrant"> & { readonly permits: number };

export const NEW_LOCKS: schema.Spec[] = [
  DICT, name("dlock"), REDIS, prefix("dlock:"), TTL, WAIT,
  { name: "owner", kind: "enum", values: ["random", "worker"], default: "random" },
  { name: "fencing", kind: "boolean", default: false },
  { name: "reentrant", kind: "boolean", default: false },
];

export const NEW_SEMAPHORE: schema.Spec[] = [PERMITS, DICT, name("semaphore"), REDIS, prefix("dlock:sem:"), TTL, WAIT];

/** An acquire's own ttl and wait; absent, the factory's. */
const ACQUIRE_TTL: schema.IntegerSpec = {
  name: "ttl", kind: "integer", min: TTL.min, max: TTL.max, unit: TTL.unit, doc: "the factory's `ttl`",
};
const ACQUIRE_WAIT: schema.IntegerSpec = {
  name: "wait", kind: "integer", min: WAIT.min, max: WAIT.max, unit: WAIT.unit, doc: "the factory's `wait`",
};

const RENEW: schema.Spec = { name: "renew", kind: "boolean", default: false };
// Without renewals nothing would ever notice the loss.
const ON_LOST: schema.Spec = { name: "on_lost", kind: "function", requires: [{ option: "renew", must: "true" }] };

/** A lock's; shared takes it as one of the key's readers (redis/rwscripts.ts). */
export const ACQUIRE: schema.Spec[] = [ACQUIRE_TTL, ACQUIRE_WAIT, RENEW, ON_LOST, { name: "shared", kind: "boolean", default: false }];

function notShared(this: void, v: unknown): LuaMultiReturn<[unknown, string | undefined]> {
  if (v === undefined) return $multi(undefined, undefined);
  return check.fail("shared is an option of locks (resty.dlock), not of semaphores, whose permits are all alike", v);
}

/** A permit's: shared is refused with why (semaphores: their permits are all alike, none shared). */
const ACQUIRE_PERMIT: schema.Spec[] = [ACQUIRE_TTL, ACQUIRE_WAIT, RENEW, ON_LOST, { name: "shared", kind: "check", check: notShared }];

// (multikey) Readers of a set would need the readers' set and line of every key in one
// script, and a writer of one key waiting behind readers of a set: refused until built.
function notSharedAll(this: void, v: unknown): LuaMultiReturn<[unknown, string | undefined]> {
  if (v === undefined || v === false) return $multi(undefined, undefined);
  return check.fail("shared = true is refused by acquire_all: a set of keys is taken exclusive (take each key " +
    "with acquire(key, { shared = true }) to read it)", v);
}

/** (multikey) acquire_all's: a lock's, shared refused with why. */
export const ACQUIRE_ALL: schema.Spec[] = [ACQUIRE_TTL, ACQUIRE_WAIT, RENEW, ON_LOST, { name: "shared", kind: "check", check: notSharedAll, doc: "false" }];

export const newLocks = schema.compile<NewLocks>("dlock.new options", NEW_LOCKS, { labels: "" });
export const newSemaphore = schema.compile<NewSemaphore>("semaphore.new options", NEW_SEMAPHORE, { labels: "" });
/** lease:extend(ttl): the ttl of an acquire. */
const checkTtl = schema.one<number>(TTL);

/** An extend's ttl (ms): the one given, checked, or the lease's current one when none is. */
export function extendTtl(ttl: unknown, current: number): LuaMultiReturn<[number | undefined, string | undefined]> {
  if (ttl === undefined) return $multi(current, undefined);
  return checkTtl(ttl);
}

// ------------------------------------------------------------------ factories

/** What a factory's leases need of its options; its shared dict made ready. */
export function store(o: NewLocks | NewSemaphore): lease.Store {
  ledger.prepare(o.dict);
  return { dict: o.dict, redis: o.redis, prefix: o.prefix, ttl: o.ttl, wait: o.wait, meter: meter.make(o.dict, o.name) };
}

// ------------------------------------------------------------------ acquire

export interface Acquire {
  readonly ttl: number | undefined;
  readonly wait: number | undefined;
  readonly renew: boolean;
  readonly on_lost: lease.OnLost | undefined;
  readonly shared: boolean | undefined;
}

const lockOptions = schema.compile<Acquire>("acquire options", ACQUIRE, { labels: "" });
const permitOptions = schema.compile<Acquire>("acquire options", ACQUIRE_PERMIT, { labels: "" });
const nkeys = check.nkeys;
const TTL_MIN = ACQUIRE_TTL.min;
const TTL_MAX = ACQUIRE_TTL.max;
const WAIT_MIN = ACQUIRE_WAIT.min;
const WAIT_MAX = ACQUIRE_WAIT.max;

function within(v: unknown, min: number, max: number): boolean {
  return lua_type(v) === "number" && (v as number) >= min && (v as number) <= max && math_floor(v as number) === v;
}

/**
 * Shortest ttl a renewed lease may have, ms: the watchdog renews a third of
 * the way through a ttl and sweeps every 10 ms at the most often, a round
 * trip to Redis included; a lease of a few ms would be lost between two sweeps.
 */
const RENEW_MIN_TTL = 100;

/** nil, or why renew cannot keep a lease of this ttl alive. */
function renewable(renew: boolean, ttl: number): string | undefined {
  if (!renew || ttl >= RENEW_MIN_TTL) return undefined;
  return "dlock: renew = true needs a ttl of at least " + lua_tostring(RENEW_MIN_TTL) +
    " ms (the watchdog renews a third of the way through it), got " + check.show(ttl);
}

/** What acquire() reads from its arguments (see there): the error first, so no slot means two things. */
export type Read =
  | LuaMultiReturn<[string, ...undefined[]]>
  | LuaMultiReturn<[undefined, string, string, number, number, boolean, lease.OnLost | undefined, boolean]>;

/**
 * An acquire's arguments read: nil, then key, its Redis key (the prefix in
 * front: locks and semaphores add it here only), ttl, wait, renew, on_lost and shared
 * (locks only, `sharable`), with the factory's defaults; or the error naming
 * the bad value, alone.
 *
 * This runs on every acquire, so options that are fine are read by name and
 * counted (table.nkeys), with no table built and no walk over the caller's:
 * LuaJIT will not compile a function whose trace runs into a loop (a root
 * trace cannot hold an inner one). Anything else goes to the ACQUIRE schema,
 * which says what is wrong in the words of every other option table.
 */
export function acquire(store: lease.Store, key: unknown, opts: unknown, sharable: boolean): Read {
  const [k, kerr] = check_str("key", key, MAX_KEY);
  if (k === undefined) return $multi(kerr!);
  let rkey = store.prefix + k;
  if (sharable) {
    // Locks (not permits: a semaphore's script touches its key alone).
    const [lk, lerr] = lockKey(store.prefix, k, rkey, store.redis.slotted);
    if (lk === undefined) return $multi(lerr!);
    rkey = lk;
  }
  if (opts === undefined) return $multi(undefined, k, rkey, store.ttl, store.wait, false, undefined, false);
  if (lua_type(opts) === "table") {
    const o = opts as LuaTable<string, unknown>;
    const t = o.get("ttl");
    const w = o.get("wait");
    const r = o.get("renew");
    const onLost = o.get("on_lost");
    let sh: unknown;
    if (sharable) sh = o.get("shared");
    const found = (t !== undefined ? 1 : 0) + (w !== undefined ? 1 : 0) + (r !== undefined ? 1 : 0) + (onLost !== undefined ? 1 : 0) +
      (sh !== undefined ? 1 : 0);
    if (nkeys !== undefined && nkeys(o as unknown as LuaTable<AnyNotNil, unknown>) === found &&
      (t === undefined || within(t, TTL_MIN, TTL_MAX)) && (w === undefined || within(w, WAIT_MIN, WAIT_MAX)) &&
      (r === undefined || r === true || r === false) && (onLost === undefined || (r === true && lua_type(onLost) === "function")) &&
      (sh === undefined || sh === true || sh === false) && (r !== true || (t === undefined && store.ttl >= RENEW_MIN_TTL) || (t !== undefined && (t as number) >= RENEW_MIN_TTL))) {
      return $multi(undefined, k, rkey, t === undefined ? store.ttl : t as number, w === undefined ? store.wait : w as number,
        r === true, onLost as lease.OnLost | undefined, sh === true);
    }
  }
  const [v, err] = (sharable ? lockOptions : permitOptions)(opts);
  if (v === undefined) return $multi(err!);
  const ttl = v.ttl ?? store.ttl;
  const rerr = renewable(v.renew, ttl);
  if (rerr !== undefined) return $multi(rerr);
  return $multi(undefined, k, rkey, ttl, v.wait ?? store.wait, v.renew, v.on_lost, v.shared === true);
}

// Exported by name: this module's own uses of them are locals, not lookups in its exports table.
export { checkTtl, renewable };
