// Auto-pipelining: the script calls of concurrent requests of one worker to
// one Redis share round trips, as ioredis' auto-pipelining does. A cosocket
// belongs to the request (or timer) that made it, so requests cannot share a
// connection. Instead:
//   - while fewer than DIRECT calls of this worker are on their way to this
//     Redis, a call goes out at once on a pooled connection of its own (a
//     worker at low load adds no latency and no hop);
//   - past that, a call joins the next batch and sleeps on the batch's
//     semaphore. A per-endpoint timer (the sender), the only user of its
//     connection, sends each batch as one pipeline as soon as the previous one
//     is answered, reads the replies one by one and wakes the callers.
// Every call keeps its own outcome: a reply read is that call's answer; when
// the connection breaks, the calls whose replies were not read are "outcome
// unknown" ("lost") and the others are not; NOSCRIPT is answered by sending
// the script's body for the calls that met it; with redis.replicas one WAIT
// follows the writes of the batch. A call whose request ended before its
// batch went out is not sent.

import type { CallResult, Fault } from "../backend";
import * as redis from "../redis";
import * as request from "../request";
import * as resp from "../resp";
import type * as scripts from "../scripts";
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
/** Seconds the per-endpoint sender waits for work before its timer ends. */
const IDLE = 10;

interface Job {
  readonly s: scripts.Script;
  readonly rkey: string;
  readonly args: (string | number)[];
  readonly anchor: request.Anchor | undefined;
  res: RedisValue | undefined;
  err: string | undefined;
  fault: Fault | undefined;
}

interface Batch {
  readonly jobs: Job[];
  readonly sem: NgxSemaphore;
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
  slots: number;
  /** A batch is on its way. */
  batching: boolean;
  /** The batch calls join now; sent when the sender gets to it. */
  open: Batch | undefined;
  /** The sender's timer runs, sleeping on `work` between batches. */
  sending: boolean;
  readonly work: NgxSemaphore;
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
    l = { conf, direct: new LuaTable(), slots: 0, batching: false, open: undefined, sending: false, work, batched: 0, batches: 0 };
    lanes.set(conf, l);
  }
  return l;
}

function fail(jobs: Job[], err: string, fault: Fault): void {
  for (const j of jobs) {
    if (j.fault === undefined && j.res === undefined) {
      j.err = err;
      j.fault = fault;
    }
  }
}

/** Send the jobs' scripts (by SHA, or with their bodies) in one write, and read their replies in turn. */
function roundTrip(conf: redis.RedisConf, sock: NgxTcpSocket, jobs: Job[], body: boolean): Job[] {
  const parts: resp.Buffer = new LuaTable();
  const verb = body ? "EVAL" : "EVALSHA";
  for (const j of jobs) {
    resp.command(parts, 4 + j.args.length);
    resp.arg(parts, verb);
    resp.arg(parts, body ? j.s.src : j.s.sha);
    resp.arg(parts, j.s.keys);
    resp.arg(parts, j.rkey);
    for (const a of j.args) resp.arg(parts, a);
  }
  const [sent, serr] = sock.send(table.concat(parts as unknown as string[]));
  if (sent === undefined) {
    // Nothing or part of it left: none of them may have reached Redis, or all.
    fail(jobs, "dlock: redis " + conf.endpoint + ": " + tostring(serr) + " during a pipeline", "lost");
    return [];
  }
  const again: Job[] = [];
  for (const i of $range(1, jobs.length)) {
    const j = jobs[i - 1]!;
    const [r, rerr] = resp.read(sock);
    if (r === undefined) {
      // These and the ones after them were sent; their replies never came.
      for (const k of $range(i, jobs.length)) {
        const lost = jobs[k - 1]!;
        lost.err = "dlock: redis " + conf.endpoint + ": " + tostring(rerr) + " during " + lost.s.name;
        lost.fault = "lost";
      }
      return [];
    }
    if (r === false) {
      if (!body && string.sub(tostring(rerr), 1, 8) === "NOSCRIPT") {
        again.push(j);
      } else {
        const [e, f] = single.refused(conf, rerr);
        j.err = e;
        j.fault = f;
      }
    } else {
      j.res = r;
    }
  }
  return again;
}

