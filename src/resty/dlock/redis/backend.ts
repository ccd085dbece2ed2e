// The one way into Redis: run this script for this key (call), or this script
// for many keys (batch). Where the key lives is the backend's business, chosen
// once per configuration (parse), never per call:
//   standalone, unix, sentinel   one server (single.ts; Sentinel only changes its address)
//   cluster                      the master of the key's slot (cluster.ts)
//   redlock                      a majority of independent masters (quorum.ts)
// Each talks to its servers the one way (pipeline.ts and roundtrip.ts over
// connection.ts), and every backend answers with the same outcomes and faults.

import * as redis from "./client";
import * as scripts from "./scripts";
import * as cluster from "./cluster";
import type * as command from "./command";
import * as quorum from "./quorum";
import * as roundtrip from "./roundtrip";
import * as replicas from "./replicas";
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

/** A call put into a pipeline (post), its outcome filled in by the sender. */
export type Job = command.Job;
/** Who a posted call reports its outcome to. */
export type Posted = command.Posted;

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

/** What a topology cannot do safely (see refuses). */
export type Refusal = "fencing" | "semaphore" | "idempotency" | "rate" | "shared";

/** A topology: one object per kind, shared by every configuration of that kind. */
export interface Backend {
  /** Run script s with rkey as KEYS[1] (more keys, then arguments, follow in args). */
  readonly call: (this: void, conf: redis.RedisConf, s: scripts.Script, rkey: string, ...args: (string | number)[]) => CallResult;
  /** Put s for rkey into the next pipeline to its server without waiting (pipeline.post); nil when it cannot go that way. */
  readonly post: (this: void, conf: redis.RedisConf, s: scripts.Script, rkey: string, ...args: (string | number)[]) => Job | undefined;
  /** Run the single-key script s (ARGV[1] the token, ARGV[2] ms[i] when given) for every target, in as few round trips as it can. */
  readonly batch: (this: void, conf: redis.RedisConf, s: scripts.Script, targets: Target[], ms?: number[]) => Outcome;
  /** How long a lease taken for ttl ms can be trusted, in ms. */
  readonly validity: (this: void, ttl: number) => number;
  /** Waiters of a lock line up in Redis (a queue next to the key); else they take turns. */
  readonly queues: boolean;
  /**
   * A release's "deleted" answer proves the key was still the lease's when it
   * went: one server holds the key. Not a quorum's, whose 1 says only that
   * some master deleted it, which a successor holding a majority does not rule out.
   */
  readonly confirmsOwner: boolean;
  /** The error new() returns for what this topology cannot do safely. */
  readonly refuses: LuaTable<Refusal, string>;
  /** The key of the fence counter of lock key rkey (the acquire script touches both). */
  readonly fenceKey: (this: void, rkey: string) => string;
  /** Counters every worker adds to, for metrics: a kind and per label (a node, the endpoint) a value. */
  readonly shared: (this: void, conf: redis.RedisConf, d: NgxSharedDict) => LuaMultiReturn<[string, LuaTable<string, number>] | [undefined, undefined]>;
  /** What status pages show beyond the settings (per worker). */
  readonly describe: (this: void, conf: redis.RedisConf) => LuaTable<string, unknown> | undefined;
  /** The servers it talks to now, each a configuration of its own (for specs and status). */
  readonly servers: (this: void, conf: redis.RedisConf) => redis.RedisConf[];
}

const BY_TOPOLOGY = new LuaTable<redis.Topology, Backend>();
BY_TOPOLOGY.set("standalone", single.backend);
BY_TOPOLOGY.set("unix", single.backend);
BY_TOPOLOGY.set("sentinel", single.backend);
BY_TOPOLOGY.set("cluster", cluster.backend);
BY_TOPOLOGY.set("redlock", quorum.backend);

/** Status pages list every configuration parsed, also those made without a factory (redis.parse). */
function backendOf(conf: redis.RedisConf): Backend {
  return conf.backend ?? BY_TOPOLOGY.get(conf.topology);
}

