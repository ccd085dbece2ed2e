// The senders of auto-pipelining (pipeline.ts): per lane (a server
// configuration) and worker, up to conf.senders timers, each the only user of
// its connection, that send the lane's batches as pipelines, back to back, and
// wake their callers.
//
// A sender counts in lane.senders once its timer runs, not when it is
// started: nginx drops a timer whose time comes while lua_max_running_timers
// are all running, though ngx.timer.at had said ok (late.ts). Counted at the
// start, a dropped sender stayed
// counted for good, and the batch it was to send stayed open: every later call
// of the worker joined it and waited in vain. A batch whose sender nginx
// dropped was never sent, and never will be: the next call fails it and opens
// another (sending it late would run calls whose callers gave up on them).

import * as command from "./command";
import * as connection from "./connection";
import * as lanes from "./lanes";
import * as roundtrip from "./roundtrip";
import * as takeback from "./takeback";
import * as clock from "../core/clock";
import * as late from "../core/late";

type Batch = command.Batch;
type Lane = lanes.Lane;

const clock_now = clock.now;
const on_its_way = late.onItsWay;
const ngx_log = ngx.log;
const ERR = ngx.ERR;
const WARN = ngx.WARN;
const timer_at = ngx.timer.at;
const worker_exiting = ngx.worker.exiting;
const lua_pcall = pcall;
const lua_tostring = tostring;
const fail = command.fail;
const runOn = roundtrip.runOn;
const done = connection.done;
const settle = takeback.settle;
const recycle = lanes.recycle;

// Batches of a worker on their way to one Redis at once (conf.senders), each from a timer
// on a connection of its own. A lone server gets two: with one, the worker sat idle while
// a batch was out (a third of the time at 50 connections). Each master of a Cluster or
// Redlock set gets one (together they keep batches in flight), which lets the callers it
// woke run before it sends again (wake; TURN s at most): their releases ride the next batch.
const TURN = 1;
/** Seconds a sender waits for work before its timer ends. */
const IDLE = 10;
/** Seconds between an idle sender's looks at whether its worker exits. */
const EXIT_CHECK = 0.5;

/** Hand the calls nobody waits for (post) their outcome. */
function answered(b: Batch): void {
  const jobs = b.jobs;
  for (const i of $range(1, jobs.length)) {
    const j = jobs[i - 1]!;
    const p = j.post;
    if (p !== undefined) {
      const [ok, err] = lua_pcall(p.answered, j);
      if (!ok) ngx_log(ERR, "dlock: settling the posted ", j.s.name, " of ", j.rkey, " raised: ", err);
    }
  }
}

/**
 * Wake b's callers. A caller whose request ended (a client abort, a killed
 * thread) or whose wait timed out left the semaphore's queue, so resources
 * left over say that some did not come back; which ones is known once the
 * others have run. Asking costs the common case one FFI call, where a look
 * at each caller's request cost every call an ngx.ctx. A lone sender queues
 * behind them (first in, first woken; a stock nginx's ngx.sleep(0) runs it first).
 */
function wake(lane: Lane, b: Batch): void {
  const sem = b.sem!;
  // post(0) raises: a batch of posted calls only wakes nobody.
  const waiting = b.jobs.length - b.posted;
  if (waiting > 0 && lane.conf.senders === 1) {
    sem.post(waiting + 1);
    sem.wait(TURN);
  } else if (waiting > 0) sem.post(waiting);
  if (sem.count() === 0) {
    recycle(lane, sem);
  } else if (b.undos > 0) {
    b.kept = true;
    const [ok, err] = timer_at(0, settle, lane.conf, b);
    if (ok === undefined) ngx_log(ERR, "dlock: cannot take back the acquires of gone callers: ", err);
  }
  if (b.posted > 0) answered(b);
}

/**
 * Send the open batch, and the next, until there is none: back to back on one
 * connection, which goes back to its pool once no batch is open.
 */
function flush(lane: Lane): void {
  let red: RestyRedis | undefined;
  while (lane.open !== undefined) {
    const b = lane.open;
    lane.open = undefined;
    lane.batching++;
    lane.batches++;
    lane.batched += b.jobs.length;
    const [ok, res] = lua_pcall(runOn, lane.conf, b, red);
    red = undefined;
    if (ok) {
      red = res as RestyRedis | undefined;
    } else {
      fail(b, "dlock: pipeline to redis " + lane.conf.endpoint + " failed: " + lua_tostring(res), "lost");
    }
    lane.batching--;
    if (b.jobs.length > 1) lane.loaded = clock_now() + lanes.LOADED;
    wake(lane, b);
  }
  if (red !== undefined) done(red, lane.conf, true);
}

/**
 * A sender: a timer of the endpoint's lane in this worker, alive while there
 * is work (a timer per batch would cost more than the batch saves), gone
 * after IDLE seconds without any or when the worker exits.
 */
function sender(this: void, premature: boolean, lane: Lane): void {
  // Started in the place of one taken for dropped (late.ts) that ran after all, with every sender running.
  if (lane.senders >= lane.conf.senders) return;
  lane.senders++;
  while (!premature) {
    flush(lane);
    if (worker_exiting()) break;
    lane.idle++;
    // Idle in slices: nothing wakes a semaphore when the worker starts to
    // exit, and a graceful quit or reload waits for every running timer (one
    // waiting IDLE seconds kept old workers alive that long).
    let woken: boolean | undefined = false;
    let waited = 0;
    while (!woken && waited < IDLE && !worker_exiting()) {
      [woken] = lane.work.wait(EXIT_CHECK);
      waited += EXIT_CHECK;
    }
    lane.idle--;
    if (!woken && lane.open === undefined) break;
  }
  if (lane.open !== undefined) {
    const b = lane.open;
    lane.open = undefined;
    fail(b, "dlock: nginx worker exiting before the call to redis " + lane.conf.endpoint + " was sent", "failed");
    wake(lane, b);
  }
  lane.senders--;
}

/** Start a sender's timer for lane's open batch: false when none can be had (lua_max_pending_timers). */
export function summon(lane: Lane): boolean {
  const now = clock_now();
  if (timer_at(0, sender, lane)[0] === undefined) return false;
  lane.summoned = now;
  return true;
}

/** With no sender running: did nginx drop the timer started for lane's open batch? */
export function overdue(lane: Lane): boolean {
  return !on_its_way(lane.summoned, clock_now(), 0);
}

/**
 * Fail lane's open batch, which no sender will send (overdue): never sent, so
 * its callers still waiting hear "failed", not "lost". Nothing here waits: a
 * call from post() runs in a log phase.
 */
export function abandon(lane: Lane): void {
  const b = lane.open!;
  lane.open = undefined;
  ngx_log(WARN, "dlock: ", b.jobs.length, " call(s) to redis ", lane.conf.endpoint,
    " never sent: nginx dropped the timer started to send them (lua_max_running_timers)");
  fail(b, "dlock: redis " + lane.conf.endpoint + ": the pipeline's sender never ran (lua_max_running_timers)", "failed");
  // Callers whose wait timed out left the queue: what they leave over keeps this semaphore from reuse.
  const waiting = b.jobs.length - b.posted;
  if (waiting > 0) b.sem!.post(waiting);
  if (b.posted > 0) answered(b);
}
