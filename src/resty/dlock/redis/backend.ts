// The one way into Redis: run this script for this key (call), or this script
// for many keys (batch). Where the key lives is the topology's business:
//   standalone, unix, sentinel   one server (backend/single.ts; Sentinel only changes its address)
//   cluster                      the master of the key's slot (backend/cluster.ts)
//   redlock                      a majority of independent masters (backend/quorum.ts)
// Every implementation answers with the same outcomes and the same faults.

import * as redis from "./client";
import * as scripts from "./scripts";
import * as cluster from "./cluster";
import * as quorum from "./quorum";
import * as pipeline from "./pipeline";
import * as single from "./single";

/**
 * How a failed call failed. "lost": the request may have reached Redis but the
 * reply did not come back (its outcome is unknown). "transient": Redis said it
 * cannot serve right now (loading its data set, busy script, failover, slot
 * migration) and did nothing; worth another try while waiting. "failed":
 * anything else (the request never left, or Redis refused it). "replicas": the
 * script wrote, but fewer replicas than redis.replicas acknowledged it in time.
 * "redirect": a cluster node sent the key elsewhere (MOVED/ASK); only seen
 * outside the cluster backend, when a standalone configuration names a cluster node.
 */
export type Fault = "lost" | "transient" | "failed" | "replicas" | "redirect";

/** A key and the token that owns it: what an owner-checked script needs (leases and orphans are targets). */
export interface Target {
  readonly rkey: string;
  readonly token: string;
}

/**
 * Per target of a batch, aligned with the list: the reply, or (when it is nil)
 * the error and the kind of fault.
 */
export interface Outcome {
  readonly replies: LuaTable<number, RedisValue>;
  readonly errors: LuaTable<number, string>;
  readonly faults: LuaTable<number, Fault>;
}

export type CallResult = LuaMultiReturn<[RedisValue | undefined, string | undefined, Fault | undefined]>;

/** Run script s with rkey as KEYS[1] (more keys, then arguments, follow in args). */
export function call(conf: redis.RedisConf, s: scripts.Script, rkey: string, ...args: (string | number)[]): CallResult {
  const t = conf.topology;
  if (t === "cluster") return cluster.call(conf, s, rkey, ...args);
  if (t === "redlock") return quorum.call(conf, s, rkey, ...args);
  return pipeline.call(conf, s, rkey, ...args);
}

/**
 * Run the single-key script s (ARGV[1] the token, ARGV[2] ms[i] when given) for
 * every target, in as few round trips as the topology allows.
 */
export function batch(conf: redis.RedisConf, s: scripts.Script, targets: Target[], ms?: number[]): Outcome {
  const t = conf.topology;
  if (t === "cluster") return cluster.batch(conf, s, targets, ms);
  if (t === "redlock") return quorum.batch(conf, s, targets, ms);
  return single.batch(conf, s, targets, ms);
}

/** Run a per-target script (release, extend, drop) for one target, as batch() would. */
export function own(conf: redis.RedisConf, s: scripts.Script, rkey: string, token: string, ms?: number): CallResult {
  return scripts.forTarget(call, conf, s, rkey, token, ms);
}

/**
 * The key of the fence counter of lock key rkey. The acquire script touches
 * both, so under Cluster they must share a slot: a hash tag of the whole lock
 * key, unless it has one already (then the suffix keeps it). Elsewhere the
 * counter stays where earlier versions kept it, so fences never go back.
 */
export function fenceKey(conf: redis.RedisConf, rkey: string): string {
  if (conf.topology === "cluster" && !scripts.tagged(rkey)) {
    return "{" + rkey + "}:fence";
  }
  return rkey + ":fence";
}

/**
 * How long a lease taken at `sent` for ttl ms can be trusted, in ms. Redlock
 * subtracts its allowance for clock drift between the masters.
 */
export function validity(conf: redis.RedisConf, ttl: number): number {
  if (conf.topology === "redlock") return ttl - quorum.drift(ttl);
  return ttl;
}

/**
 * What a topology cannot do safely, as the error new() returns; nil when it can.
 * A fence counter per Redlock master is not monotonic across majorities (two
 * majorities share one master, but not its counter), and a counting semaphore
 * per master does not bound holders (three holders can each own a majority of
 * permits on three masters with two permits each).
 */
export function refuses(conf: redis.RedisConf, what: "fencing" | "semaphore" | "idempotency"): string | undefined {
  if (conf.topology !== "redlock") return undefined;
  if (what === "fencing") {
    return "dlock: fencing is refused with redis.redlock: fence counters on independent masters do not grow " +
      "monotonically across majorities (use redis.sentinel or redis.cluster with replicas for fenced locks)";
  }
  if (what === "semaphore") {
    return "dlock: semaphores (and concurrency guards) are refused with redis.redlock: counting permits on each " +
      "master does not bound the holders of a majority";
  }
  return "dlock: idempotency guards are refused with redis.redlock: a stored response needs one place to live";
}

/** The dict key counting writes that fewer replicas than asked acknowledged in time. */
export const SHORTFALLS = single.SHORTFALLS;

/**
 * Counters every worker adds to, for metrics: per label (a node, or the
 * endpoint itself), a value. Cluster: redirects followed and the age of the
 * newest slot map read; Redlock: failed calls per master.
 */
export function shared(conf: redis.RedisConf): LuaMultiReturn<[string, LuaTable<string, number>] | [undefined, undefined]> {
  const d = conf.dict;
  if (d === undefined) return $multi(undefined, undefined);
  const t = new LuaTable<string, number>();
  if (conf.topology === "cluster") {
    const [n] = d.get(cluster.REDIRECTS + conf.endpoint);
    t.set("redirects", type(n) === "number" ? n as number : 0);
    const [at] = d.get(cluster.MAP_AT + conf.endpoint);
    if (type(at) === "number") t.set("slot_map_age", ngx.now() - (at as number));
    return $multi("cluster", t);
  }
  if (conf.topology === "redlock") {
    for (const node of conf.nodes!) {
      const [n] = d.get(quorum.NODE_FAILURES + node.endpoint);
      t.set(node.endpoint, type(n) === "number" ? n as number : 0);
    }
    return $multi("redlock", t);
  }
  return $multi(undefined, undefined);
}

/** What status pages show of this endpoint's topology beyond its settings (per worker). */
export function describe(conf: redis.RedisConf): LuaTable<string, unknown> | undefined {
  if (conf.topology === "cluster") return cluster.describe(conf);
  if (conf.topology === "redlock") return quorum.describe(conf);
  return undefined;
}
