// Redlock over N independent masters (redis.redlock), as the algorithm on
// redis.io describes it: the script runs on every master at once (one light
// thread each, so a paused master costs its timeout once, not once per master),
// and the outcome is the majority's. An acquire counts only when a majority
// took the key within the validity time (ttl minus the time it took minus the
// allowance for clock drift); otherwise it is undone, owner-checked, on every
// master. A release goes to every master; an extend counts on a majority.
// Only the plain lock runs here: a fence counter per master is not monotonic
// across majorities, and counting semaphores per master do not bound holders,
// so factories refuse those at new() (see kindSupported).

import type { Backend, CallResult, Fault, Outcome, Refusal, Target } from "./backend";
import type * as redis from "./client";
import * as pipeline from "./pipeline";
import * as roundtrip from "./roundtrip";
import * as scripts from "./scripts";

const pipelined = pipeline.call;
const many = roundtrip.many;
const spawn = ngx.thread.spawn;
const thread_wait = ngx.thread.wait;
const ngx_now = ngx.now;
const update_time = ngx.update_time;
const lua_type = type;
const lua_select = select;
const lua_tostring = tostring;
const lua_tonumber = tonumber;
const math_floor = math.floor;
const str_format = string.format;
const tbl_concat = table.concat;
const tbl_sort = table.sort;

/** The allowance for clock drift between masters over a ttl, in ms (redis.io: 1 % plus 2 ms). */
export function drift(ttl: number): number {
  return math_floor(ttl * 0.01) + 2;
}

/** Is this script one a quorum can decide? */
function kindSupported(s: scripts.Script): boolean {
  return s === scripts.ACQUIRE || s === scripts.RELEASE || s === scripts.EXTEND;
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
    h.lastOk = ngx_now();
  } else {
    h.failed = h.failed + 1;
    h.lastError = err;
    if (node.dict !== undefined) node.dict.incr(NODE_FAILURES + node.endpoint, 1, 0);
  }
}

/** Per master, aligned with conf.nodes: a reply, or the error and fault. */
interface Votes {
  readonly replies: LuaTable<number, RedisValue>;
  readonly errors: LuaTable<number, string>;
  readonly faults: LuaTable<number, Fault>;
}

function majority(conf: redis.RedisConf): number {
  return math_floor(conf.nodes!.length / 2) + 1;
}

