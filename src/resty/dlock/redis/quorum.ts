// Redlock over N independent masters (redis.redlock), as the algorithm on
// redis.io describes it: the script runs on every master at once (each on its
// master's auto-pipeline, all sent before any reply is read, so a paused
// master costs its timeout once, not once per master), and the outcome is the
// majority's. An acquire counts only when a majority
// took the key within the validity time (ttl minus the time it took minus the
// allowance for clock drift); otherwise it is undone, owner-checked, on every
// master. A release goes to every master; an extend counts on a majority (and,
// while the lease is valid, puts the key back where a master lost it: majority.ts).
// Only the plain lock runs here: a fence counter per master is not monotonic
// across majorities, and counting semaphores per master do not bound holders,
// so factories refuse those at new() (see kindSupported).

import type { Backend, CallResult, Fault, Outcome, Refusal, Target } from "./backend";
import type * as redis from "./client";
import type * as command from "./command";
import * as votes from "./majority";
import * as fanning from "./fanout";
import * as roundtrip from "./roundtrip";
import * as perTarget from "./targets";
import * as scripts from "./scripts";
import * as clock from "../core/clock";
import * as dictcount from "../core/dictcount";

type Votes = votes.Votes;
const drift = votes.drift;
const nowMs = votes.nowMs;
const decideAcquire = votes.decideAcquire;
const decideRelease = votes.decideRelease;
const decideExtend = votes.decideExtend;
const EXTEND_RESTORING = votes.EXTEND_RESTORING;
const fanout = fanning.fanout;
const batchFor = perTarget.batchFor;
const outcome = perTarget.outcome;
const send = roundtrip.send;
const finish = roundtrip.finish;
const clock_now = clock.now;
const lua_type = type;
const lua_select = select;
const lua_tostring = tostring;
const lua_tonumber = tonumber;
const math_floor = math.floor;

/** Is this script one a quorum can decide? */
function kindSupported(s: scripts.Script): boolean {
  return s === scripts.ACQUIRE || s === scripts.RELEASE || s === scripts.EXTEND || s === EXTEND_RESTORING;
}

interface Health {
  ok: number;
  failed: number;
  lastError: string | undefined;
  lastOk: number;
}

/** Per worker, per master (by endpoint): what its calls did, for status pages. */
const health = new LuaTable<string, Health>();

/** Shared dict key (all workers): calls to a master that failed. */
export const NODE_FAILURES = "c:redis:node_failures:";

function note(node: redis.RedisConf, fault: Fault | undefined, err: string | undefined): void {
  let h = health.get(node.endpoint);
  if (h === undefined) {
    h = { ok: 0, failed: 0, lastError: undefined, lastOk: 0 };
    health.set(node.endpoint, h);
  }
  if (fault === undefined) {
    h.ok = h.ok + 1;
    h.lastOk = clock_now();
  } else {
    h.failed = h.failed + 1;
    h.lastError = err;
    if (node.dict !== undefined) dictcount.count(node.dict, NODE_FAILURES + node.endpoint, 1);
  }
}

function take(v: Votes, i: number, node: redis.RedisConf, r: RedisValue | undefined, e: string | undefined, f: Fault | undefined): void {
  note(node, f, e);
  if (r !== undefined) {
    v.replies.set(i, r);
  } else {
    v.errors.set(i, e ?? "dlock: redis " + node.endpoint + ": no reply");
    v.faults.set(i, f ?? "failed");
  }
}

/** s for rkey on every master at once, each on its own auto-pipeline. */
function everywhere(conf: redis.RedisConf, s: scripts.Script, rkey: string, ...args: (string | number)[]): Votes {
  const nodes = conf.nodes!;
  const v: Votes = { replies: new LuaTable(), errors: new LuaTable(), faults: new LuaTable() };
  const jobs = fanout(nodes, s, rkey, ...args);
  for (const i of $range(1, nodes.length)) {
    const j = jobs[i - 1]!;
    take(v, i, nodes[i - 1]!, j.res, j.err, j.fault);
  }
  return v;
}

/** Run s for rkey on the masters and decide by majority (ARGV[1] the token, ARGV[2] the ttl). */
function call(this: void, conf: redis.RedisConf, s: scripts.Script, rkey: string, ...args: (string | number)[]): CallResult {
  if (!kindSupported(s)) {
    return $multi(undefined, "dlock: redis " + conf.endpoint + ": the " + s.name + " script cannot run on a Redlock quorum", "failed");
  }
  const started = nowMs();
  const v = everywhere(conf, s, rkey, ...args);
  if (s === scripts.RELEASE) return decideRelease(conf, v);
  const [tok, ms] = lua_select(1, ...args);
  const ttl = lua_tonumber(ms) ?? 0;
  if (s === scripts.EXTEND || s === EXTEND_RESTORING) return decideExtend(conf, v, ttl, started);
  return decideAcquire(conf, v, rkey, lua_tostring(tok), ttl, started);
}

