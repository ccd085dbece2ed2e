// One round trip of script calls to one server, the only way a script reaches
// Redis: a batch of calls (one, or many: auto-pipelining's batches, a batch of
// releases) goes out as one pipeline on a pooled connection, its replies are
// read one at a time (resp.ts), and every call keeps its own outcome:
//   - a reply read is that call's answer; an error reply is that call's
//     refusal, mapped to a fault (refused);
//   - when the connection breaks, the calls whose replies were not read are
//     "outcome unknown" ("lost"), and the others are not;
//   - NOSCRIPT (SCRIPT FLUSH, a restart, a failover) is answered by sending
//     the script's body (EVAL, which caches it again) for the calls that met it;
//   - with redis.replicas, one WAIT follows the writes of the batch;
//   - ASKING precedes each call of a batch for a Cluster slot being imported.

import type { CallResult, Fault, Outcome, Target } from "./backend";
import type * as redis from "./client";
import * as check from "../core/check";
import * as connection from "./connection";
import * as resp from "./resp";
import * as scripts from "./scripts";

const lua_tostring = tostring;
const lua_type = type;
const lua_select = select;
const str_sub = string.sub;
const str_format = string.format;
const str_rep = string.rep;
const str_match = string.match;
const tbl_concat = table.concat;
const connect = connection.connect;
const done = connection.done;
const stale = connection.stale;
const socket = connection.socket;
const reader = resp.reader;
const read = resp.read;
const drained = resp.drained;
const queueKey = scripts.queueKey;

/** One call. */
export interface Job {
  readonly s: scripts.Script;
  /** Its command, encoded (EVALSHA, the SHA, the key count, then the words). */
  readonly cmd: string;
  /** Words after the script's SHA and key count: the key and the arguments. */
  readonly words: number;
  /** Its caller came back for the answer (pipeline.ts). */
  back: boolean;
  res: RedisValue | undefined;
  err: string | undefined;
  fault: Fault | undefined;
}

export interface Batch {
  /** The calls' EVALSHA commands, one string each as they join; joined once, when sent. */
  readonly parts: string[];
  readonly jobs: Job[];
  /** Wakes the callers (nil for calls sent by their caller). */
  readonly sem: NgxSemaphore | undefined;
  /** Calls whose script has an undo (acquires). */
  undos: number;
  /** ASKING before each call (a Cluster slot this node imports). */
  readonly asking: boolean;
}

export function batchOf(sem: NgxSemaphore | undefined, asking: boolean): Batch {
  return { parts: [], jobs: [], sem, undos: 0, asking };
}

// READONLY: a master demoted by a failover; the next try goes to the new one.
const TRANSIENT = check.set("LOADING", "BUSY", "TRYAGAIN", "MASTERDOWN", "CLUSTERDOWN", "READONLY");

/** An error reply: its message (naming the endpoint) and fault. */
export function refused(conf: redis.RedisConf, err: string | undefined): LuaMultiReturn<[string, Fault]> {
  const [code] = str_match(lua_tostring(err), "^(%u+)");
  if (code === "READONLY" || code === "LOADING") {
    stale(conf);
  }
  let fault: Fault = "failed";
  if (code === "MOVED" || code === "ASK") {
    fault = "redirect";
  } else if (code !== undefined && TRANSIENT.has(code)) {
    fault = "transient";
  }
  return $multi("dlock: redis " + conf.endpoint + ": " + lua_tostring(err), fault);
}

/**
 * The fault of a connection that could not be made (nothing was sent). Behind
 * Sentinel a master that cannot be reached is most likely being replaced: the
 * sentinels are asked again, and a waiting acquire tries again ("transient").
 */
export function unreachable(conf: redis.RedisConf): Fault {
  return conf.sentinel !== undefined ? "transient" : "failed";
}

// The fixed start of a call's command, per script and word count: the array
// head, EVALSHA (or EVAL), the SHA (or body) and the key count, as one piece.
const heads = setmetatable(new LuaTable<scripts.Script, LuaTable<number, string>>(), { __mode: "k" });
const bodies = setmetatable(new LuaTable<scripts.Script, LuaTable<number, string>>(), { __mode: "k" });

