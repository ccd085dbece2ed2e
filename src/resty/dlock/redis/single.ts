// One Redis server (standalone, unix socket, or the master Sentinel names):
// one script on a pooled connection, or one script for many keys in one round
// trip (a pipeline). The cluster and Redlock backends are built on these calls.

import type { Fault, Outcome, Target } from "./backend";
import * as check from "../core/check";
import * as redis from "./client";
import * as scripts from "./scripts";

// READONLY: a master demoted by a failover; the next try goes to the new one.
const TRANSIENT = check.set("LOADING", "BUSY", "TRYAGAIN", "MASTERDOWN", "CLUSTERDOWN", "READONLY");

export function refused(conf: redis.RedisConf, err: string | undefined): LuaMultiReturn<[string, Fault]> {
  const [code] = string.match(tostring(err), "^(%u+)");
  if (code === "READONLY" || code === "LOADING") {
    redis.stale(conf);
  }
  let fault: Fault = "failed";
  if (code === "MOVED" || code === "ASK") {
    fault = "redirect";
  } else if (code !== undefined && TRANSIENT.has(code)) {
    fault = "transient";
  }
  return $multi("dlock: redis " + conf.endpoint + ": " + tostring(err), fault);
}

/**
 * The fault of a connection that could not be made (nothing was sent). Behind
 * Sentinel a master that cannot be reached is most likely being replaced: the
 * sentinels are asked again, and a waiting acquire tries again ("transient").
 */
export function unreachable(conf: redis.RedisConf): Fault {
  return conf.sentinel !== undefined ? "transient" : "failed";
}

/**
 * One script round trip on a pooled connection. Returns the reply, or nil, an
 * error that names the endpoint, and the kind of fault.
 */
export function call(conf: redis.RedisConf, s: scripts.Script, rkey: string, ...args: (string | number)[]): LuaMultiReturn<[RedisValue | undefined, string | undefined, Fault | undefined]> {
  return exec(conf, false, s, rkey, ...args);
}

/**
 * As call; `asking` sends ASKING first on the same connection (a cluster slot
 * being imported by this node serves a key only to a client that asks so).
 */
export function exec(conf: redis.RedisConf, asking: boolean, s: scripts.Script, rkey: string, ...args: (string | number)[]): LuaMultiReturn<[RedisValue | undefined, string | undefined, Fault | undefined]> {
  const [red, cerr] = redis.connect(conf);
  if (red === undefined) {
    return $multi(undefined, cerr, unreachable(conf));
  }
  let res: RedisValue | false | undefined;
  let err: string | undefined;
  if (asking) {
    [res, err] = askingRun(red, s, rkey, args);
  } else {
    [res, err] = scripts.run(red, s, rkey, ...args);
  }
  if (res !== undefined && res !== false && conf.replicas > 0 && s.written !== undefined && s.written(res)) {
    const short = replicated(red, conf, s);
    if (short !== undefined) {
      return $multi(undefined, short, "replicas");
    }
  }
  redis.done(red, conf, res !== undefined);
  if (res === undefined) {
    return $multi(undefined, "dlock: redis " + conf.endpoint + ": " + tostring(err) + " during " + s.name, "lost");
  }
  if (res === false) {
    const [msg, fault] = refused(conf, err);
    return $multi(undefined, msg, fault);
  }
  return $multi(res, undefined, undefined);
}

/**
 * ASKING holds for the one command after it, and a NOSCRIPT reply uses it up:
 * the EVAL that follows needs its own.
 */
function askingRun(red: RestyRedis, s: scripts.Script, rkey: string, args: (string | number)[]): RedisResult {
  const [ok, aerr] = red.asking();
  if (ok === undefined) return $multi(undefined, tostring(aerr) + " during ASKING");
  const [res, err] = red.evalsha(s.sha, s.keys, rkey, ...args);
  if (res === false && err !== undefined && string.sub(err, 1, 8) === "NOSCRIPT") {
    red.asking();
    return red.eval(s.src, s.keys, rkey, ...args);
  }
  return $multi(res, err);
}

/** Dict key counting writes that fewer replicas than asked acknowledged in time. */
export const SHORTFALLS = "c:redis:replica_shortfalls";

/**
 * WAIT for conf.replicas replicas to acknowledge this connection's writes.
 * Replication is asynchronous: a lock on a master that fails over before a
 * replica has it is lost, and a second holder gets in. nil when enough
 * acknowledged; else the error (the connection is handed back, or closed).
 */
export function replicated(red: RestyRedis, conf: redis.RedisConf, s: scripts.Script): string | undefined {
  const [n, err] = red.wait(conf.replicas, conf.replicas_timeout);
  redis.done(red, conf, n !== undefined);
  if (typeof n === "number" && n >= conf.replicas) {
    return undefined;
  }
  if (conf.dict !== undefined) {
    conf.dict.incr(SHORTFALLS, 1, 0);
  }
  if (typeof n === "number") {
    return string.format("dlock: redis %s: only %d of %d replica(s) acknowledged the %s within %d ms",
      conf.endpoint, n, conf.replicas, s.name, conf.replicas_timeout);
  }
  return "dlock: redis " + conf.endpoint + ": WAIT for replicas after the " + s.name + " failed: " + tostring(err);
}

