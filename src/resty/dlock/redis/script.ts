// What a Redis script of lua-resty-dlock is (its SHA1 computed locally, its
// keys, what its reply says about a write), where the keys built on a lock
// key live, and how a per-target script is called. The scripts themselves:
// scripts.ts (locks, semaphores) and records.ts (idempotency records).

import * as check from "../core/check";
import * as tokens from "../core/token";

const sha1_bin = ngx.sha1_bin;
const lua_type = type;
const str_find = string.find;
const str_sub = string.sub;

export interface Script {
  readonly name: string;
  readonly src: string;
  readonly sha: string;
  /** How many of the arguments are keys (KEYS[1..n]); the rest is ARGV. */
  readonly keys: number;
  /**
   * For scripts whose write must reach replicas (redis.replicas): does this
   * reply say the script wrote? Then WAIT follows on the same connection.
   */
  readonly written: ((this: void, reply: RedisValue) => boolean) | undefined;
  /**
   * For scripts whose last key is the waiters' queue: the same without it.
   * While a Cluster slot migrates, Redis answers TRYAGAIN to a script whose
   * keys are not all on one node; the lock key alone still works (the queue
   * is skipped for that while, never exclusion).
   */
  readonly alone: Script | undefined;
  /**
   * For acquires (ARGV[1] the token): the owner-checked script that takes back
   * what this one may have taken for that token, should its caller be gone
   * (its request ended: a client abort) before it read the reply. Set once
   * every script exists (the end of this file).
   */
  undo: Script | undefined;
}

// Every script declares itself to Redis 7 (a shebang line with flags), so that
// Redis decides before the script runs, not at its first write:
//   WRITES   takes memory (a lock, a permit, a ticket, a record). Refused whole
//            when Redis is out of memory (maxmemory with noeviction: "OOM
//            command not allowed") or read-only (a replica: READONLY), so no
//            mode can write part of its work. Without flags Redis only refuses
//            a script's first write: the semaphore's prune counted as one, and
//            its ZADD then granted permits past maxmemory.
//   FREES    gives back (release, drop) or only moves an expiry (extend): runs
//            out of memory too (allow-oom), or a full Redis would keep every
//            held key until its ttl.
// Scripts touch only the keys they are given (KEYS), all in one Cluster slot,
// as Redis 7 requires of scripts with flags. Redis 6 does not know the shebang
// (it answers a compile error): see the README.
const WRITES = "#!lua\n";
export const FREES = "#!lua flags=allow-oom\n";

export function script(name: string, body: string, keys = 1, written?: (this: void, reply: RedisValue) => boolean, alone?: Script,
  flags = WRITES): Script {
  const src = flags + body;
  return { name, src, sha: tokens.hex(sha1_bin(src)), keys, written, alone, undo: undefined };
}

export function isOk(this: void, reply: RedisValue): boolean {
  return reply === "OK";
}

export function isOkFenced(this: void, reply: RedisValue): boolean {
  return lua_type(reply) === "table" && (reply as LuaTable<number, unknown>).get(1) === "OK";
}

export function isOne(this: void, reply: RedisValue): boolean {
  return reply === 1;
}

/** The part of a key Redis Cluster hashes: the inside of the first non-empty {...}, else the whole key. */
function hashed(key: string): string {
  const [open] = str_find(key, "{", 1, true);
  if (open !== undefined) {
    const [close] = str_find(key, "}", open + 1, true);
    if (close !== undefined && close > open + 1) {
      const inside = str_sub(key, open + 1, close - 1);  // not a tail call: see core/clock.ts
      return inside;
    }
  }
  return key;
}

/** Does the key carry a hash tag of its own (then keys built on it share its slot)? */
function tagged(key: string): boolean {
  return hashed(key) !== key;
}

/**
 * The Redis key of lock key k (rkey: prefix .. k). On a Cluster its queue,
 * fence and readers (below) must share its slot: a "}" in a key with no hash
 * tag would end their "{" .. rkey .. "}" tag early, so such a key is
 * "{prefix}key", in the prefix's slot (refused with no prefix, or a braced one).
 */
function lockKey(prefix: string, k: string, rkey: string, slotted: boolean): LuaMultiReturn<[string | undefined, string | undefined]> {
  if (!slotted || str_find(rkey, "}", 1, true)[0] === undefined || tagged(rkey)) return $multi(rkey, undefined);
  if (prefix === "" || str_find(prefix, "[{}]")[0] !== undefined) {
    return check.fail("key must not hold \"}\" outside a {hash tag} on a Redis Cluster with a prefix that is empty or " +
      "holds braces (its queue could not share its slot)", k);
  }
  return $multi("{" + prefix + "}" + k, undefined);
}

/**
 * The waiters' queue of lock key rkey. Under Cluster it must share the lock
 * key's slot: a hash tag of the whole key, unless it has one (then the suffix
 * keeps it). Elsewhere it starts with the lock key, so ACL key patterns that
 * let a user at the locks (~dlock:*) let it at their queues.
 */
function queueKey(rkey: string, slotted: boolean): string {
  return slotted && !tagged(rkey) ? "{" + rkey + "}:queue" : rkey + ":queue";
}

/**
 * The readers of lock key rkey (shared locks, rwscripts.ts): a sorted set
 * placed as queueKey places the queue, in the lock key's slot.
 */
function readersKey(rkey: string, slotted: boolean): string {
  return slotted && !tagged(rkey) ? "{" + rkey + "}:readers" : rkey + ":readers";
}

/** A backend's call: run s with rkey as KEYS[1] (more keys, then arguments, in args). */
export type Caller<C, R> = (this: void, conf: C, s: Script, rkey: string, ...args: (string | number)[]) => R;

/**
 * Run a per-target script (release, extend, drop) for one target through a
 * backend's call, with the keys and arguments batches send: KEYS[1] the key
 * (and KEYS[2] its waiters' queue for two-key scripts; its readers and then
 * its queue for three-key ones), ARGV[1] the token (and ARGV[2] ms, when given).
 */
export function forTarget<C extends { readonly slotted: boolean }, R>(call: Caller<C, R>, conf: C, s: Script, rkey: string, token: string, ms?: number): R {
  if (s.keys === 3) {
    // Readers' scripts: the lock key, its readers, its queue.
    const q = queueKey(rkey, conf.slotted);
    const r = readersKey(rkey, conf.slotted);
    if (ms === undefined) return call(conf, s, rkey, r, q, token);
    return call(conf, s, rkey, r, q, token, ms);
  }
  if (s.keys === 2) {
    const q = queueKey(rkey, conf.slotted);
    if (ms === undefined) return call(conf, s, rkey, q, token);
    return call(conf, s, rkey, q, token, ms);
  }
  if (ms === undefined) return call(conf, s, rkey, token);
  return call(conf, s, rkey, token, ms);
}

// Exported by name: this module's own uses of them are locals, not lookups in its exports table.
export { tagged, lockKey, queueKey, readersKey, hashed };