function headOf(cache: LuaTable<scripts.Script, LuaTable<number, string>>, s: scripts.Script, words: number, body: boolean): string {
  let byWords = cache.get(s);
  if (byWords === undefined) {
    byWords = new LuaTable();
    cache.set(s, byWords);
  }
  let h = byWords.get(words);
  if (h === undefined) {
    h = resp.encode([body ? "EVAL" : "EVALSHA", body ? s.src : s.sha, s.keys]);
    // The array head counts every word of the command, the key and arguments included.
    h = "*" + lua_tostring(3 + words) + str_sub(h, 3);
    byWords.set(words, h);
  }
  return h;
}

// A call's command after its head, per number of words: one string.format
// makes it. (Five table slots per word grew the batch buffer in the hot
// trace, and the side traces of its resizes never compiled: "register
// coalescing too complex", hundreds of aborts a second.) Arguments beyond the
// words a format names are ignored by string.format.
const WORD = "$%d\r\n%s\r\n";
const FORMATS = new LuaTable<number, string>();
for (const n of $range(1, 7)) FORMATS.set(n, "%s" + str_rep(WORD, n));
const ASKING = resp.encode(["ASKING"]);

/** The words of a command (up to seven: the key and six arguments), with its head. Not a tail call (see lease.make). */
function encode(head: string, n: number, w1: string, w2: string, w3: string, w4: string, w5: string, w6: string, w7: string): string {
  const cmd = str_format(FORMATS.get(n)!, head, w1.length, w1, w2.length, w2, w3.length, w3, w4.length, w4, w5.length, w5,
    w6.length, w6, w7.length, w7);
  return cmd;
}

/** Add a call to b: its command goes into the buffer at once (no table of its arguments). */
export function add(b: Batch, s: scripts.Script, rkey: string, ...args: (string | number)[]): Job {
  const n = lua_select("#", ...args);
  const words = 1 + n;
  const head = headOf(heads, s, words, false);
  let cmd: string;
  if (n <= 6) {
    // The arguments as locals: select(i, ...) in a loop copies the rest each
    // time and keeps the function out of the JIT. Six cover every script.
    const [a1, a2, a3, a4, a5, a6] = lua_select(1, ...args);
    cmd = encode(head, words, rkey, n >= 1 ? lua_tostring(a1) : "", n >= 2 ? lua_tostring(a2) : "", n >= 3 ? lua_tostring(a3) : "",
      n >= 4 ? lua_tostring(a4) : "", n >= 5 ? lua_tostring(a5) : "", n >= 6 ? lua_tostring(a6) : "");
  } else {
    const parts: resp.Buffer = new LuaTable();
    parts.set(1, head);
    resp.arg(parts, rkey);
    for (const i of $range(1, n)) {
      const [a] = lua_select(i, ...args);
      resp.arg(parts, a!);
    }
    cmd = tbl_concat(parts as unknown as string[]);
  }
  const job: Job = { s, cmd, words, back: false, res: undefined, err: undefined, fault: undefined };
  b.jobs.push(job);
  b.parts.push(cmd);
  if (s.undo !== undefined) b.undos++;
  return job;
}

/**
 * Add a per-target script call (release, extend, drop): KEYS[1] the key (and
 * KEYS[2] its waiters' queue, for two-key scripts), ARGV[1] the token (and
 * ARGV[2] ms, when given). What scripts.forTarget sends through a backend.
 */
function addTarget(b: Batch, slotted: boolean, s: scripts.Script, t: Target, ms: number | undefined): void {
  if (s.keys === 2) {
    const q = queueKey(t.rkey, slotted);
    if (ms === undefined) add(b, s, t.rkey, q, t.token);
    else add(b, s, t.rkey, q, t.token, ms);
  } else if (ms === undefined) {
    add(b, s, t.rkey, t.token);
  } else {
    add(b, s, t.rkey, t.token, ms);
  }
}