/** The `redis` option table of a factory (redis.parse), with the backend that will serve it. */
export function parse(v: unknown, dict?: NgxSharedDict): LuaMultiReturn<[redis.RedisConf | undefined, string | undefined]> {
  const [conf, err] = redis.parse(v, dict);
  if (conf === undefined) return $multi(undefined, err);
  (conf as { backend: Backend | undefined }).backend = BY_TOPOLOGY.get(conf.topology);
  return $multi(conf, undefined);
}

/** Run script s with rkey as KEYS[1] (more keys, then arguments, follow in args). */
export function call(conf: redis.RedisConf, s: scripts.Script, rkey: string, ...args: (string | number)[]): CallResult {
  return conf.backend!.call(conf, s, rkey, ...args);
}

/**
 * Run the single-key script s (ARGV[1] the token, ARGV[2] ms[i] when given) for
 * every target, in as few round trips as the topology allows.
 */
export function batch(conf: redis.RedisConf, s: scripts.Script, targets: Target[], ms?: number[]): Outcome {
  return conf.backend!.batch(conf, s, targets, ms);
}

/** Run a per-target script (release, extend, drop) for one target, as batch() would. */
export function own(conf: redis.RedisConf, s: scripts.Script, rkey: string, token: string, ms?: number): CallResult {
  return scripts.forTarget(conf.backend!.call, conf, s, rkey, token, ms);
}

/**
 * Put script s for rkey into the next pipeline to its server, without waiting
 * for the reply (see pipeline.post), from any phase: the call, whose `post`
 * hears its outcome, or nil when it cannot go that way (then call() it from a timer).
 */
export function post(conf: redis.RedisConf, s: scripts.Script, rkey: string, ...args: (string | number)[]): Job | undefined {
  return conf.backend!.post(conf, s, rkey, ...args);
}

/** As post(), for a per-target script (a release) for one target, with the keys and arguments own() sends. */
export function postOwn(conf: redis.RedisConf, s: scripts.Script, rkey: string, token: string): Job | undefined {
  return scripts.forTarget(conf.backend!.post, conf, s, rkey, token);
}

/** The key of the fence counter of lock key rkey. */
export function fenceKey(conf: redis.RedisConf, rkey: string): string {
  return conf.backend!.fenceKey(rkey);
}

/** How long a lease taken for ttl ms can be trusted, in ms (Redlock subtracts its allowance for clock drift). */
export function validity(conf: redis.RedisConf, ttl: number): number {
  return conf.backend!.validity(ttl);
}

/** Do waiters of a lock line up in Redis? (Not under Redlock: a queue on every master has no one order.) */
export function queues(conf: redis.RedisConf): boolean {
  return conf.backend!.queues;
}

/** Does a release's "deleted" answer prove the key was still the lease's? (Not a Redlock quorum's.) */
export function confirmsOwner(conf: redis.RedisConf): boolean {
  return conf.backend!.confirmsOwner;
}

/** What a topology cannot do safely, as the error new() returns; nil when it can. */
export function refuses(conf: redis.RedisConf, what: Refusal): string | undefined {
  return conf.backend!.refuses.get(what);
}

/** The dict key counting writes that fewer replicas than asked acknowledged in time. */
export const SHORTFALLS = replicas.SHORTFALLS;

/**
 * Counters every worker adds to, for metrics: per label (a node, or the
 * endpoint itself), a value. Cluster: redirects followed and the age of the
 * newest slot map read; Redlock: failed calls per master.
 */
export function shared(conf: redis.RedisConf): LuaMultiReturn<[string, LuaTable<string, number>] | [undefined, undefined]> {
  const d = conf.dict;
  if (d === undefined) return $multi(undefined, undefined);
  return backendOf(conf).shared(conf, d);
}

/** What status pages show of this endpoint's topology beyond its settings (per worker). */
export function describe(conf: redis.RedisConf): LuaTable<string, unknown> | undefined {
  return backendOf(conf).describe(conf);
}
