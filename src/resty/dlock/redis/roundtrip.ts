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
//   - with redis.replicas, one WAIT follows the writes of the batch (replicas.ts);
//   - ASKING precedes each call of a batch for a Cluster slot being imported.

import type { CallResult, Fault } from "./backend";
import type * as redis from "./client";
import * as check from "../core/check";
import * as command from "./command";
import * as connection from "./connection";
import * as resp from "./resp";
import * as scripts from "./scripts";
import * as hints from "./hints";
import * as replicas from "./replicas";

export type Job = command.Job;
export type Batch = command.Batch;

const lua_tostring = tostring;
const str_sub = string.sub;
const str_find = string.find;
const str_match = string.match;
const connect = connection.connect;
const done = connection.done;
const stale = connection.stale;
const socket = connection.socket;
const reader = resp.reader;
const read = resp.read;
const drained = resp.drained;
const add = command.add;
const batchOf = command.batchOf;
const recycle = command.recycle;
const at = command.at;
const commands = command.commands;
const fail = command.fail;
const turned_away = hints.turnedAway;
const closed_after = hints.closedAfter;
const no_scripts = hints.noScripts;
const replica = hints.replica;

// READONLY: a master demoted by a failover; the next try goes to the new one.
// NOREPLICAS: a master with min-replicas-to-write while its replicas are away
// (a resync, a restart): writes resume when one is back.
const TRANSIENT = check.set("LOADING", "BUSY", "TRYAGAIN", "MASTERDOWN", "CLUSTERDOWN", "READONLY", "NOREPLICAS");

/** An error reply: its message (naming the endpoint) and fault. */
function refused(conf: redis.RedisConf, err: string | undefined): LuaMultiReturn<[string, Fault]> {
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
  const away = turned_away(conf.endpoint, err);
  if (away !== undefined) return $multi(away, fault);
  const scriptless = no_scripts(conf.endpoint, err);
  if (scriptless !== undefined) return $multi(scriptless, fault);
  const e = lua_tostring(err);
  return $multi("dlock: redis " + conf.endpoint + ": " + e + (code === "READONLY" ? replica(conf.topology, e) : ""), fault);
}

/**
 * Did a Cluster slot that is migrating refuse the call (TRYAGAIN: a script
 * whose keys the move has split between two nodes)? It is only to be tried
 * again, not counted as Redis failing.
 */
export function migrating(fault: Fault | undefined, err: string | undefined): boolean {
  return fault === "transient" && str_find(lua_tostring(err), ": TRYAGAIN", 1, true)[0] !== undefined;
}

/**
 * The fault of a connection that could not be made (nothing was sent). Behind
 * Sentinel a master that cannot be reached is most likely being replaced: the
 * sentinels are asked again, and a waiting acquire tries again ("transient").
 */
function unreachable(conf: redis.RedisConf): Fault {
  return conf.sentinel !== undefined ? "transient" : "failed";
}

/** The jobs `which` (from k on) were sent, and their replies never came. */
function lost(conf: redis.RedisConf, b: Batch, which: number[] | undefined, k: number, why: string | undefined): void {
  const n = which === undefined ? b.jobs.length : which.length;
  for (const m of $range(k, n)) {
    const j = b.jobs[at(which, m) - 1]!;
    j.res = undefined;
    j.err = "dlock: redis " + conf.endpoint + ": " + lua_tostring(why) + " during " + j.s.name;
    j.fault = "lost";
  }
}

/** Send the commands of the jobs `which`; false when the connection failed (then they are lost). */
function sendAll(conf: redis.RedisConf, sock: NgxTcpSocket, b: Batch, which: number[] | undefined, payload: command.Fragments): boolean {
  const [sent, serr] = sock.send(payload);
  if (sent === undefined) {
    // Nothing or part of it left: none of them may have reached Redis, or all.
    lost(conf, b, which, 1, serr);
    return false;
  }
  return true;
}

/**
 * The jobs `again`, which met NOSCRIPT, when the connection broke before their
 * script could follow: they did not run, and never will on this connection.
 */
function unrun(conf: redis.RedisConf, b: Batch, again: number[] | undefined, why: string | undefined): void {
  if (again === undefined) return;
  for (const i of $range(1, again.length)) {
    const j = b.jobs[again[i - 1]! - 1]!;
    j.res = undefined;
    j.err = "dlock: redis " + conf.endpoint + ": " + lua_tostring(why) + " before the script could follow NOSCRIPT, during " + j.s.name;
    j.fault = "failed";
  }
}