// Pipelined replies: an error reply comes back as { false, "ERR ..." }, which
// no real reply of our scripts looks like.
type Piped = RedisValue | LuaTable<number, false | string>;

function isError(r: Piped | undefined): r is LuaTable<number, false | string> {
  return type(r) === "table" && (r as LuaTable<number, unknown>).get(1) === false;
}

/**
 * Queue s for the targets listed in `which` (indexes into targets), by SHA or
 * with its body: KEYS[1] the target's key (and KEYS[2] its waiters' queue,
 * for two-key scripts; its readers and its queue for three-key ones), ARGV[1] its token (and ARGV[2] ms[i], when given).
 */
function queue(red: RestyRedis, conf: redis.RedisConf, s: scripts.Script, targets: Target[], ms: number[] | undefined, which: number[], body: boolean): void {
  red.init_pipeline(which.length);
  const send = body ? red.eval : red.evalsha;
  const code = body ? s.src : s.sha;
  for (const i of which) {
    const t = targets[i - 1]!;
    let m: number | undefined;
    if (ms !== undefined) m = ms[i - 1];
    if (s.keys === 3) {
      // (rwlock) Readers' scripts: the lock key, its readers, its queue.
      const q = scripts.queueKey(t.rkey, conf.slotted);
      const r = scripts.readersKey(t.rkey, conf.slotted);
      if (m !== undefined) send.call(red, code, 3, t.rkey, r, q, t.token, m);
      else send.call(red, code, 3, t.rkey, r, q, t.token);
    } else if (s.keys === 2 && m !== undefined) {
      send.call(red, code, 2, t.rkey, scripts.queueKey(t.rkey, conf.slotted), t.token, m);
    } else if (s.keys === 2) {
      send.call(red, code, 2, t.rkey, scripts.queueKey(t.rkey, conf.slotted), t.token);
    } else if (m !== undefined) {
      send.call(red, code, 1, t.rkey, t.token, m);
    } else {
      send.call(red, code, 1, t.rkey, t.token);
    }
  }
}

/**
 * Run one per-target script (see queue) for every target in one round trip. Replies that say NOSCRIPT (scripts flushed,
 * a restart, a failover) get a second round trip with the script's body.
 */
export function batch(conf: redis.RedisConf, s: scripts.Script, targets: Target[], ms?: number[]): Outcome {
  const out: Outcome = { replies: new LuaTable(), errors: new LuaTable(), faults: new LuaTable() };
  const n = targets.length;
  if (n === 0) {
    return out;
  }
  const all: number[] = [];
  for (const i of $range(1, n)) {
    all.push(i);
  }
  const [red, cerr] = redis.connect(conf);
  if (red === undefined) {
    for (const i of all) {
      out.errors.set(i, cerr!);
      out.faults.set(i, unreachable(conf));
    }
    return out;
  }
  let todo = all;
  let body = false;
  while (todo.length > 0) {
    queue(red, conf, s, targets, ms, todo, body);
    const [replies, err] = red.commit_pipeline();
    if (replies === undefined) {
      redis.done(red, conf, false);
      for (const i of todo) {
        out.errors.set(i, "dlock: redis " + conf.endpoint + ": " + tostring(err) + " during " + s.name);
        out.faults.set(i, "lost");
      }
      return out;
    }
    const again: number[] = [];
    for (const j of $range(1, todo.length)) {
      const i = todo[j - 1]!;
      const r = replies.get(j) as Piped | undefined;
      if (isError(r)) {
        const msg = tostring(r.get(2));
        if (!body && string.sub(msg, 1, 8) === "NOSCRIPT") {
          again.push(i);
        } else {
          const [e, fault] = refused(conf, msg);
          out.errors.set(i, e);
          out.faults.set(i, fault);
        }
      } else if (r === undefined) {
        out.errors.set(i, "dlock: redis " + conf.endpoint + ": no reply during " + s.name);
        out.faults.set(i, "lost");
      } else {
        out.replies.set(i, r);
      }
    }
    todo = again;
    body = true;
  }
  if (conf.replicas > 0 && s.written !== undefined) {
    const wrote: number[] = [];
    for (const [i, r] of out.replies) {
      if (s.written(r)) wrote.push(i);
    }
    if (wrote.length > 0) {
      // One WAIT covers every write of the pipeline.
      const short = replicated(red, conf, s);
      if (short !== undefined) {
        for (const i of wrote) {
          out.replies.delete(i);
          out.errors.set(i, short);
          out.faults.set(i, "replicas");
        }
      }
      return out;
    }
  }
  redis.done(red, conf, true);
  return out;
}
