// Waiting for a key: how an acquire that found the key taken spends the time
// until it may try again. Waiters of one worker queue per key on an
// ngx.semaphore, and a release in that worker wakes the next one at once;
// while a holder in another worker of this nginx has the key, waiters watch
// its shared-dict record instead of asking Redis.

import * as ledger from "./ledger";

const MAX_LOCAL_BACKOFF = 8; // ms, between shared-dict checks while a holder in this nginx has it

const semaphore = require("ngx.semaphore") as NgxSemaphoreModule;

/**
 * Waiters of this worker, per Redis key. A release in this worker wakes one of
 * them at once (hand-off in one round trip instead of a backoff nap).
 */
interface Waiters {
  readonly sem: NgxSemaphore;
  count: number;
}
const waiting = new LuaTable<string, Waiters>();

/** Sleep up to `ms`, or less if a release of rkey in this worker wakes us. */
export function pause(rkey: string, ms: number): void {
  let w = waiting.get(rkey);
  if (w === undefined) {
    const [sem] = semaphore.new(0);
    if (sem === undefined) {
      ngx.sleep(ms / 1000);
      return;
    }
    w = { sem, count: 0 };
    waiting.set(rkey, w);
  }
  w.count++;
  w.sem.wait(ms / 1000);
  w.count--;
  if (w.count === 0 && waiting.get(rkey) === w) {
    waiting.delete(rkey);
  }
}

/** How many waiters of this worker wait for rkey now. */
export function waiters(rkey: string): number {
  const w = waiting.get(rkey);
  return w === undefined ? 0 : w.count;
}

/** A release of rkey: the next waiter of this worker tries now. */
export function wake(rkey: string): void {
  const w = waiting.get(rkey);
  if (w !== undefined && w.count > 0) {
    w.sem.post(1);
  }
}

/** Every waiter of rkey in this worker tries now (see wakeups.ts: a subscription just went live). */
export function wakeAll(rkey: string): void {
  const w = waiting.get(rkey);
  if (w !== undefined && w.count > 0) {
    w.sem.post(w.count);
  }
}

/**
 * While a worker of this nginx holds the key, wait without polling Redis: a
 * holder in this worker wakes one waiter when it releases (waiters queue on a
 * semaphore, first come first served); a holder in another worker drops its
 * shared-dict record, which costs nothing to watch. "none": no holder here;
 * "free": try Redis now; "timeout": the deadline passed, and then the ms until
 * the holder's lease ends (retry_after).
 */
export function awaitLocalHolder(dict: NgxSharedDict, rkey: string, deadline: number): LuaMultiReturn<["none" | "free" | "timeout", number | undefined]> {
  const rec = ledger.recordKey(rkey, "", false);
  let step = 1;
  let seen = false;
  while (true) {
    const [pid, expires] = ledger.holder(dict, rec);
    if (pid === undefined) {
      return $multi(seen ? "free" : "none", undefined);
    }
    seen = true;
    ngx.update_time();
    const now = ngx.now() * 1000;
    if (now >= deadline) {
      return $multi("timeout", math.max(0, math.floor(expires - now)));
    }
    if (pid === ngx.worker.pid()) {
      // Woken by its release, or at its expiry if it never releases.
      pause(rkey, math.min(deadline - now, math.max(1, expires - now + 1)));
      return $multi("free", undefined);
    }
    pause(rkey, math.min(deadline - now, step / 2 + math.random() * step / 2));
    step = math.min(step * 2, MAX_LOCAL_BACKOFF);
  }
}