function nowMs(): number {
  update_time();
  return ngx_now() * 1000;
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
  const threads = new LuaTable<number, NgxThread>();
  for (const i of $range(2, nodes.length)) {
    threads.set(i, spawn(pipelined, nodes[i - 1]!, s, rkey, ...args));
  }
  const [r1, e1, f1] = pipelined(nodes[0]!, s, rkey, ...args);
  take(v, 1, nodes[0]!, r1, e1, f1);
  for (const i of $range(2, nodes.length)) {
    const [ok, r, e, f] = thread_wait(threads.get(i));
    if (ok) {
      take(v, i, nodes[i - 1]!, r as RedisValue | undefined, e as string | undefined, f as Fault | undefined);
    } else {
      take(v, i, nodes[i - 1]!, undefined, "dlock: redis " + nodes[i - 1]!.endpoint + ": " + lua_tostring(r), "failed");
    }
  }
  return v;
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
function decideRelease(conf: redis.RedisConf, v: Votes): CallResult {
  const [deleted, answered] = count(conf, v, 1);
  if (answered >= majority(conf)) return $multi(deleted > 0 ? 1 : 0, undefined, undefined);
  return $multi(undefined, "dlock: redis " + conf.endpoint + ": only " + lua_tostring(answered) + " of " + lua_tostring(conf.nodes!.length) +
    " masters answered the release (" + errorsOf(conf, v) + ")", faultOf(conf, v));
}

/** Extend: 1 on a majority within the time; 0 when a majority can no longer say yes. */
function decideExtend(conf: redis.RedisConf, v: Votes, ttl: number, started: number): CallResult {
  const [extended, answered] = count(conf, v, 1);
  const n = conf.nodes!.length;
  if (extended >= majority(conf) && nowMs() - started + drift(ttl) < ttl) return $multi(1, undefined, undefined);
  if (answered - extended > n - majority(conf)) return $multi(0, undefined, undefined);
  return $multi(undefined, "dlock: redis " + conf.endpoint + ": extended on " + lua_tostring(extended) + " of " + lua_tostring(n) +
    " masters, a majority is " + lua_tostring(majority(conf)) + " (" + errorsOf(conf, v) + ")", faultOf(conf, v));
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
  if (s === scripts.EXTEND) return decideExtend(conf, v, ttl, started);
  return decideAcquire(conf, v, rkey, lua_tostring(tok), ttl, started);
}

/**
 * Acquire: "OK" when a majority took the key in time. Otherwise the masters
 * that took it give it back, and the answer is "busy" (the ms until enough
 * holders expire for a majority to be free) when enough masters said the key
 * is taken that no majority was possible; else an error: "lost" when a master
 * that did not answer may have taken it (the caller has it cleaned up,
 * owner-checked, everywhere), "transient" when too few masters could be
 * reached or it took too long (a waiting acquire tries again).
 */
function decideAcquire(conf: redis.RedisConf, v: Votes, rkey: string, tok: string, ttl: number, started: number): CallResult {
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
  if (pttls.length > n - need && undone) {
    // Held by others on enough masters that no majority was possible, whatever
    // the silent ones did (a key one of them took is a minority's, until its ttl).
    tbl_sort(pttls);
    return $multi(pttls[pttls.length - (n - need) - 1]!, undefined, undefined);
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

/** roundtrip.many, shaped for ngx.thread.spawn. */
function batchOn(this: void, node: redis.RedisConf, s: scripts.Script, targets: Target[], ms: number[] | undefined): LuaMultiReturn<[Outcome]> {
  return $multi(many(node, s, targets, ms));
}

/** Each target on every master (one pipeline per master, all at once), decided per target. */
function batch(this: void, conf: redis.RedisConf, s: scripts.Script, targets: Target[], ms?: number[]): Outcome {
  const out: Outcome = { replies: new LuaTable(), errors: new LuaTable(), faults: new LuaTable() };
  if (s !== scripts.RELEASE && s !== scripts.EXTEND) {
    for (const i of $range(1, targets.length)) {
      out.errors.set(i, "dlock: redis " + conf.endpoint + ": the " + s.name + " script cannot run on a Redlock quorum");
      out.faults.set(i, "failed");
    }
    return out;
  }
  const nodes = conf.nodes!;
  const started = nowMs();
  const threads = new LuaTable<number, NgxThread>();
  for (const j of $range(2, nodes.length)) {
    threads.set(j, spawn(batchOn, nodes[j - 1]!, s, targets, ms));
  }
  const per = new LuaTable<number, Outcome>();
  per.set(1, many(nodes[0]!, s, targets, ms));
  for (const j of $range(2, nodes.length)) {
    const [ok, o] = thread_wait(threads.get(j));
    per.set(j, ok ? o as Outcome : { replies: new LuaTable(), errors: new LuaTable(), faults: new LuaTable() });
  }
  for (const i of $range(1, targets.length)) {
    const v: Votes = { replies: new LuaTable(), errors: new LuaTable(), faults: new LuaTable() };
    for (const j of $range(1, nodes.length)) {
      const o = per.get(j);
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
    const o = per.get(j);
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
      if (h.lastOk > 0) t.set("last_ok_age", math_floor((ngx_now() - h.lastOk) * 1000) / 1000);
    }
    list.push(t);
  }
  const t = new LuaTable<string, unknown>();
  t.set("masters", list);
  t.set("majority", majority(conf));
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
const REFUSES = new LuaTable<Refusal, string>();
REFUSES.set("fencing", "dlock: fencing is refused with redis.redlock: fence counters on independent masters do not grow " +
  "monotonically across majorities (use redis.sentinel or redis.cluster with replicas for fenced locks)");
REFUSES.set("semaphore", "dlock: semaphores (and concurrency guards) are refused with redis.redlock: counting permits on each " +
  "master does not bound the holders of a majority");
REFUSES.set("idempotency", "dlock: idempotency guards are refused with redis.redlock: a stored response needs one place to live");

export const backend: Backend = {
  call, batch, validity, queues: false, refuses: REFUSES, fenceKey, shared, describe, servers,
};
