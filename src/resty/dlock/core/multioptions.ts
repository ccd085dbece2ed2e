// The arguments of locks:acquire_all(keys, opts), read: the list of keys and
// their Redis keys (the prefix in front: lockKey), and the options of the set,
// checked by the ACQUIRE_ALL schema (core/options.ts) with the factory's defaults.

import * as check from "./check";
import type * as lease from "./lease";
import * as options from "./options";
import * as script from "../redis/script";
import * as schema from "./schema";

const lua_type = type;
const lua_pairs = pairs;
const lua_tostring = tostring;
const math_floor = math.floor;
const check_str = check.str;
const lockKey = script.lockKey;
const MAX_KEY = options.MAX_KEY_LEN;
const renewable = options.renewable;

const allOptions = schema.compile<options.Acquire>("acquire_all options", options.ACQUIRE_ALL, { labels: "" });

/** Most keys one acquire_all takes: one script call carries them all (and their queues and fences). */
export const MAX_KEYS = 64;

/**
 * The keys of an acquire_all: a list of 1 to MAX_KEYS distinct valid keys, in
 * the caller's order; nil and the error naming the bad value otherwise.
 */
function keyList(keys: unknown): LuaMultiReturn<[string[] | undefined, string | undefined]> {
  if (lua_type(keys) !== "table") return check.fail("acquire_all needs a list of keys", keys);
  const t = keys as LuaTable<AnyNotNil, unknown>;
  const n = (t as unknown as unknown[]).length;
  if (n === 0) return check.fail("acquire_all needs at least one key", keys);
  if (n > MAX_KEYS) return check.fail("acquire_all takes at most " + lua_tostring(MAX_KEYS) + " keys", n);
  let count = 0;
  for (const [k] of lua_pairs(t)) {
    if (lua_type(k) !== "number" || (k as number) < 1 || (k as number) > n || math_floor(k as number) !== k) {
      return check.fail("acquire_all's keys must be a list (1..n), with no other fields", k);
    }
    count++;
  }
  if (count !== n) return check.fail("acquire_all's keys must be a list with no holes", keys);
  const out: string[] = [];
  const seen = new LuaTable<string, boolean>();
  for (const i of $range(1, n)) {
    const [k, kerr] = check_str("keys[" + lua_tostring(i) + "]", t.get(i), MAX_KEY);
    if (k === undefined) return $multi(undefined, kerr);
    if (seen.has(k)) return check.fail("acquire_all's keys must be distinct: keys[" + lua_tostring(i) + "] repeats an earlier key", k);
    seen.set(k, true);
    out.push(k);
  }
  return $multi(out, undefined);
}

/** What acquireAll() reads from its arguments (see there). */
export type ReadAll =
  | LuaMultiReturn<[string, ...undefined[]]>
  | LuaMultiReturn<[undefined, string[], string[], number, number, boolean, lease.OnLost | undefined]>;

/**
 * An acquire_all's arguments read: nil, then the keys, their Redis keys (the
 * prefix in front: lockKey), ttl, wait, renew and on_lost, with the factory's defaults;
 * or the error naming the bad value, alone.
 */
export function acquireAll(store: lease.Store, keys: unknown, opts: unknown): ReadAll {
  const [list, lerr] = keyList(keys);
  if (list === undefined) return $multi(lerr!);
  let ttl = store.ttl, wait = store.wait, renew = false, onLost: lease.OnLost | undefined;
  if (opts !== undefined) {
    const [v, err] = allOptions(opts);
    if (v === undefined) return $multi(err!);
    ttl = v.ttl ?? ttl;
    wait = v.wait ?? wait;
    renew = v.renew;
    onLost = v.on_lost;
    const rerr = renewable(renew, ttl);
    if (rerr !== undefined) return $multi(rerr);
  }
  const rkeys: string[] = [];
  for (const i of $range(1, list.length)) {
    const [lk, kerr] = lockKey(store.prefix, list[i - 1]!, store.prefix + list[i - 1]!, store.redis.slotted);
    if (lk === undefined) return $multi(kerr!);
    rkeys[i - 1] = lk;
  }
  return $multi(undefined, list, rkeys, ttl, wait, renew, onLost);
}
