// Auto-pipelining: the script calls of concurrent requests of one worker to one
// Redis share round trips, as ioredis' auto-pipelining does. A cosocket belongs
// to the request (or timer) that made it, so requests cannot share one. Instead:
//   - while fewer than DIRECT calls of this worker are on their way to this
//     Redis, and none rides a batch, a call goes out at once on a pooled
//     connection of its own (a worker at low load adds no latency and no hop);
//   - past that, a call is encoded into the next batch's buffer and sleeps on
//     the batch's semaphore. Per endpoint, up to conf.senders timers (the senders,
//     senders.ts), each the only user of its connection, send the batches as
//     pipelines: a batch goes as soon as a sender is free, a sender reads its
//     batch's replies (in chunks, resp.ts) and wakes the callers.
// Every call keeps its own outcome: a reply read is that call's answer; when
// the connection breaks, the calls whose replies were not read are "outcome
// unknown" ("lost") and the others are not; NOSCRIPT is answered by sending
// the script's body for the calls that met it; with redis.replicas one WAIT
// follows the writes of the batch. An acquire whose caller never came back
// for its reply (its request ended: a client abort) is taken back (scripts'
// `undo`): nobody would ever release it.

import type { CallResult } from "./backend";
import type * as redis from "./client";
import * as command from "./command";
import * as lanes from "./lanes";
import * as roundtrip from "./roundtrip";
import type * as scripts from "./scripts";
import * as senders from "./senders";
import * as clock from "../core/clock";

type Batch = command.Batch;
type Job = command.Job;

const clock_now = clock.now;
const clock_timeout = clock.timeout;
const lua_tostring = tostring;
const add = command.add;
const recycleJob = command.recycle;
const batchOf = command.batchOf;
const run = roundtrip.run;
const alone = roundtrip.one;
const laneOf = lanes.laneOf;
const patience = lanes.patience;
const claim = lanes.claim;
const unclaim = lanes.unclaim;
const idle = lanes.idle;
const semaphoreOf = lanes.semaphoreOf;
const summon = senders.summon;
const overdue = senders.overdue;
const abandon = senders.abandon;
type Lane = lanes.Lane;

/** Calls of a worker that go out at once before the next ones join a batch (lanes.ts). */
export const DIRECT = lanes.DIRECT;
/** Calls sent in batches, batches, and batches on their way now, by this worker to conf's Redis. */
export const stats = lanes.stats;

/** Calls in one pipeline, at most: a larger batch waits for the next round trip. */
const MAX_BATCH = 256;
/** Calls a batch has room for before it grows: about as many as 50 requests' calls make per round trip. */
const BATCH = 16;

/**
 * The batch calls join now (a new one when none is open), with a sender woken
 * or started for it; nil when neither a semaphore nor a sender can be had.
 */
function opened(lane: Lane): Batch | undefined {
  let b = lane.open;
  // Only while no sender runs: its timer may be what nginx dropped, or only
  // late (a handler held the worker): another is started, and whichever runs
  // first sends the batch (a late one finds every sender counted, or nothing
  // open). Failed unsent only when no timer can be had at all.
  if (b !== undefined && lane.senders === 0 && overdue(lane) && !summon(lane)) {
    abandon(lane);
    b = undefined;
  }
  if (b === undefined) {
    const sem = semaphoreOf(lane);
    if (sem === undefined) return undefined;
    b = batchOf(sem, false, BATCH);
    lane.open = b;
  }
  // A new batch: wake a free sender, or start one; with every sender busy,
  // the first to finish takes it.
  if (b.jobs.length === 0) {
    if (lane.idle > 0) {
      lane.work.post(1);
    } else if (lane.senders < lane.conf.senders && !summon(lane) && lane.senders === 0) {
      // No timer to send it (lua_max_pending_timers).
      lane.open = undefined;
      return undefined;
    }
  }
  return b;
}

