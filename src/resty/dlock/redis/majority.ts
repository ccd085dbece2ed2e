// What a Redlock quorum decides from the answers of its masters (quorum.ts
// collects them): an acquire counts when a majority took the key within its
// validity time, a release once a majority answered, an extend on a majority.

import type { CallResult, Fault } from "./backend";
import type * as redis from "./client";
import * as pipeline from "./pipeline";
import * as scripts from "./scripts";
import * as clock from "../core/clock";

const pipelined = pipeline.call;
const clock_now = clock.now;
const update_time = ngx.update_time;
const lua_type = type;
const lua_tostring = tostring;
const math_floor = math.floor;
const str_format = string.format;
const tbl_concat = table.concat;
const tbl_sort = table.sort;

/** The allowance for clock drift between masters over a ttl, in ms (redis.io: 1 % plus 2 ms). */
function drift(ttl: number): number {
  return math_floor(ttl * 0.01) + 2;
}

/** Per master, aligned with conf.nodes: a reply, or the error and fault. */
export interface Votes {
  readonly replies: LuaTable<number, RedisValue>;
  readonly errors: LuaTable<number, string>;
  readonly faults: LuaTable<number, Fault>;
}

function majority(conf: redis.RedisConf): number {
  return math_floor(conf.nodes!.length / 2) + 1;
}

function nowMs(): number {
  update_time();
  return clock_now() * 1000;
}

function errorsOf(conf: redis.RedisConf, v: Votes): string {
  const list: string[] = [];
  for (const i of $range(1, conf.nodes!.length)) {
    const e = v.errors.get(i);
    if (e !== undefined) list.push(e);
  }
  return tbl_concat(list, "; ");
}

/** The fault of a decision that failed for want of answers: "lost" when any master may have acted. */
function faultOf(conf: redis.RedisConf, v: Votes): Fault {
  for (const i of $range(1, conf.nodes!.length)) {
    if (v.faults.get(i) === "lost") return "lost";
  }
  return "failed";
}

function count(conf: redis.RedisConf, v: Votes, want: RedisValue): LuaMultiReturn<[number, number]> {
  let yes = 0;
  let answered = 0;
  for (const i of $range(1, conf.nodes!.length)) {
    const r = v.replies.get(i);
    if (r !== undefined) {
      answered = answered + 1;
      if (r === want) yes = yes + 1;
    }
  }
  return $multi(yes, answered);
}

/** Release (1: deleted somewhere, 0: not ours anywhere) once a majority answered. */
export function decideRelease(conf: redis.RedisConf, v: Votes): CallResult {
  const [deleted, answered] = count(conf, v, 1);
  if (answered >= majority(conf)) return $multi(deleted > 0 ? 1 : 0, undefined, undefined);
  return $multi(undefined, "dlock: redis " + conf.endpoint + ": only " + lua_tostring(answered) + " of " + lua_tostring(conf.nodes!.length) +
    " masters answered the release (" + errorsOf(conf, v) + ")", faultOf(conf, v));
}

/** Extend: 1 on a majority within the time; 0 when a majority can no longer say yes. */
export function decideExtend(conf: redis.RedisConf, v: Votes, ttl: number, started: number): CallResult {
  const [extended, answered] = count(conf, v, 1);
  const n = conf.nodes!.length;
  const elapsed = nowMs() - started;
  if (extended >= majority(conf) && elapsed + drift(ttl) < ttl) return $multi(1, undefined, undefined);
  if (answered - extended > n - majority(conf)) return $multi(0, undefined, undefined);
  if (extended >= majority(conf)) {
    // A majority said yes, too late: the keys of the first to say it may have expired meanwhile.
    return $multi(undefined, str_format("dlock: redis %s: extended on a majority, but only after %d ms of a %d ms ttl",
      conf.endpoint, elapsed, ttl), "transient");
  }
  return $multi(undefined, "dlock: redis " + conf.endpoint + ": extended on " + lua_tostring(extended) + " of " + lua_tostring(n) +
    " masters, a majority is " + lua_tostring(majority(conf)) + " (" + errorsOf(conf, v) + ")", faultOf(conf, v));
}

