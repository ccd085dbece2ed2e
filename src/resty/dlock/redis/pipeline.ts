// Auto-pipelining: the script calls of concurrent requests of one worker to
// one Redis share round trips, as ioredis' auto-pipelining does. A cosocket
// belongs to the request (or timer) that made it, so requests cannot share a
// connection. Instead:
//   - while fewer than DIRECT calls of this worker are on their way to this
//     Redis, and none rides a batch, a call goes out at once on a pooled
//     connection of its own (a worker at low load adds no latency and no hop);
//   - past that, a call is encoded into the next batch's buffer and sleeps on
//     the batch's semaphore. Per endpoint, up to SENDERS timers (the senders),
//     each the only user of its connection, send the batches as pipelines: a
//     batch goes as soon as a sender is free, a sender reads its batch's
//     replies (in chunks, resp.ts) and wakes the callers.
// Every call keeps its own outcome: a reply read is that call's answer; when
// the connection breaks, the calls whose replies were not read are "outcome
// unknown" ("lost") and the others are not; NOSCRIPT is answered by sending
// the script's body for the calls that met it; with redis.replicas one WAIT
// follows the writes of the batch. An acquire whose caller never came back
// for its reply (its request ended: a client abort) is taken back (scripts'
// `undo`): nobody would ever release it.

import type { CallResult, Fault } from "./backend";
import * as redis from "./client";
import * as resp from "./resp";
import * as scripts from "./scripts";
import * as single from "./single";

const semaphore = require("ngx.semaphore") as NgxSemaphoreModule;

/** Calls in one pipeline, at most: a larger batch waits for the next round trip. */
const MAX_BATCH = 256;
/**
 * Calls of a worker that go out on connections of their own before the next
 * ones join a batch: at low load every call goes at once, as without
 * auto-pipelining; past it, a batch costs one round trip for all its calls.
 */
export const DIRECT = 4;
/**
 * Batches of a worker on their way to one Redis at once, each from a timer
 * of its own on a connection of its own. With one, the next batch waited for
 * the previous one's replies while the worker sat idle (a third of the
 * time at 50 connections): two filled it (13 % more requests, at the same
 * CPU per request); a third added nothing.
 */
const SENDERS = 2;
/** Seconds a sender waits for work before its timer ends. */
const IDLE = 10;
/**
 * Seconds after a batch of several calls during which calls join batches even
 * with fewer than DIRECT on their way (as they do while a batch is open or on
 * its way): the callers a batch wakes all call again at once, and a
 * connection of its own for each of the first DIRECT costs more than their
 * place in the next batch.
 */
const LOADED = 0.002;

/** One call. */
interface Job {
  readonly s: scripts.Script;
  /** Its command, encoded (EVALSHA, the SHA, the key count, then the words). */
  readonly cmd: string;
  /** Words after the script's SHA and key count: the key and the arguments. */
  readonly words: number;
  /** Its caller came back for the answer (see settle). */
  back: boolean;
  res: RedisValue | undefined;
  err: string | undefined;
  fault: Fault | undefined;
}

interface Batch {
  /** The calls' EVALSHA commands, one string each as they join; joined once, when sent. */
  readonly parts: string[];
  readonly jobs: Job[];
  /** Wakes the callers (nil for a call sent by its caller). */
  readonly sem: NgxSemaphore | undefined;
  /** Calls whose script has an undo (acquires). */
  undos: number;
}

interface Lane {
  readonly conf: redis.RedisConf;
  /**
   * Calls of this worker on their way to this Redis on connections of their
   * own: slot -> when it has returned at the latest. Not a counter: a request
   * killed in the middle of its call (a client abort with
   * lua_check_client_abort) never runs the code after it, and would leave a
   * counter up for good.
   */
  readonly direct: LuaTable<number, number>;
  /** The acquires among them (batches of one): what to take back should their callers never return. */
  readonly acquires: LuaTable<number, Batch>;
  /** A timer looks for such acquires while there are any. */
  watching: boolean;
  slots: number;
  /** Batches on their way. */
  batching: number;
  /** The batch calls join now; sent when the sender gets to it. */
  open: Batch | undefined;
  /** Senders' timers running, and of those the ones sleeping on `work` between batches. */
  senders: number;
  idle: number;
  readonly work: NgxSemaphore;
  /** Until when calls join batches whatever is on its way (see LOADED). */
  loaded: number;
  /** Calls sent in batches and batches sent, for status and specs. */
  batched: number;
  batches: number;
}

