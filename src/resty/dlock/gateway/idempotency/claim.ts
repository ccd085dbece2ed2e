// Claiming a key in Redis, and waiting for the first request's response when
// the key is claimed already. The watch table (duplicates of one key waiting
// in this worker) lives here: the store (capture.ts) wakes it through notify.

import * as backend from "../../redis/backend";
import * as orphans from "../../core/orphans";
import * as records from "../../redis/records";
import * as breaker from "../breaker";
import type * as options from "./options";
import * as clock from "../../core/clock";
import * as late from "../../core/late";

type Guard = options.Guard;

const semaphore = require("ngx.semaphore") as NgxSemaphoreModule;

const clock_now = clock.now;
const clock_timeout = clock.timeout;
const on_its_way = late.onItsWay;
const ngx_update_time = ngx.update_time;
const math_min = math.min;
const lua_tostring = tostring;
const lua_tonumber = tonumber;

/** Shared dict mark of a claim whose holder has sent its whole response (the store is on its way). */
const FINISHED = "idem:fin:";

/** A completed record, as the claim script returns it. */
export interface Rec {
  readonly state: string;
  readonly fp: string;
  readonly status: number;
  readonly headers: string;
  readonly body: string;
}

/**
 * Duplicates of one key waiting in this worker: one of them polls Redis (with
 * a growing pause), the others sleep on the semaphore until the poller or the
 * store of the first request in this worker hands them the record.
 *
 * A waiter whose request goes away in the middle (a client abort, a killed
 * thread: never resumed) leaves what it set: so a poll counts only as long as
 * its call can take (pollingSince), a record only for the waiters there when
 * it came (recAt), and the watch leaves the table once a record or a dropped
 * claim has been handed on (waiters may stay counted that never come back).
 */
interface Watch {
  readonly sem: NgxSemaphore;
  waiters: number;
  pollingSince: number | undefined;
  rec: Rec | undefined;
  recAt: number;
}
const watches = new LuaTable<string, Watch>();

/** The watch of rkey is done with: later duplicates start a watch of their own. */
function close(rkey: string, w: Watch): void {
  if (watches.get(rkey) === w) watches.delete(rkey);
}

/** The stored record of rkey is known (or, rec nil, the claim was dropped): wake the waiters. */
export function notify(rkey: string, rec: Rec | undefined): void {
  const w = watches.get(rkey);
  if (w === undefined || w.waiters === 0) return;
  if (rec !== undefined) {
    w.rec = rec;
    w.recAt = clock_now();
  }
  w.sem.post(w.waiters);
  close(rkey, w);
}

export type Claim = LuaMultiReturn<["claimed" | "error" | "record" | "timeout", Rec | undefined, string | undefined]>;

function claim(g: Guard, rkey: string, tok: string, fp: string): Claim {
  const [res, err, fault] = backend.call(g._conf, records.IDEM_CLAIM, rkey, tok, g._lease, fp);
  if (res === undefined) {
    if (fault === "lost") {
      // The claim may have landed with nobody to complete it: drop it (owner-checked) rather than
      // let it refuse retries for a whole lease.
      orphans.adoptAcquire(g._conf, records.IDEM_RELEASE, rkey, tok);
    }
    return $multi("error", undefined, err);
  }
  breaker.success(g._dict, g.name);
  if (res === "OK") return $multi("claimed", undefined, undefined);
  const r = res as LuaTable<number, string | number>;
  const rec: Rec = {
    state: lua_tostring(r.get(1)), fp: lua_tostring(r.get(2)), status: lua_tonumber(r.get(3)) ?? 0,
    headers: lua_tostring(r.get(4)), body: lua_tostring(r.get(5)),
  };
  return $multi("record", rec, undefined);
}

/**
 * Wait up to g._wait ms for the first request's response. Returns "record" with
 * it, "claimed" when the first request's claim was dropped and we took the key,
 * "timeout", or "error".
 */
export function waitFor(g: Guard, rkey: string, tok: string, fp: string): Claim {
  let w = watches.get(rkey);
  if (w === undefined) {
    const [sem, serr] = semaphore.new(0);
    if (sem === undefined) return $multi("error", undefined, "dlock: ngx.semaphore: " + lua_tostring(serr));
    w = { sem, waiters: 0, pollingSince: undefined, rec: undefined, recAt: 0 };
    watches.set(rkey, w);
  }
  w.waiters++;
  const joined = clock_now();
  // How long one poll (a Redis call) can take.
  const pollFor = (g._conf.connect_timeout + g._conf.read_timeout) / 1000;
  let deadline = clock_now() * 1000 + g._wait;
  let extended = false;
  let pause = 5;
  let what: "claimed" | "error" | "record" | "timeout" = "timeout";
  let found: Rec | undefined;
  let err: string | undefined;
  while (true) {
    if (w.rec !== undefined && w.recAt >= joined) {
      what = "record";
      found = w.rec;
      break;
    }
    ngx_update_time();
    let left = deadline - clock_now() * 1000;
    let mark: unknown = undefined;
    if (left <= 0 && !extended) [mark] = g._dict.get(FINISHED + rkey);
    if (mark !== undefined) {
      // The first request's response went out from this nginx: it is being
      // stored, which may take up to the lease (the store retries): a retry
      // sent after it must get the replay, not a 409.
      extended = true;
      deadline = clock_now() * 1000 + g._lease;
      left = g._lease;
    }
    if (left <= 0) break;
    if (on_its_way(w.pollingSince, clock_now(), pollFor)) {
      // Another waiter of this worker asks Redis; it (or the store) wakes us.
      w.sem.wait(clock_timeout(math_min(left, 250) / 1000));
    } else {
      w.pollingSince = clock_now();
      const [got, rec, cerr] = claim(g, rkey, tok, fp);
      w.pollingSince = undefined;
      if (got === "record" && rec!.state !== "running") {
        w.rec = rec;
        w.recAt = clock_now();
        // The others of this worker (ngx.semaphore refuses to post 0).
        if (w.waiters > 1) w.sem.post(w.waiters - 1);
        close(rkey, w);
        what = "record";
        found = rec;
        break;
      }
      if (got !== "record") {
        // Claimed for ourselves, or Redis failed: another waiter polls from now on.
        if (w.waiters > 1) w.sem.post(1);
        what = got;
        err = cerr;
        break;
      }
      w.sem.wait(clock_timeout(math_min(left, pause) / 1000));
      pause = math_min(pause * 2, 100);
    }
  }
  w.waiters--;
  if (w.waiters === 0) close(rkey, w);
  return $multi(what, found, err);
}

// Exported by name: this module's own uses of them are locals, not lookups in its exports table.
export { FINISHED, claim };