/**
 * Acquire: "OK" when a majority took the key in time. Otherwise the masters
 * that took it give it back, and the answer is "busy" when a master that
 * answered holds the key for someone else (the ms until enough of those keys
 * expire that the masters that answered could make a majority); with fault
 * "lost" when a master that did not answer may hold our key, or one that took
 * it could not give it back (the caller has it cleaned up, owner-checked,
 * everywhere). Else an error: "lost" as just said, "transient" when too few
 * masters could be reached or it took too long (a waiting acquire tries again).
 */
export function decideAcquire(conf: redis.RedisConf, v: Votes, rkey: string, tok: string, ttl: number, started: number): CallResult {
  const n = conf.nodes!.length;
  const need = majority(conf);
  const [took] = count(conf, v, "OK");
  const elapsed = nowMs() - started;
  if (took >= need && elapsed + drift(ttl) < ttl) return $multi("OK", undefined, undefined);

  let undone = true;
  let unknown = false;
  for (const i of $range(1, n)) {
    if (v.replies.get(i) === "OK") {
      const [r] = pipelined(conf.nodes![i - 1]!, scripts.RELEASE, rkey, tok);
      if (r === undefined) undone = false;
    } else if (v.faults.get(i) === "lost") {
      unknown = true;
    }
  }
  const pttls: number[] = [];
  for (const i of $range(1, n)) {
    const r = v.replies.get(i);
    if (lua_type(r) === "number") pttls.push(r as number);
  }
  if (pttls.length > 0 && took < need) {
    // Someone else holds the key where masters answered, and no majority said
    // yes: busy, whatever the silent masters did (a key one of them took for
    // us is a minority's, never a lease, and is cleaned up). Telling "lost"
    // here ended a contended acquire at once (a waiter's too) while one master
    // was paused, and a dedup guard with on_error = allow let the duplicate in.
    tbl_sort(pttls);
    let expire = need - took;
    if (expire > pttls.length) expire = pttls.length;
    const after = pttls[expire - 1]!;
    if (!undone || unknown) return $multi(after, undefined, "lost");
    return $multi(after, undefined, undefined);
  }
  if (!undone || unknown) {
    return $multi(undefined, "dlock: redis " + conf.endpoint + ": took the key on " + lua_tostring(took) + " of " + lua_tostring(n) +
      " masters, and some may still hold it (" + errorsOf(conf, v) + ")", "lost");
  }
  if (took >= need) {
    return $multi(undefined, str_format("dlock: redis %s: took the key on a majority, but only after %d ms of a %d ms ttl",
      conf.endpoint, elapsed, ttl), "transient");
  }
  return $multi(undefined, "dlock: redis " + conf.endpoint + ": took the key on " + lua_tostring(took) + " of " + lua_tostring(n) +
    " masters, a majority is " + lua_tostring(need) + " (" + errorsOf(conf, v) + ")", "transient");
}

/**
 * The Redlock extend of a valid lease (KEYS[1] lock key, ARGV[1] token,
 * ARGV[2] ttl ms): 1 when our key was re-expired, or put back where it is
 * gone (a master restarted without persistence, or its clock ran ahead); 0
 * when someone else's key is there. Re-expiring alone, restarts of different
 * masters added up over a lease's life until a second holder got a majority.
 * Sent only while the lease is valid (core/settle.ts extendScript): a majority
 * holds our key then, so nobody else can hold it where it is gone. allow-oom
 * (FREES): a full master must not refuse to renew the keys it holds; the one
 * it puts back is a small string.
 */
const EXTEND_RESTORING = scripts.script("redlock extend", `
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
if v then
  return 0
end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 1
end
return 0
`, 1, scripts.isOne, undefined, scripts.FREES);

// Exported by name: this module's own uses of them are locals, not lookups in its exports table.
export { drift, majority, nowMs, EXTEND_RESTORING };
