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

import type { CallResult } from "./backend";
import type * as redis from "./client";
import * as roundtrip from "./roundtrip";
import * as scripts from "./scripts";

type Batch = roundtrip.Batch;
type Job = roundtrip.Job;

const semaphore = require("ngx.semaphore") as NgxSemaphoreModule;
const sem_new = semaphore.new;
const ngx_now = ngx.now;
const ngx_log = ngx.log;
const ERR = ngx.ERR;
const WARN = ngx.WARN;
const NOTICE = ngx.NOTICE;
const timer_at = ngx.timer.at;
const worker_exiting = ngx.worker.exiting;
const lua_pcall = pcall;
const lua_tostring = tostring;
const lua_next = next;
const lua_pairs = pairs;
const add = roundtrip.add;
const run = roundtrip.run;
const fail = roundtrip.fail;
const alone = roundtrip.one;
const wordOf = roundtrip.wordOf;
const batchOf = roundtrip.batchOf;
const forTarget = scripts.forTarget;

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
    const [work] = sem_new(0);
    if (work === undefined) return undefined;
    l = { conf, direct: new LuaTable(), acquires: new LuaTable(), watching: false, slots: 0, batching: 0, open: undefined, senders: 0, idle: 0, work, loaded: 0, batched: 0, batches: 0 };
    lanes.set(conf, l);
  }
  return l;
}

/** Take back what an acquire may have taken: its request ended before the reply came, so nobody ever will. */
function takeBackOne(conf: redis.RedisConf, j: Job): void {
  const rkey = wordOf(j, 1);
  // ARGV[1], the token, follows the keys.
  const [res, err] = forTarget(alone, conf, j.s.undo!, rkey, wordOf(j, j.s.keys + 1));
  if (res === undefined) {
    ngx_log(WARN, "dlock: ", rkey, " may be held by a request that ended before the ", j.s.name, " reply came, and cannot be taken back (",
      err, "): it expires on its own");
  } else if (res !== 0) {
    ngx_log(NOTICE, "dlock: took back ", rkey, ": its request ended before the ", j.s.name, " reply came");
  }
}

/**
 * Take back the acquires of batch b whose callers did not come back for their
 * replies: a timer started once the callers were woken, so every caller still
 * there has been back. Only those whose replies were read: nothing of theirs
 * can land later. (A lost reply of a caller that is gone is left to its ttl.)
 */
function settle(this: void, premature: boolean, conf: redis.RedisConf, b: Batch): void {
  const jobs = b.jobs;
  for (const i of $range(1, jobs.length)) {
    const j = jobs[i - 1]!;
    if (j.s.undo !== undefined && j.res !== undefined && !j.back) {
      // Whatever one runs into, the others are still taken back.
      const [ok, err] = lua_pcall(takeBackOne, conf, j);
      if (!ok) ngx_log(ERR, "dlock: take-back failed: ", err);
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
    const [ok, err] = timer_at(0, settle, conf, b);
    if (ok === undefined) ngx_log(ERR, "dlock: cannot take back the acquires of gone callers: ", err);
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
    const [ok, err] = lua_pcall(run, lane.conf, b);
    if (!ok) fail(b, "dlock: pipeline to redis " + lane.conf.endpoint + " failed: " + lua_tostring(err), "lost");
    lane.batching--;
    if (b.jobs.length > 1) lane.loaded = ngx_now() + LOADED;
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
    if (worker_exiting()) break;
    lane.idle++;
    const [woken] = lane.work.wait(IDLE);
    lane.idle--;
    if (!woken && lane.open === undefined) break;
  }
  if (lane.open !== undefined) {
    fail(lane.open, "dlock: nginx worker exiting before the call to redis " + lane.conf.endpoint + " was sent", "failed");
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
  const now = ngx_now();
  let n = lane.batching;
  for (const [slot, until] of lua_pairs(lane.direct)) {
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
    const [sem] = sem_new(0);
    if (sem === undefined) return undefined;
    b = batchOf(sem, false);
    lane.open = b;
  }
  // A new batch: wake a free sender, or start one; with every sender busy,
  // the first to finish takes it.
  if (b.jobs.length === 0) {
    if (lane.idle > 0) {
      lane.work.post(1);
    } else if (lane.senders < SENDERS) {
      const [started] = timer_at(0, sender, lane);
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
    return $multi(undefined, "dlock: redis " + conf.endpoint + ": no answer from the pipeline in " + lua_tostring(wait) + " s during " + s.name, "lost");
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
  const now = ngx_now();
  // Taking back yields: collect first (no new keys in a table while pairs() walks it).
  const gone: Batch[] = [];
  for (const [slot, b] of lua_pairs(lane.acquires)) {
    // inFlight() forgets the slots whose time is up.
    const until = lane.direct.get(slot);
    if (until === undefined || until < now) {
      lane.acquires.delete(slot);
      lane.direct.delete(slot);
      gone.push(b);
    }
  }
  for (const i of $range(1, gone.length)) {
    const [ok, err] = lua_pcall(takeBackOne, lane.conf, gone[i - 1]!.jobs[0]!);
    if (!ok) ngx_log(ERR, "dlock: take-back failed: ", err);
  }
  if (premature || lua_next(lane.acquires)[0] === undefined || timer_at(WATCH, watcher, lane)[0] === undefined) lane.watching = false;
}

/** A call sent at once on a pooled connection of its own, counted in lane.direct while on its way. */
function direct(lane: Lane, s: scripts.Script, rkey: string, ...args: (string | number)[]): CallResult {
  const conf = lane.conf;
  lane.slots++;
  const slot = lane.slots;
  lane.direct.set(slot, ngx_now() + patience(conf));
  const b = batchOf(undefined, false);
  const job = add(b, s, rkey, ...args);
  if (s.undo !== undefined) {
    lane.acquires.set(slot, b);
    if (!lane.watching) lane.watching = timer_at(WATCH, watcher, lane)[0] !== undefined;
  }
  run(conf, b);
  lane.direct.delete(slot);
  lane.acquires.delete(slot);
  return $multi(job.res, job.err, job.fault);
}

/** Run s for rkey: at once while few calls of this worker are on their way to this Redis and none ride a batch, else in the next pipeline. */
export function call(conf: redis.RedisConf, s: scripts.Script, rkey: string, ...args: (string | number)[]): CallResult {
  const lane = conf.auto_pipeline ? laneOf(conf) : undefined;
  if (lane === undefined) return alone(conf, s, rkey, ...args);
  if (lane.batching === 0 && lane.open === undefined && ngx_now() >= lane.loaded && inFlight(lane) < DIRECT) {
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