/** Each target on every master (one pipeline per master, all at once), decided per target. */
function batch(this: void, conf: redis.RedisConf, s: scripts.Script, targets: Target[], ms?: number[]): Outcome {
  const out: Outcome = { replies: new LuaTable(), errors: new LuaTable(), faults: new LuaTable() };
  if (s !== scripts.RELEASE && s !== scripts.EXTEND && s !== EXTEND_RESTORING) {
    for (const i of $range(1, targets.length)) {
      out.errors.set(i, "dlock: redis " + conf.endpoint + ": the " + s.name + " script cannot run on a Redlock quorum");
      out.faults.set(i, "failed");
    }
    return out;
  }
  if (targets.length === 0) return out;
  const nodes = conf.nodes!;
  const started = nowMs();
  // One pipeline per master, all on their way before any reply is read.
  const per = new LuaTable<number, command.Batch>();
  const reds = new LuaTable<number, RestyRedis>();
  for (const j of $range(1, nodes.length)) {
    const b = batchFor(nodes[j - 1]!, s, targets, ms);
    per.set(j, b);
    const red = send(nodes[j - 1]!, b);
    if (red !== undefined) reds.set(j, red);
  }
  const outs = new LuaTable<number, Outcome>();
  for (const j of $range(1, nodes.length)) {
    const red = reds.get(j);
    if (red !== undefined) finish(nodes[j - 1]!, per.get(j), red);
    outs.set(j, outcome(per.get(j)));
  }
  for (const i of $range(1, targets.length)) {
    const v: Votes = { replies: new LuaTable(), errors: new LuaTable(), faults: new LuaTable() };
    for (const j of $range(1, nodes.length)) {
      const o = outs.get(j);
      const r = o.replies.get(i);
      if (r !== undefined) v.replies.set(j, r);
      else {
        v.errors.set(j, o.errors.get(i) ?? "dlock: redis " + nodes[j - 1]!.endpoint + ": no reply");
        v.faults.set(j, o.faults.get(i) ?? "failed");
      }
    }
    let res: RedisValue | undefined;
    let err: string | undefined;
    let fault: Fault | undefined;
    if (s === scripts.RELEASE) {
      [res, err, fault] = decideRelease(conf, v);
    } else {
      [res, err, fault] = decideExtend(conf, v, ms !== undefined ? ms[i - 1]! : 0, started);
    }
    if (res !== undefined) out.replies.set(i, res);
    else {
      out.errors.set(i, err!);
      out.faults.set(i, fault!);
    }
  }
  for (const j of $range(1, nodes.length)) {
    const o = outs.get(j);
    note(nodes[j - 1]!, o.faults.get(1), o.errors.get(1));
  }
  return out;
}

/** For status pages: per master, calls that worked and failed, the last error, seconds since the last answer. */
function describe(this: void, conf: redis.RedisConf): LuaTable<string, unknown> {
  const list: LuaTable<string, unknown>[] = [];
  const nodes = conf.nodes!;
  for (const i of $range(1, nodes.length)) {
    const n = nodes[i - 1]!;
    const h = health.get(n.endpoint);
    const t = new LuaTable<string, unknown>();
    t.set("endpoint", n.endpoint);
    if (h !== undefined) {
      t.set("ok", h.ok);
      t.set("failed", h.failed);
      t.set("last_error", h.lastError);
      if (h.lastOk > 0) t.set("last_ok_age", math_floor((clock_now() - h.lastOk) * 1000) / 1000);
    }
    list.push(t);
  }
  const t = new LuaTable<string, unknown>();
  t.set("masters", list);
  t.set("majority", votes.majority(conf));
  return t;
}

function validity(this: void, ttl: number): number {
  return ttl - drift(ttl);
}

/** A fence counter per master, not one: the key stays where the other topologies keep it. */
function fenceKey(this: void, rkey: string): string {
  return rkey + ":fence";
}

/** Failed calls per master, over every worker. */
function shared(this: void, conf: redis.RedisConf, d: NgxSharedDict): LuaMultiReturn<[string, LuaTable<string, number>]> {
  const t = new LuaTable<string, number>();
  const nodes = conf.nodes!;
  for (const i of $range(1, nodes.length)) {
    const ep = nodes[i - 1]!.endpoint;
    const [n] = d.get(NODE_FAILURES + ep);
    t.set(ep, lua_type(n) === "number" ? n as number : 0);
  }
  return $multi("redlock", t);
}

function servers(this: void, conf: redis.RedisConf): redis.RedisConf[] {
  return conf.nodes!;
}

/**
 * What a quorum of independent masters cannot do. A fence counter per master
 * is not monotonic across majorities (two majorities share one master, but
 * not its counter), and a counting semaphore per master does not bound
 * holders (three holders can each own a majority of permits on three masters
 * with two permits each).
 */
/** Nothing rides one pipeline here: a release must reach a majority, and its votes be counted (a timer calls it). */
function post(this: void): undefined {
  return undefined;
}

const REFUSES = new LuaTable<Refusal, string>();
REFUSES.set("fencing", "dlock: fencing is refused with redis.redlock: fence counters on independent masters do not grow " +
  "monotonically across majorities (use redis.sentinel or redis.cluster with replicas for fenced locks)");
REFUSES.set("semaphore", "dlock: semaphores (and concurrency guards) are refused with redis.redlock: counting permits on each " +
  "master does not bound the holders of a majority");
REFUSES.set("idempotency", "dlock: idempotency guards are refused with redis.redlock: a stored response needs one place to live");
REFUSES.set("rate", "dlock: rate limits are refused with redis.redlock: counting on each master of a majority does not " +
  "bound the total (use redis.sentinel or redis.cluster)");
// Majorities would keep readers from writers (any two majorities share a
// master), but a writer that waits must hold back new readers, and that takes
// one line for all, which no majority of independent masters has.
REFUSES.set("shared", "dlock: shared = true is refused with redis.redlock: holding back readers while a writer " +
  "waits takes one line of waiters, which independent masters do not have (writers would starve)");

export const backend: Backend = {
  call, post, batch, validity, queues: false, confirmsOwner: false, refuses: REFUSES, fenceKey, shared, describe, servers,
};