/** Every job of b not answered yet fails with err. */
export function fail(b: Batch, err: string, fault: Fault): void {
  const jobs = b.jobs;
  for (const i of $range(1, jobs.length)) {
    const j = jobs[i - 1]!;
    if (j.fault === undefined && j.res === undefined) {
      j.err = err;
      j.fault = fault;
    }
  }
}

/** Word n of job j's command after its key count (1: KEYS[1]). */
export function wordOf(j: Job, n: number): string {
  return resp.word(j.cmd, headOf(heads, j.s, j.words, false).length + 1, n);
}

/** The commands of some of b's jobs (by index), EVAL with the script's body when `body`, each after ASKING when b asks. */
function commands(b: Batch, which: number[], body: boolean): string {
  const out: string[] = [];
  for (const k of $range(1, which.length)) {
    const j = b.jobs[which[k - 1]! - 1]!;
    if (b.asking) out.push(ASKING);
    if (body) {
      const sha = headOf(heads, j.s, j.words, false);
      out.push(headOf(bodies, j.s, j.words, true) + str_sub(j.cmd, sha.length + 1));
    } else {
      out.push(j.cmd);
    }
  }
  return tbl_concat(out);
}

/** The jobs `which` (from k on) were sent, and their replies never came. */
function lost(conf: redis.RedisConf, b: Batch, which: number[], k: number, why: string | undefined): void {
  for (const m of $range(k, which.length)) {
    const j = b.jobs[which[m - 1]! - 1]!;
    j.res = undefined;
    j.err = "dlock: redis " + conf.endpoint + ": " + lua_tostring(why) + " during " + j.s.name;
    j.fault = "lost";
  }
}

/** Send the commands (EVAL when `body`), and read the replies of the jobs `which` (indexes into b.jobs) in turn. */
function roundTrip(conf: redis.RedisConf, sock: NgxTcpSocket, b: Batch, which: number[], payload: string, body: boolean): number[] {
  const [sent, serr] = sock.send(payload);
  if (sent === undefined) {
    // Nothing or part of it left: none of them may have reached Redis, or all.
    lost(conf, b, which, 1, serr);
    return [];
  }
  const r = reader(sock);
  const again: number[] = [];
  for (const k of $range(1, which.length)) {
    const j = b.jobs[which[k - 1]! - 1]!;
    if (b.asking) {
      // ASKING's own reply; one it refused leaves the call to be refused (MOVED).
      const [ok, aerr] = read(r);
      if (ok === undefined) {
        lost(conf, b, which, k, aerr);
        return [];
      }
    }
    const [v, rerr] = read(r);
    if (v === undefined) {
      // These and the ones after them were sent; their replies never came.
      lost(conf, b, which, k, rerr);
      return [];
    }
    if (v === false) {
      if (!body && str_sub(lua_tostring(rerr), 1, 8) === "NOSCRIPT") {
        again.push(which[k - 1]!);
      } else {
        const [e, f] = refused(conf, rerr);
        j.err = e;
        j.fault = f;
      }
    } else {
      j.res = v;
    }
  }
  if (!drained(r)) {
    // More bytes than replies: the replies may not be the ones they seemed,
    // and the connection is not fit for the pool. Nothing read here stands.
    for (const k of $range(1, which.length)) {
      const j = b.jobs[which[k - 1]! - 1]!;
      j.res = undefined;
      j.err = "dlock: redis " + conf.endpoint + ": more data than replies during " + j.s.name;
      j.fault = "lost";
    }
    return [];
  }
  return again;
}

/** Dict key counting writes that fewer replicas than asked acknowledged in time. */
export const SHORTFALLS = "c:redis:replica_shortfalls";

/**
 * WAIT for conf.replicas replicas to acknowledge this connection's writes.
 * Replication is asynchronous: a lock on a master that fails over before a
 * replica has it is lost, and a second holder gets in. nil when enough
 * acknowledged; else the error (the connection is handed back, or closed).
 */
