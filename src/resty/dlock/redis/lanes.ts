// The lanes of auto-pipelining (pipeline.ts): per server configuration and
// worker, what is on its way there now (calls on connections of their own,
// batches), so that a call knows whether to go at once or join a batch.

import type * as redis from "./client";
import type * as command from "./command";
import * as takeback from "./takeback";
import * as clock from "../core/clock";
import * as late from "../core/late";

type Batch = command.Batch;

const semaphore = require("ngx.semaphore") as NgxSemaphoreModule;
const sem_new = semaphore.new;
const clock_now = clock.now;
const on_its_way = late.onItsWay;
const timer_at = ngx.timer.at;
const lua_pairs = pairs;
const watcher = takeback.watcher;
const NONE = -math.huge;

/**
 * Calls of a worker that go out on connections of their own before the next
 * ones join a batch: at low load every call goes at once, as without
 * auto-pipelining; past it, a batch costs one round trip for all its calls.
 */
const DIRECT = 4;
/**
 * Seconds after a batch of several calls during which calls join batches even
 * with fewer than DIRECT on their way (as they do while a batch is open or on
 * its way): the callers a batch wakes all call again at once, and a
 * connection of its own for each of the first DIRECT costs more than their
 * place in the next batch.
 */
export const LOADED = 0.002;

export interface Lane {
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
  /**
   * A timer looks for such acquires while there are any: when it was started
   * (it runs WATCH s later), +inf while it runs, -inf when there is none. Not a
   * flag: nginx drops a timer whose time comes while lua_max_running_timers are
   * all running, though ngx.timer.at said ok, and a flag would say "watching" for good.
   */
  watching: number;
  slots: number;
  /** Batches on their way. */
  batching: number;
  /** The batch calls join now; sent when the sender gets to it. */
  open: Batch | undefined;
  /**
   * Senders' timers running (counted as they start: nginx drops a timer whose
   * time comes while lua_max_running_timers are all running, though
   * ngx.timer.at said ok), and of those the ones sleeping on `work` between batches.
   */
  senders: number;
  /** When the last sender's timer was started (see senders.ts, overdue). */
  summoned: number;
  idle: number;
  readonly work: NgxSemaphore;
  /** Semaphores of batches done with, for the next batches: spare[1 .. spares]. */
  readonly spare: LuaTable<number, NgxSemaphore>;
  spares: number;
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

export function laneOf(conf: redis.RedisConf): Lane | undefined {
  let l = lanes.get(conf);
  if (l === undefined) {
    const [work] = sem_new(0);
    if (work === undefined) return undefined;
    l = {
      conf, direct: new LuaTable(), acquires: new LuaTable(), watching: NONE, slots: 0, batching: 0, open: undefined,
      senders: 0, summoned: NONE, idle: 0, work, spare: new LuaTable(), spares: 0, loaded: 0, batched: 0, batches: 0,
    };
    lanes.set(conf, l);
  }
  return l;
}

/** Semaphores a lane keeps for its next batches. */
const SPARE = 4;

/**
 * A semaphore for the lane's next batch: one a batch before it was done with,
 * else a new one; nil when none can be made. A semaphore per batch cost the
 * collector a finalizer each, and a finalizer aborts whatever trace LuaJIT is
 * recording at that moment.
 */
export function semaphoreOf(lane: Lane): NgxSemaphore | undefined {
  let sem: NgxSemaphore | undefined;
  if (lane.spares > 0) {
    sem = lane.spare.get(lane.spares);
    lane.spare.delete(lane.spares);
    lane.spares--;
  }
  // One with a resource left over would wake a caller before its answer.
  if (sem === undefined || sem.count() !== 0) [sem] = sem_new(0);
  return sem;
}

/**
 * Keep the semaphore of a batch whose callers were all woken (count() 0 after
 * the post: each waits in its queue with a resource of its own). The next
 * batch's callers queue behind them, first in, first woken, and find none left.
 */
export function recycle(lane: Lane, sem: NgxSemaphore): void {
  if (lane.spares < SPARE) {
    lane.spares++;
    lane.spare.set(lane.spares, sem);
  }
}

/** Seconds a call may take: connect, two round trips (NOSCRIPT), a WAIT, and some. */
function patience(conf: redis.RedisConf): number {
  return (conf.connect_timeout + 2 * conf.read_timeout + conf.replicas_timeout) / 1000 + 1;
}

/** Calls of this worker on their way to this Redis now (forgetting those whose time is up). */
function inFlight(lane: Lane): number {
  const now = clock_now();
  let n = lane.batching;
  for (const [slot, due] of lua_pairs(lane.direct)) {
    if (due < now) lane.direct.delete(slot);
    else n++;
  }
  return n;
}

/** Count b, a batch of one about to go at once on a connection of its own, in lane.direct while on its way. */
export function claim(lane: Lane, b: Batch): number {
  lane.slots++;
  const slot = lane.slots;
  const now = clock_now();
  lane.direct.set(slot, now + patience(lane.conf));
  if (b.undos > 0) {
    lane.acquires.set(slot, b);
    // None on its way (or running), or one nginx dropped: start one.
    if (!on_its_way(lane.watching, now, takeback.WATCH) && timer_at(takeback.WATCH, watcher, lane, now)[0] !== undefined) {
      lane.watching = now;
    }
  }
  return slot;
}

export function unclaim(lane: Lane, slot: number): void {
  lane.direct.delete(slot);
  lane.acquires.delete(slot);
}

/** Would a call go out at once (few of this worker's calls on their way, none riding a batch)? */
export function idle(lane: Lane): boolean {
  return lane.batching === 0 && lane.open === undefined && clock_now() >= lane.loaded && inFlight(lane) < DIRECT;
}

/** Calls sent in batches, batches, and batches on their way now, by this worker to conf's Redis. */
export function stats(conf: redis.RedisConf): LuaMultiReturn<[number, number, number]> {
  const l = lanes.get(conf);
  if (l === undefined) return $multi(0, 0, 0);
  return $multi(l.batched, l.batches, l.batching);
}

// Exported by name: this module's own uses of them are locals, not lookups in its exports table.
export { DIRECT, patience, inFlight };
