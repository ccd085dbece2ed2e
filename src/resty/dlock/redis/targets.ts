// Many leases' calls in one batch (releases, extends, acquire_all's keys
// where they cannot share a script): a per-target script for every target,
// sent as one pipeline on one server, and what each call came to.

import type { Outcome, Target } from "./backend";
import type * as redis from "./client";
import * as command from "./command";
import * as roundtrip from "./roundtrip";
import * as scripts from "./scripts";

type Batch = command.Batch;
type Job = command.Job;

const add = command.add;
const batchOf = command.batchOf;
const forTarget = scripts.forTarget;
const run = roundtrip.run;

/** A batch that per-target calls join, as scripts.forTarget's first argument (it places the keys by `slotted`). */
interface Into {
  readonly b: Batch;
  readonly slotted: boolean;
}

function addInto(this: void, into: Into, s: scripts.Script, rkey: string, ...args: (string | number)[]): Job {
  return add(into.b, s, rkey, ...args);
}

/** A per-target script (scripts.forTarget's keys and arguments) for every target, as one batch. */
function batchFor(conf: redis.RedisConf, s: scripts.Script, targets: Target[], ms?: number[]): Batch {
  const b = batchOf(undefined, false);
  const into: Into = { b, slotted: conf.slotted };
  for (const i of $range(1, targets.length)) {
    const t = targets[i - 1]!;
    let m: number | undefined;
    if (ms !== undefined) m = ms[i - 1];
    forTarget(addInto, into, s, t.rkey, t.token, m);
  }
  return b;
}

/** What b's calls came to, per call. */
function outcome(b: Batch): Outcome {
  const out: Outcome = { replies: new LuaTable(), errors: new LuaTable(), faults: new LuaTable() };
  for (const i of $range(1, b.jobs.length)) {
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

/** A per-target script for every target in one round trip (two when Redis met NOSCRIPT), on one server. */
export function many(this: void, conf: redis.RedisConf, s: scripts.Script, targets: Target[], ms?: number[]): Outcome {
  const b = batchFor(conf, s, targets, ms);
  if (targets.length > 0) run(conf, b);
  return outcome(b);
}

// Exported by name: this module's own uses of them are locals, not lookups in its exports table.
export { batchFor, outcome };