// Per configuration (a factory's), not per pool: two factories on one pool may
// differ in timeouts or replicas, and a batch runs with its callers' settings.
// Weak keys: a factory dropped takes its lane along.
const lanes = setmetatable(new LuaTable<redis.RedisConf, Lane>(), { __mode: "k" });

function laneOf(conf: redis.RedisConf): Lane | undefined {
  let l = lanes.get(conf);
  if (l === undefined) {
    const [work] = semaphore.new(0);
    if (work === undefined) return undefined;
    l = { conf, direct: new LuaTable(), acquires: new LuaTable(), watching: false, slots: 0, batching: 0, open: undefined, senders: 0, idle: 0, work, loaded: 0, batched: 0, batches: 0 };
    lanes.set(conf, l);
  }
  return l;
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
    const parts: resp.Buffer = new LuaTable();
    resp.command(parts, 3 + words);
    resp.arg(parts, body ? "EVAL" : "EVALSHA");
    resp.arg(parts, body ? s.src : s.sha);
    resp.arg(parts, s.keys);
    h = table.concat(parts as unknown as string[]);
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
for (const n of $range(1, 7)) FORMATS.set(n, "%s" + string.rep(WORD, n));

/** The words of a command (up to seven: the key and six arguments), with its head. Not a tail call (see lease.make). */
function encode(head: string, n: number, w1: string, w2: string, w3: string, w4: string, w5: string, w6: string, w7: string): string {
  const cmd = string.format(FORMATS.get(n)!, head, w1.length, w1, w2.length, w2, w3.length, w3, w4.length, w4, w5.length, w5,
    w6.length, w6, w7.length, w7);
  return cmd;
}

/** Add a call to b: its command goes into the buffer at once (no table of its arguments). */
function add(b: Batch, s: scripts.Script, rkey: string, ...args: (string | number)[]): Job {
  const n = select("#", ...args);
  const words = 1 + n;
  const head = headOf(heads, s, words, false);
  let cmd: string;
  if (n <= 6) {
    // The arguments as locals: select(i, ...) in a loop copies the rest each
    // time and keeps the function out of the JIT. Six cover every script.
    const [a1, a2, a3, a4, a5, a6] = select(1, ...args);
    cmd = encode(head, words, rkey, n >= 1 ? tostring(a1) : "", n >= 2 ? tostring(a2) : "", n >= 3 ? tostring(a3) : "",
      n >= 4 ? tostring(a4) : "", n >= 5 ? tostring(a5) : "", n >= 6 ? tostring(a6) : "");
  } else {
    const parts: resp.Buffer = new LuaTable();
    parts.set(1, head);
    resp.arg(parts, rkey);
    for (const i of $range(1, n)) {
      const [a] = select(i, ...args);
      resp.arg(parts, a!);
    }
    cmd = table.concat(parts as unknown as string[]);
  }
  const job: Job = { s, cmd, words, back: false, res: undefined, err: undefined, fault: undefined };
  b.jobs.push(job);
  b.parts.push(cmd);
  if (s.undo !== undefined) b.undos++;
  return job;
}

function fail(jobs: Job[], err: string, fault: Fault): void {
  for (const j of jobs) {
    if (j.fault === undefined && j.res === undefined) {
      j.err = err;
      j.fault = fault;
    }
  }
}

/** The commands of some of b's jobs (by index), EVAL with the script's body when `body`. */
function commands(b: Batch, which: number[], body: boolean): string {
  const out: string[] = [];
  for (const i of which) {
    const j = b.jobs[i - 1]!;
    if (body) {
      const sha = headOf(heads, j.s, j.words, false);
      out.push(headOf(bodies, j.s, j.words, true) + string.sub(j.cmd, sha.length + 1));
    } else {
      out.push(j.cmd);
    }
  }
  return table.concat(out);
}

/** Send the commands (EVAL when `body`), and read the replies of the jobs `which` (indexes into b.jobs) in turn. */
function roundTrip(conf: redis.RedisConf, sock: NgxTcpSocket, b: Batch, which: number[], payload: string, body: boolean): number[] {
  const [sent, serr] = sock.send(payload);
  if (sent === undefined) {
    // Nothing or part of it left: none of them may have reached Redis, or all.
    for (const i of which) {
      const j = b.jobs[i - 1]!;
      j.err = "dlock: redis " + conf.endpoint + ": " + tostring(serr) + " during " + j.s.name;
      j.fault = "lost";
    }
    return [];
  }
  const r = resp.reader(sock);
  const again: number[] = [];
  for (const k of $range(1, which.length)) {
    const j = b.jobs[which[k - 1]! - 1]!;
    const [v, rerr] = resp.read(r);
    if (v === undefined) {
      // These and the ones after them were sent; their replies never came.
      for (const m of $range(k, which.length)) {
        const lost = b.jobs[which[m - 1]! - 1]!;
        lost.err = "dlock: redis " + conf.endpoint + ": " + tostring(rerr) + " during " + lost.s.name;
        lost.fault = "lost";
      }
      return [];
    }
    if (v === false) {
      if (!body && string.sub(tostring(rerr), 1, 8) === "NOSCRIPT") {
        again.push(which[k - 1]!);
      } else {
        const [e, f] = single.refused(conf, rerr);
        j.err = e;
        j.fault = f;
      }
    } else {
      j.res = v;
    }
  }
  if (!resp.drained(r)) {
    // More bytes than replies: the replies may not be the ones they seemed,
    // and the connection is not fit for the pool. Nothing read here stands.
    for (const i of which) {
      const j = b.jobs[i - 1]!;
      j.res = undefined;
      j.err = "dlock: redis " + conf.endpoint + ": more data than replies during " + j.s.name;
      j.fault = "lost";
    }
    return [];
  }
  return again;
}

/** Send b's calls as one pipeline on a pooled connection (EVAL for those Redis has no script for), then one WAIT. */
function run(conf: redis.RedisConf, b: Batch): void {
  const which: number[] = [];
  for (const i of $range(1, b.jobs.length)) {
    which.push(i);
  }
  const [red, cerr] = redis.connect(conf);
  if (red === undefined) {
    fail(b.jobs, cerr!, single.unreachable(conf));
    return;
  }
  const sock = rawget(red as unknown as { _sock: NgxTcpSocket | undefined }, "_sock")!;
  const again = roundTrip(conf, sock, b, which, table.concat(b.parts), false);
  if (again.length > 0) roundTrip(conf, sock, b, again, commands(b, again, true), true);
  let broken = false;
  const wrote: Job[] = [];
  for (const j of b.jobs) {
    if (j.fault === "lost") broken = true;
    else if (j.res !== undefined && conf.replicas > 0 && j.s.written !== undefined && j.s.written(j.res)) wrote.push(j);
  }
  if (!broken && wrote.length > 0) {
    // One WAIT covers every write of the batch; it hands the connection back (or closes it).
    const short = single.replicated(red, conf, wrote[0]!.s);
    if (short !== undefined) {
      for (const j of wrote) {
        j.res = undefined;
        j.err = short;
        j.fault = "replicas";
      }
    }
    return;
  }
  redis.done(red, conf, !broken);
}
/** A call sent at once by its caller (or a timer), on a pooled connection of its own: a batch of one. */
function alone(this: void, conf: redis.RedisConf, s: scripts.Script, rkey: string, ...args: (string | number)[]): CallResult {
  const b: Batch = { parts: [], jobs: [], sem: undefined, undos: 0 };
  const job = add(b, s, rkey, ...args);
  run(conf, b);
  return $multi(job.res, job.err, job.fault);
}

/** Word n of job j's command after its key count (1: KEYS[1]). */
function wordOf(j: Job, n: number): string {
  return resp.word(j.cmd, headOf(heads, j.s, j.words, false).length + 1, n);
}

/** Take back what an acquire may have taken: its request ended before the reply came, so nobody ever will. */
function takeBackOne(conf: redis.RedisConf, j: Job): void {
  const rkey = wordOf(j, 1);
  // ARGV[1], the token, follows the keys.
  const [res, err] = scripts.forTarget(alone, conf, j.s.undo!, rkey, wordOf(j, j.s.keys + 1));
  if (res === undefined) {
    ngx.log(ngx.WARN, "dlock: ", rkey, " may be held by a request that ended before the ", j.s.name, " reply came, and cannot be taken back (",
      err, "): it expires on its own");
  } else if (res !== 0) {
    ngx.log(ngx.NOTICE, "dlock: took back ", rkey, ": its request ended before the ", j.s.name, " reply came");
  }
}

/**
 * Take back the acquires of batch b whose callers did not come back for their
 * replies: a timer started once the callers were woken, so every caller still
 * there has been back. Only those whose replies were read: nothing of theirs
 * can land later. (A lost reply of a caller that is gone is left to its ttl.)
 */
function settle(this: void, premature: boolean, conf: redis.RedisConf, b: Batch): void {
  for (const j of b.jobs) {
    if (j.s.undo !== undefined && j.res !== undefined && !j.back) {
      // Whatever one runs into, the others are still taken back.
      const [ok, err] = pcall(takeBackOne, conf, j);
      if (!ok) ngx.log(ngx.ERR, "dlock: take-back failed: ", err);
    }
  }
}

/**
 * Wake b's callers. A caller whose request ended (a client abort, a killed
 * thread) or whose wait timed out left the semaphore's queue, so resources
 * left over say that some did not come back; which ones is known once the
 * others have run. Asking costs the common case one FFI call, where a look
 * at each caller's request cost every call an ngx.ctx.
 */
function wake(conf: redis.RedisConf, b: Batch): void {
  const sem = b.sem!;
  sem.post(b.jobs.length);
  if (b.undos > 0 && sem.count() > 0) {
    const [ok, err] = ngx.timer.at(0, settle, conf, b);
    if (ok === undefined) ngx.log(ngx.ERR, "dlock: cannot take back the acquires of gone callers: ", err);
  }
}

/** Send the open batch, and the next, until there is none. */
function flush(lane: Lane): void {
  while (lane.open !== undefined) {
    const b = lane.open;
    lane.open = undefined;
    lane.batching++;
    lane.batches++;
    lane.batched += b.jobs.length;
    const [ok, err] = pcall(run, lane.conf, b);
    if (!ok) fail(b.jobs, "dlock: pipeline to redis " + lane.conf.endpoint + " failed: " + tostring(err), "lost");
    lane.batching--;
    if (b.jobs.length > 1) lane.loaded = ngx.now() + LOADED;
    wake(lane.conf, b);
  }
}

/**
 * A sender: a timer of the endpoint's lane in this worker, alive while there
 * is work (a timer per batch would cost more than the batch saves), gone
 * after IDLE seconds without any or when the worker exits.
 */
function sender(this: void, premature: boolean, lane: Lane): void {
  while (!premature) {
    flush(lane);
    if (ngx.worker.exiting()) break;
    lane.idle++;
    const [woken] = lane.work.wait(IDLE);
    lane.idle--;
    if (!woken && lane.open === undefined) break;
  }
  if (lane.open !== undefined) {
    fail(lane.open.jobs, "dlock: nginx worker exiting before the call to redis " + lane.conf.endpoint + " was sent", "failed");
    lane.open.sem!.post(lane.open.jobs.length);
    lane.open = undefined;
  }
  lane.senders--;
}

/** Seconds a call may take: connect, two round trips (NOSCRIPT), a WAIT, and some. */
function patience(conf: redis.RedisConf): number {
  return (conf.connect_timeout + 2 * conf.read_timeout + conf.replicas_timeout) / 1000 + 1;
}

/** Calls of this worker on their way to this Redis now (forgetting those whose time is up). */
function inFlight(lane: Lane): number {
  const now = ngx.now();
  let n = lane.batching;
  for (const [slot, until] of lane.direct) {
    if (until < now) lane.direct.delete(slot);
    else n++;
  }
  return n;
}

/**
 * The batch calls join now (a new one when none is open), with a sender woken
 * or started for it; nil when neither a semaphore nor a sender can be had.
 */
function opened(lane: Lane): Batch | undefined {
  let b = lane.open;
  if (b === undefined) {
    const [sem] = semaphore.new(0);
    if (sem === undefined) return undefined;
    b = { parts: [], jobs: [], sem, undos: 0 };
    lane.open = b;
  }
  // A new batch: wake a free sender, or start one; with every sender busy,
  // the first to finish takes it.
  if (b.jobs.length === 0) {
    if (lane.idle > 0) {
      lane.work.post(1);
    } else if (lane.senders < SENDERS) {
      const [started] = ngx.timer.at(0, sender, lane);
      if (started !== undefined) {
        lane.senders++;
      } else if (lane.senders === 0) {
        // No timer to send it (lua_max_pending_timers).
        lane.open = undefined;
        return undefined;
      }
    }
  }
  return b;
}

/** Wait for the call's answer in the open batch (or on its own, when no batch can be had). */
function join(lane: Lane, s: scripts.Script, rkey: string, ...args: (string | number)[]): CallResult {
  const conf = lane.conf;
  const b = opened(lane);
  if (b === undefined) return alone(conf, s, rkey, ...args);
  const job = add(b, s, rkey, ...args);
  // Its batch's time, and the time of the batch ahead of it.
  const wait = 2 * patience(conf);
  const [woken] = b.sem!.wait(wait);
  job.back = true;
  if (!woken && job.res === undefined && job.fault === undefined) {
    return $multi(undefined, "dlock: redis " + conf.endpoint + ": no answer from the pipeline in " + wait + " s during " + s.name, "lost");
  }
  return $multi(job.res, job.err, job.fault);
}

/** Seconds between looks for acquires sent at once whose callers never came back. */
const WATCH = 1;

/**
 * Acquires sent at once whose callers never came back for the answer: their
 * request ended in the middle (a client abort) or their thread was killed.
 * A slot still there when its time is up says so without a look at the
 * request: every step of a call is bounded by a timeout, and its time
 * (patience) is their sum and a second more. Waiting for it matters too: the
 * connection was closed with the command perhaps not yet run, and by then it
 * has run (or Redis has been stuck that long).
 */
function watcher(this: void, premature: boolean, lane: Lane): void {
  const now = ngx.now();
  // Taking back yields: collect first (no new keys in a table while pairs() walks it).
  const gone: Batch[] = [];
  for (const [slot, b] of lane.acquires) {
    // inFlight() forgets the slots whose time is up.
    const until = lane.direct.get(slot);
    if (until === undefined || until < now) {
      lane.acquires.delete(slot);
      lane.direct.delete(slot);
      gone.push(b);
    }
  }
  for (const b of gone) {
    const [ok, err] = pcall(takeBackOne, lane.conf, b.jobs[0]!);
    if (!ok) ngx.log(ngx.ERR, "dlock: take-back failed: ", err);
  }
  if (premature || next(lane.acquires)[0] === undefined || ngx.timer.at(WATCH, watcher, lane)[0] === undefined) lane.watching = false;
}

/** A call sent at once on a pooled connection of its own, counted in lane.direct while on its way. */
function direct(lane: Lane, s: scripts.Script, rkey: string, ...args: (string | number)[]): CallResult {
  const conf = lane.conf;
  lane.slots++;
  const slot = lane.slots;
  lane.direct.set(slot, ngx.now() + patience(conf));
  const b: Batch = { parts: [], jobs: [], sem: undefined, undos: 0 };
  const job = add(b, s, rkey, ...args);
  if (s.undo !== undefined) {
    lane.acquires.set(slot, b);
    if (!lane.watching) lane.watching = ngx.timer.at(WATCH, watcher, lane)[0] !== undefined;
  }
  run(conf, b);
  lane.direct.delete(slot);
  lane.acquires.delete(slot);
  return $multi(job.res, job.err, job.fault);
}

/** Run s for rkey: at once while few calls of this worker are on their way to this Redis and none ride a batch, else in the next pipeline. */
export function call(conf: redis.RedisConf, s: scripts.Script, rkey: string, ...args: (string | number)[]): CallResult {
  const lane = conf.auto_pipeline ? laneOf(conf) : undefined;
  if (lane === undefined) return single.call(conf, s, rkey, ...args);
  if (lane.batching === 0 && lane.open === undefined && ngx.now() >= lane.loaded && inFlight(lane) < DIRECT) {
    return direct(lane, s, rkey, ...args);
  }
  const b = lane.open;
  // A full batch goes as it is; this call goes on its own.
  if (b !== undefined && b.jobs.length >= MAX_BATCH) return alone(conf, s, rkey, ...args);
  return join(lane, s, rkey, ...args);
}

/** Calls sent in batches, batches, and batches on their way now, by this worker to conf's Redis. */
export function stats(conf: redis.RedisConf): LuaMultiReturn<[number, number, number]> {
  const l = lanes.get(conf);
  if (l === undefined) return $multi(0, 0, 0);
  return $multi(l.batched, l.batches, l.batching);
}