function run(conf: redis.RedisConf, b: Batch): void {
  const jobs: Job[] = [];
  for (const j of b.jobs) {
    if (j.anchor !== undefined && !request.alive(j.anchor)) {
      j.err = "dlock: the request ended before its call to redis " + conf.endpoint + " was sent";
      j.fault = "failed";
    } else {
      jobs.push(j);
    }
  }
  if (jobs.length === 0) return;
  const [red, cerr] = redis.connect(conf);
  if (red === undefined) {
    fail(jobs, cerr!, single.unreachable(conf));
    return;
  }
  const sock = rawget(red as unknown as { _sock: NgxTcpSocket | undefined }, "_sock")!;
  const again = roundTrip(conf, sock, jobs, false);
  if (again.length > 0) roundTrip(conf, sock, again, true);
  let broken = false;
  const wrote: Job[] = [];
  for (const j of jobs) {
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

/** Send the open batch, and the next, until there is none. */
function flush(lane: Lane): void {
  while (lane.open !== undefined) {
    const b = lane.open;
    lane.open = undefined;
    lane.batching = true;
    lane.batches++;
    lane.batched += b.jobs.length;
    const [ok, err] = pcall(run, lane.conf, b);
    if (!ok) fail(b.jobs, "dlock: pipeline to redis " + lane.conf.endpoint + " failed: " + tostring(err), "lost");
    lane.batching = false;
    b.sem.post(b.jobs.length);
  }
}

/**
 * The sender: one timer per endpoint and worker, alive while there is work
 * (a timer per batch would cost more than the batch saves), gone after IDLE
 * seconds without any or when the worker exits.
 */
function sender(this: void, premature: boolean, lane: Lane): void {
  while (!premature) {
    flush(lane);
    if (ngx.worker.exiting()) break;
    const [woken] = lane.work.wait(IDLE);
    if (!woken && lane.open === undefined) break;
  }
  if (lane.open !== undefined) {
    fail(lane.open.jobs, "dlock: nginx worker exiting before the call to redis " + lane.conf.endpoint + " was sent", "failed");
    lane.open.sem.post(lane.open.jobs.length);
    lane.open = undefined;
  }
  lane.sending = false;
}

/** Seconds a call may take: connect, two round trips (NOSCRIPT), a WAIT, and some. */
function patience(conf: redis.RedisConf): number {
  return (conf.connect_timeout + 2 * conf.read_timeout + conf.replicas_timeout) / 1000 + 1;
}

/** Calls of this worker on their way to this Redis now (forgetting those whose time is up). */
function inFlight(lane: Lane): number {
  const now = ngx.now();
  let n = lane.batching ? 1 : 0;
  for (const [slot, until] of lane.direct) {
    if (until < now) lane.direct.delete(slot);
    else n++;
  }
  return n;
}

/** Wait for the call's answer in the open batch (b, or a new one). */
function join(lane: Lane, open: Batch | undefined, s: scripts.Script, rkey: string, args: (string | number)[]): CallResult {
  const conf = lane.conf;
  let b = open;
  if (b === undefined) {
    const [sem, serr] = semaphore.new(0);
    if (sem === undefined) return $multi(undefined, "dlock: ngx.semaphore: " + tostring(serr), "failed");
    b = { jobs: [], sem };
    lane.open = b;
  }
  if (b.jobs.length === 0) {
    if (lane.sending) {
      lane.work.post(1);
    } else {
      const [started] = ngx.timer.at(0, sender, lane);
      if (started === undefined) {
        lane.open = undefined;
        return single.call(conf, s, rkey, ...args);
      }
      lane.sending = true;
    }
  }
  const job: Job = { s, rkey, args, anchor: request.anchor(), res: undefined, err: undefined, fault: undefined };
  b.jobs.push(job);
  // Its batch's time, and the time of the batch ahead of it.
  const wait = 2 * patience(conf);
  const [woken] = b.sem.wait(wait);
  if (!woken && job.res === undefined && job.fault === undefined) {
    return $multi(undefined, "dlock: redis " + conf.endpoint + ": no answer from the pipeline in " + wait + " s during " + s.name, "lost");
  }
  return $multi(job.res, job.err, job.fault);
}

/** Run s for rkey: at once while few calls of this worker are on their way to this Redis, else in the next pipeline. */
export function call(conf: redis.RedisConf, s: scripts.Script, rkey: string, ...args: (string | number)[]): CallResult {
  const lane = conf.auto_pipeline ? laneOf(conf) : undefined;
  if (lane === undefined) return single.call(conf, s, rkey, ...args);
  if (inFlight(lane) < DIRECT) {
    lane.slots++;
    const slot = lane.slots;
    lane.direct.set(slot, ngx.now() + patience(conf));
    const [res, err, fault] = single.call(conf, s, rkey, ...args);
    lane.direct.delete(slot);
    return $multi(res, err, fault);
  }
  const b = lane.open;
  // A full batch goes as it is; this call goes on its own.
  if (b !== undefined && b.jobs.length >= MAX_BATCH) return single.call(conf, s, rkey, ...args);
  // The arguments become a table only here: the calls that go out at once make none.
  return join(lane, b, s, rkey, [...args]);
}

/** Calls sent in batches, and batches, by this worker to conf's Redis. */
export function stats(conf: redis.RedisConf): LuaMultiReturn<[number, number]> {
  const l = lanes.get(conf);
  if (l === undefined) return $multi(0, 0);
  return $multi(l.batched, l.batches);
}