/** The lane of conf's calls (nil: auto_pipeline off). */
function laneFor(conf: redis.RedisConf): Lane | undefined {
  if (!conf.auto_pipeline) return undefined;
  return laneOf(conf);
}

/**
 * The batch a call joins now: the open one, or a new one; nil when the open
 * one is full (it goes as it is) or neither a semaphore nor a sender can be had.
 */
function joinable(lane: Lane): Batch | undefined {
  const open = lane.open;
  if (open !== undefined && open.jobs.length >= MAX_BATCH) return undefined;
  return opened(lane);
}

/**
 * Wait for job's answer in batch b (its caller was away meanwhile: back): its
 * batch's time, and the time of the batch ahead of it. A call with no answer
 * by then is "outcome unknown". True when the answer came with its batch:
 * the sender is done with the call.
 */
function awaited(conf: redis.RedisConf, b: Batch, job: Job): boolean {
  const wait = 2 * patience(conf);
  const sem = b.sem!;
  let [woken] = sem.wait(wait);
  if (woken && job.res === undefined && job.fault === undefined) {
    // Woken before its batch was answered: by a resource a caller of the
    // semaphore's last batch left (its wait timed out as that batch was
    // answered). Its own comes with its batch's answer.
    const deadline = clock_now() + wait;
    while (woken && job.res === undefined && job.fault === undefined) {
      const rest = deadline - clock_now();
      woken = rest > 0 && sem.wait(clock_timeout(rest))[0];
    }
  }
  job.back = true;
  if (!woken && job.res === undefined && job.fault === undefined) {
    job.err = "dlock: redis " + conf.endpoint + ": no answer from the pipeline in " + lua_tostring(wait) + " s during " + job.s.name;
    job.fault = "lost";
    return false;
  }
  return woken === true;
}

/** A call sent at once on a pooled connection of its own, counted in lane.direct while on its way. */
function direct(lane: Lane, s: scripts.Script, rkey: string, ...args: (string | number)[]): CallResult {
  const b = batchOf(undefined, false, 1);
  const job = add(b, s, rkey, ...args);
  const slot = claim(lane, b);
  run(lane.conf, b);
  unclaim(lane, slot);
  const res = job.res;
  const err = job.err;
  const fault = job.fault;
  recycleJob(job);
  return $multi(res, err, fault);
}

/** Run s for rkey: at once while few calls of this worker are on their way to this Redis and none ride a batch, else in the next pipeline. */
export function call(conf: redis.RedisConf, s: scripts.Script, rkey: string, ...args: (string | number)[]): CallResult {
  const lane = laneFor(conf);
  if (lane === undefined) return alone(conf, false, s, rkey, ...args);
  if (idle(lane)) return direct(lane, s, rkey, ...args);
  const b = joinable(lane);
  // A full batch goes as it is; this call goes on its own.
  if (b === undefined) return alone(conf, false, s, rkey, ...args);
  const job = add(b, s, rkey, ...args);
  const replied = awaited(conf, b, job);
  const res = job.res;
  const err = job.err;
  const fault = job.fault;
  if (replied && !b.kept) recycleJob(job);
  return $multi(res, err, fault);
}

/**
 * Put s for rkey into conf's next pipeline without waiting for its reply, from
 * any phase (log_by_lua has no cosockets; a sender's timer has): the call,
 * whose `post` the sender reports its outcome to (set it before yielding).
 * nil when it cannot go that way (no auto-pipelining, a full batch, neither a
 * semaphore nor a sender to be had): then call() it from a timer.
 */
export function post(this: void, conf: redis.RedisConf, s: scripts.Script, rkey: string, ...args: (string | number)[]): Job | undefined {
  const lane = laneFor(conf);
  if (lane === undefined) return undefined;
  const b = joinable(lane);
  if (b === undefined) return undefined;
  const job = add(b, s, rkey, ...args);
  job.back = true;
  b.posted++;
  return job;
}

// Exported by name: this module's own uses of them are locals, not lookups in its exports table.
export { laneFor, joinable, awaited };