function replicated(red: RestyRedis, conf: redis.RedisConf, s: scripts.Script): string | undefined {
  const [n, err] = red.wait(conf.replicas, conf.replicas_timeout);
  done(red, conf, n !== undefined);
  if (lua_type(n) === "number" && (n as number) >= conf.replicas) {
    return undefined;
  }
  if (conf.dict !== undefined) {
    conf.dict.incr(SHORTFALLS, 1, 0);
  }
  if (lua_type(n) === "number") {
    return str_format("dlock: redis %s: only %d of %d replica(s) acknowledged the %s within %d ms",
      conf.endpoint, n, conf.replicas, s.name, conf.replicas_timeout);
  }
  return "dlock: redis " + conf.endpoint + ": WAIT for replicas after the " + s.name + " failed: " + lua_tostring(err);
}

/** Send b's calls as one pipeline on a pooled connection (EVAL for those Redis has no script for), then one WAIT. */
export function run(conf: redis.RedisConf, b: Batch): void {
  const jobs = b.jobs;
  const which: number[] = [];
  for (const i of $range(1, jobs.length)) {
    which.push(i);
  }
  const [red, cerr] = connect(conf);
  if (red === undefined) {
    fail(b, cerr!, unreachable(conf));
    return;
  }
  const sock = socket(red)!;
  const again = roundTrip(conf, sock, b, which, b.asking ? commands(b, which, false) : tbl_concat(b.parts), false);
  if (again.length > 0) roundTrip(conf, sock, b, again, commands(b, again, true), true);
  let broken = false;
  const wrote: Job[] = [];
  for (const i of $range(1, jobs.length)) {
    const j = jobs[i - 1]!;
    if (j.fault === "lost") broken = true;
    else if (j.res !== undefined && conf.replicas > 0 && j.s.written !== undefined && j.s.written(j.res)) wrote.push(j);
  }
  if (!broken && wrote.length > 0) {
    // One WAIT covers every write of the batch; it hands the connection back (or closes it).
    const short = replicated(red, conf, wrote[0]!.s);
    if (short !== undefined) {
      for (const i of $range(1, wrote.length)) {
        const j = wrote[i - 1]!;
        j.res = undefined;
        j.err = short;
        j.fault = "replicas";
      }
    }
    return;
  }
  done(red, conf, !broken);
}

/** One call on a pooled connection of its own: a batch of one. */
export function one(this: void, conf: redis.RedisConf, s: scripts.Script, rkey: string, ...args: (string | number)[]): CallResult {
  const b = batchOf(undefined, false);
  const job = add(b, s, rkey, ...args);
  run(conf, b);
  return $multi(job.res, job.err, job.fault);
}

/** As one(), after ASKING (a Cluster node serves a slot it imports only to a client that asks so). */
export function asking(this: void, conf: redis.RedisConf, s: scripts.Script, rkey: string, ...args: (string | number)[]): CallResult {
  const b = batchOf(undefined, true);
  const job = add(b, s, rkey, ...args);
  run(conf, b);
  return $multi(job.res, job.err, job.fault);
}

/**
 * A per-target script (see addTarget) for every target, in one round trip
 * (two when Redis met NOSCRIPT), on one server.
 */
export function many(conf: redis.RedisConf, s: scripts.Script, targets: Target[], ms?: number[]): Outcome {
  const out: Outcome = { replies: new LuaTable(), errors: new LuaTable(), faults: new LuaTable() };
  const n = targets.length;
  if (n === 0) return out;
  const b = batchOf(undefined, false);
  for (const i of $range(1, n)) {
    let m: number | undefined;
    if (ms !== undefined) m = ms[i - 1];
    addTarget(b, conf.slotted, s, targets[i - 1]!, m);
  }
  run(conf, b);
  for (const i of $range(1, n)) {
    const j = b.jobs[i - 1]!;
    if (j.res !== undefined) {
      out.replies.set(i, j.res);
    } else {
      out.errors.set(i, j.err!);
      out.faults.set(i, j.fault!);
    }
  }
  return out;
}
