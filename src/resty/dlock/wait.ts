// Waiting for a key: how an acquire that found the key taken spends the time
// until it may try again. Waiters of one worker queue per key on an
// ngx.semaphore, and a release in that worker wakes the next one at once;
// while a holder in another worker of this nginx has the key, waiters watch
// its shared-dict record instead of asking Redis.

import * as ledger from "./ledger";

const MAX_LOCAL_BACKOFF = 8; // ms, between shared-dict checks while a holder in this nginx has it

const semaphore = require("ngx.semaphore") as NgxSemaphoreModule;

/**
 * Waiters of this worker, per Redis key: a semaphore each. A release in this
 * worker wakes one of them at once (hand-off in one round trip instead of a
 * backoff nap). How many wait is the semaphore's own count: ngx.semaphore
 * forgets a waiter whose request was killed (ngx.exit from an abort handler),
 * which a counter of ours would not.
 */
const waiting = new LuaTable<string, NgxSemaphore>();

/** Sleep up to `ms`, or less if a release of rkey in this worker wakes us. */
export function pause(rkey: string, ms: number): void {
  let sem = waiting.get(rkey);
  if (sem === undefined) {
    const [made] = semaphore.new(0);
    if (made === undefined) {
      ngx.sleep(ms / 1000);
      return;
    }
    sem = made;
    waiting.set(rkey, sem);
  }
  sem.wait(ms / 1000);
  if (sem.count() >= 0 && waiting.get(rkey) === sem) {
    waiting.delete(rkey);
  }
}

/** How many waiters of this worker wait for rkey now. */
export function waiters(rkey: string): number {
  const sem = waiting.get(rkey);
  if (sem === undefined) return 0;
  const n = -sem.count();
  if (n <= 0) {
    // Its last waiters were killed while waiting: nobody left to clean up.
    waiting.delete(rkey);
    return 0;
  }
  return n;
}

/** A release of rkey: the next waiter of this worker tries now. */
export function wake(rkey: string): void {
  if (waiters(rkey) > 0) {
    waiting.get(rkey).post(1);
  }
}

/** Every waiter of rkey in this worker tries now (a subscription went down: they poll). */
export function wakeAll(rkey: string): void {
  const n = waiters(rkey);
  if (n > 0) {
    waiting.get(rkey).post(n);
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

