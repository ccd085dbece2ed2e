// The store of a complete response: the claim of a request becomes the
// stored record. Filters and the log phase have no cosockets: the store rides
// the worker's next pipeline (backend.post) and its reply is seen to by
// answered(); a timer stores it when it cannot go that way or Redis did not
// answer (until the claim would run out), and drops the claim of a response
// not to store.

import * as backend from "../../redis/backend";
import type * as redis from "../../redis/client";
import * as check from "../../core/check";
import type * as lease from "../../core/lease";
import type * as request from "../../core/request";
import * as settle from "../../core/settle";
import * as records from "../../redis/records";
import type * as scripts from "../../redis/scripts";
import * as stats from "../stats";
import * as claims from "./claim";
import type * as options from "./options";
import * as clock from "../../core/clock";
import * as quiet from "../../core/quiet";

const ngx_log = ngx.log;
const ERR = ngx.ERR;
const WARN = ngx.WARN;
const clock_now = clock.now;
const ngx_update_time = ngx.update_time;
const clock_sleep = clock.sleep;
const timer_at = ngx.timer.at;
const math_min = math.min;
const table_concat = table.concat;
const lua_tostring = tostring;
const quiet_due_for = quiet.dueFor;
const quiet_more = quiet.more;

type Guard = options.Guard;

const FINISHED = claims.FINISHED;

// Per guard, its lines about what Redis did not take while it failed: an
// outage would otherwise log one per request (counted in not_stored).
const undropped: quiet.Quiets = new LuaTable();
const unstored: quiet.Quiets = new LuaTable();
const unconfirmed: quiet.Quiets = new LuaTable();

/** The response of a request that holds a claim, as the filters see it. */
export interface Capture {
  readonly g: Guard;
  readonly anchor: request.Anchor;
  readonly lease: lease.Lease;
  /** The request's fingerprint, stored with its response. */
  readonly fp: string;
  status: number | undefined;
  headers: string;
  chunks: string[];
  size: number;
  tooLarge: boolean;
  /** The whole body went by: its store is on its way. */
  complete: boolean;
  /** What the store sends (set when the body is complete). */
  state: string;
  body: string;
  /** The store's reply, when it rode a pipeline (backend.post). */
  readonly answered: (this: void, j: backend.Job) => void;
  /** A later guard refused the request: nothing to store, the claim is dropped. */
  refused: boolean;
}

/** The store of c's response, sent through `send` (backend.call, or backend.post). */
function completing<R>(send: (this: void, conf: redis.RedisConf, s: scripts.Script, rkey: string, ...args: (string | number)[]) => R, c: Capture): R {
  const l = c.lease;
  return send(c.g._conf, records.IDEM_COMPLETE, l._rkey, l.token, c.g._ttl, c.state, c.status!, c.headers, c.body);
}

/** Statuses not stored after which the backend may still be working (gateway timeout, cut connection). */
const AMBIGUOUS = check.set("502", "504");

/** What Redis answered to the store of c, seen to; false when it did not answer. */
function stored(c: Capture, res: RedisValue | undefined): boolean {
  const g = c.g;
  const l = c.lease;
  if (res === undefined) return false;
  g._dict.delete(FINISHED + l._rkey);
  if (res === 1) {
    stats.incr(g._dict, g.name, c.tooLarge ? "not_stored" : "stored");
    settle.forget(l);
    claims.notify(l._rkey, { state: c.state, fp: c.fp, status: c.status!, headers: c.headers, body: c.body });
    return true;
  }
  stats.incr(g._dict, g.name, "not_stored");
  stats.incr(g._dict, g.name, "lost");
  ngx_log(ERR, "dlock: guard ", g.name, ": the claim on ", l._rkey, " ran out before its response could be stored");
  return true;
}

function store(this: void, premature: boolean, c: Capture): void {
  const g = c.g;
  const l = c.lease;
  const status = c.status!;
  if (c.refused || g._store.get(status) !== true) {
    stats.incr(g._dict, g.name, "not_stored");
    g._dict.delete(FINISHED + l._rkey);
    if (!c.refused && AMBIGUOUS.has(lua_tostring(status))) {
      // The operation may have run, or may still be running: no retry before the claim runs out.
      return;
    }
    // The application said it did not do it (409, 429, 503...): retries may run it.
    const [res, err] = backend.call(g._conf, records.IDEM_RELEASE, l._rkey, l.token);
    if (res === undefined) {
      const n = quiet_due_for(undropped, g.name);
      if (n > 0) {
        ngx_log(WARN, "dlock: guard ", g.name, ": dropping a claim: ", check.reason(err), " (it runs out after the lease)",
          quiet_more(n));
      }
    }
    settle.forget(l);
    claims.notify(l._rkey, undefined);
    return;
  }
  // Until the claim would run out: Redis may come back meanwhile.
  ngx_update_time();
  const deadline = clock_now() + g._lease / 1000;
  let pause = 0.05;
  let said = false;
  while (true) {
    const [res, err] = completing(backend.call, c);
    if (stored(c, res)) return;
    stats.incr(g._dict, g.name, "redis_errors");
    if (!said) {
      // Said at the first failure, as a release Redis did not confirm is: retries meanwhile wait, then get 409.
      said = true;
      const n = quiet_due_for(unconfirmed, g.name);
      if (n > 0) {
        ngx_log(WARN, "dlock: guard ", g.name, ": storing a response: ", check.reason(err),
          " (retried until Redis takes it or the claim runs out)", quiet_more(n));
      }
    }
    ngx_update_time();
    if (clock_now() + pause >= deadline) {
      g._dict.delete(FINISHED + l._rkey);
      stats.incr(g._dict, g.name, "not_stored");
      const n = quiet_due_for(unstored, g.name);
      if (n > 0) {
        ngx_log(ERR, "dlock: guard ", g.name, ": response not stored, the claim runs out: ", check.reason(err),
          quiet_more(n));
      }
      return;
    }
    clock_sleep(pause);
    pause = math_min(pause * 2, 1);
  }
}

/** Store c from a timer. */
function later(c: Capture): void {
  const [ok, err] = timer_at(0, store, c);
  if (!ok) {
    c.g._dict.delete(FINISHED + c.lease._rkey);
    stats.incr(c.g._dict, c.g.name, "not_stored");
    ngx_log(ERR, "dlock: guard ", c.g.name, ": cannot store the response (the key stays claimed until its lease ",
      "runs out): ", err);
  }
}

/** A store that rode a pipeline was answered (in the sender's timer: nothing here may wait); a timer tries again when Redis did not answer. */
function answered(this: void, j: backend.Job): void {
  const c = j.post as Capture;
  if (stored(c, j.res)) return;
  stats.incr(c.g._dict, c.g.name, "redis_errors");
  later(c);
}

/** The response is complete: store it (or drop the claim of one not to store). */
function schedule(c: Capture): void {
  c.complete = true;
  const g = c.g;
  const status = c.status!;
  if (!c.refused && g._store.get(status) === true) {
    c.state = c.tooLarge ? "unreplayable" : "done";
    c.body = c.tooLarge ? "" : table_concat(c.chunks);
    c.chunks = [];
    const j = completing(backend.post, c);
    if (j !== undefined) {
      j.post = c;
      return;
    }
  }
  later(c);
}

// Exported by name: this module's own uses of them are locals, not lookups in its exports table.
export { schedule, answered, AMBIGUOUS };