/** Read the replies of the jobs `which` in turn; those that met NOSCRIPT (unless `body`: EVAL was sent). */
function replies(conf: redis.RedisConf, sock: NgxTcpSocket, b: Batch, which: number[] | undefined, body: boolean): number[] | undefined {
  const r = reader(sock);
  let again: number[] | undefined;
  const n = which === undefined ? b.jobs.length : which.length;
  for (const k of $range(1, n)) {
    const j = b.jobs[at(which, k) - 1]!;
    if (b.asking) {
      // ASKING's own reply; one it refused leaves the call to be refused (MOVED).
      const [ok, aerr] = read(r);
      if (ok === undefined) {
        lost(conf, b, which, k, aerr);
        unrun(conf, b, again, aerr);
        return undefined;
      }
    }
    const [v, rerr] = read(r);
    if (v === undefined) {
      // These and the ones after them were sent; their replies never came.
      lost(conf, b, which, k, rerr);
      unrun(conf, b, again, rerr);
      return undefined;
    }
    if (v === false) {
      if (!body && str_sub(lua_tostring(rerr), 1, 8) === "NOSCRIPT") {
        if (again === undefined) again = [];
        again.push(at(which, k));
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
    lost(conf, b, which, 1, "more data than replies");
    return undefined;
  }
  return again;
}

/** As send, on `red` when given (a connection the batch before left fit). */
function sendOn(conf: redis.RedisConf, b: Batch, red: RestyRedis | undefined): RestyRedis | undefined {
  if (red === undefined) {
    const [fresh, cerr] = connect(conf);
    if (fresh === undefined) {
      fail(b, cerr!, unreachable(conf));
      return undefined;
    }
    red = fresh;
  }
  if (!sendAll(conf, socket(red)!, b, undefined, b.asking ? commands(b, undefined, false) : b.parts)) {
    done(red, conf, false);
    return undefined;
  }
  return red;
}

/**
 * Send b's calls as one pipeline on a pooled connection: the connection to
 * read their replies from (finish), or nil when it failed (b's calls say so).
 * Split from finish so that one caller can have calls on their way to several
 * servers at once (a Redlock quorum).
 */
function send(conf: redis.RedisConf, b: Batch): RestyRedis | undefined {
  return sendOn(conf, b, undefined);
}

/**
 * Read the replies of b's calls sent on red (EVAL for those Redis has no
 * script for), then one WAIT. With `keep`, red comes back when it may carry
 * the next batch at once: no reply lost, no call refused (a READONLY master
 * is asked no more), no WAIT (which hands it back); else it goes back to its
 * pool (or is closed) here.
 */
function complete(conf: redis.RedisConf, b: Batch, red: RestyRedis, keep: boolean): RestyRedis | undefined {
  const sock = socket(red)!;
  const again = replies(conf, sock, b, undefined, false);
  if (again !== undefined && sendAll(conf, sock, b, again, commands(b, again, true))) replies(conf, sock, b, again, true);
  const jobs = b.jobs;
  let broken = false;
  let erred = false;
  let unfit = false;
  let wrote: Job[] | undefined;
  for (const i of $range(1, jobs.length)) {
    const j = jobs[i - 1]!;
    if (j.fault === "lost") broken = true;
    else if (j.fault !== undefined) {
      erred = true;
      if (j.fault === "transient" && str_find(j.err!, ": READONLY", 1, true)[0] !== undefined) unfit = true;
      else if (closed_after(j.err!)) unfit = true;
    }
    else if (j.res !== undefined && conf.replicas > 0 && j.s.written !== undefined && j.s.written(j.res)) {
      if (wrote === undefined) wrote = [];
      wrote.push(j);
    }
  }
  if (wrote !== undefined) {
    if (broken) {
      // No WAIT can follow these writes: one on another connection covers none of them.
      replicas.unconfirmed(wrote, "dlock: redis " + conf.endpoint + ": the connection broke before WAIT for replicas after the " +
        wrote[0]!.s.name);
    } else {
      // One WAIT covers every write of the batch; it hands the connection back (or closes it).
      const short = replicas.waited(red, conf, wrote[0]!.s);
      if (short !== undefined) replicas.unconfirmed(wrote, short);
      return undefined;
    }
  }
  if (keep && !broken && !erred) return red;
  // A master demoted under a name or address that moved on to the new one (a
  // cloud's primary endpoint, a virtual IP, a Kubernetes Service): only a new
  // connection reaches that one, so this one is closed, never pooled again. A
  // server that turned it away (maxclients, protected mode) has closed it already.
  done(red, conf, !broken && !unfit);
  return undefined;
}

/** Read the replies of b's calls sent on red, then hand red back (see complete). */
function finish(conf: redis.RedisConf, b: Batch, red: RestyRedis): void {
  complete(conf, b, red, false);
}

/**
 * Send b's calls as one pipeline on `red`, the connection the batch before
 * left fit (nil: a pooled one), and read their replies. The connection when
 * it may carry the next batch at once, for the caller to hand back with
 * connection.done when there is none: a sender with batches back to back
 * keeps one connection instead of taking it from the pool and giving it back
 * per batch (a client object, a pool lookup and an idle timer each time).
 */
export function runOn(this: void, conf: redis.RedisConf, b: Batch, red: RestyRedis | undefined): RestyRedis | undefined {
  const sent = sendOn(conf, b, red);
  if (sent === undefined) return undefined;
  return complete(conf, b, sent, true);
}

/** Send b's calls as one pipeline and read their replies. */
function run(conf: redis.RedisConf, b: Batch): void {
  const red = send(conf, b);
  if (red !== undefined) finish(conf, b, red);
}

/**
 * One call on a pooled connection of its own: a batch of one; after ASKING
 * when `asking` (a Cluster node serves a slot it imports only to a client
 * that asks so).
 */
export function one(this: void, conf: redis.RedisConf, asking: boolean, s: scripts.Script, rkey: string,
  ...args: (string | number)[]): CallResult {
  const b = batchOf(undefined, asking, 1);
  const job = add(b, s, rkey, ...args);
  run(conf, b);
  const res = job.res;
  const err = job.err;
  const fault = job.fault;
  recycle(job);
  return $multi(res, err, fault);
}

// Exported by name: this module's own uses of them are locals, not lookups in its exports table.
export { refused, unreachable, send, finish, run };
