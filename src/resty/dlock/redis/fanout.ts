// A call on several servers at once (a Redlock quorum): each as
// pipeline.call would send it, at once on a connection of its own or in the
// server's next batch, every one on its way before any reply is awaited, with
// no light thread.

import type * as redis from "./client";
import * as command from "./command";
import * as lanes from "./lanes";
import * as pipeline from "./pipeline";
import * as roundtrip from "./roundtrip";
import type * as scripts from "./scripts";

type Batch = command.Batch;
type Job = command.Job;

const encoded = command.encoded;
const addEncoded = command.addEncoded;
const batchOf = command.batchOf;
const send = roundtrip.send;
const finish = roundtrip.finish;
const laneOf = lanes.laneOf;
const claim = lanes.claim;
const unclaim = lanes.unclaim;
const idle = lanes.idle;
const laneFor = pipeline.laneFor;
const joinable = pipeline.joinable;
const awaited = pipeline.awaited;

/** Run s for rkey on every server of `confs` at once: the calls, aligned with confs. */
export function fanout(confs: redis.RedisConf[], s: scripts.Script, rkey: string, ...args: (string | number)[]): Job[] {
  const n = confs.length;
  // Encoded once for every server; and no vararg inside the loop, where a
  // trace starting at the loop cannot read them (NYI: bytecode 71, VARG).
  const [rest, words] = encoded(...args);
  const jobs: Job[] = [];
  const own = new LuaTable<number, Batch>();
  const reds = new LuaTable<number, RestyRedis>();
  const slots = new LuaTable<number, number>();
  const joined = new LuaTable<number, Batch>();
  for (const i of $range(1, n)) {
    const conf = confs[i - 1]!;
    const lane = laneFor(conf);
    let b: Batch | undefined;
    if (lane !== undefined && !idle(lane)) {
      b = joinable(lane);
      if (b !== undefined) joined.set(i, b);
    }
    if (b === undefined) {
      b = batchOf(undefined, false);
      own.set(i, b);
    }
    const job = addEncoded(b, s, rkey, rest, words);
    jobs.push(job);
    if (joined.has(i)) {
      // Its caller comes back for it after the replies of the others, maybe
      // after this batch's callers were woken: not one to take back (settle).
      // (Nor is one of a caller killed meanwhile: it is left to its ttl.)
      job.back = true;
      if (s.undo !== undefined) b.undos--;
    } else {
      if (lane !== undefined) slots.set(i, claim(lane, b));
      const red = send(conf, b);
      if (red !== undefined) reds.set(i, red);
    }
  }
  for (const i of $range(1, n)) {
    const b = own.get(i);
    if (b !== undefined) {
      const red = reds.get(i);
      if (red !== undefined) finish(confs[i - 1]!, b, red);
      const slot = slots.get(i);
      if (slot !== undefined) unclaim(laneOf(confs[i - 1]!)!, slot);
    }
  }
  for (const i of $range(1, n)) {
    const b = joined.get(i);
    if (b !== undefined) awaited(confs[i - 1]!, b, jobs[i - 1]!);
  }
  return jobs;
}

