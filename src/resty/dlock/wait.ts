// Waiting for a key: how an acquire that found the key taken spends the time
// until it may try again. Waiters of one worker queue per key on an
// ngx.semaphore, and a release in that worker wakes the next one at once;
// while a holder in another worker of this nginx has the key, waiters watch
// its shared-dict record instead of asking Redis.

import * as ledger from "./ledger";
import * as request from "./request";

const MAX_LOCAL_BACKOFF = 8; // ms, between shared-dict checks while a holder in this nginx has it

const semaphore = require("ngx.semaphore") as NgxSemaphoreModule;

/**
 * Waiters of this worker, per Redis key, in line: first come, first served.
 * A waiter keeps its place from its first nap until its acquire returns, and
 * a release wakes the first of the line only, so a waiter that was woken and
 * lost the key to another worker is still first next time (with one shared
 * queue it would go to the back, and waiting would be a lottery), and only
 * one waiter per worker and key asks Redis. Each waiter naps on a semaphore of
 * its own; a post that comes while it is awake is kept for its next nap, so no
 * wake-up is lost. A waiter whose request was killed while it waited
 * (ngx.exit from an abort handler) cannot leave the line: it is recognised as
 * gone and skipped.
 */
interface Waiter {
  readonly sem: NgxSemaphore;
  readonly co: LuaThread;
  /** Its request (nil outside requests: then its coroutine tells). */
  readonly anchor: request.Anchor | undefined;
}

const lines = new LuaTable<string, Waiter[]>();

function gone(w: Waiter): boolean {
  if (w.anchor !== undefined) return !request.alive(w.anchor);
  return coroutine.status(w.co) === "dead";
}

/** The line of rkey without the waiters that are gone; nil when nobody waits. */
function line(rkey: string): Waiter[] | undefined {
  const l = lines.get(rkey);
  if (l === undefined) return undefined;
  let i = 1;
  while (i <= l.length) {
    if (gone(l[i - 1]!)) {
      table.remove(l, i);
    } else {
      i++;
    }
  }
  if (l.length === 0) {
    lines.delete(rkey);
    return undefined;
  }
  return l;
}

function mine(l: Waiter[]): Waiter | undefined {
  const co = coroutine.running();
  for (const w of l) {
    if (w.co === co) return w;
  }
  return undefined;
}

/** Sleep up to `ms`, or less when woken as the first of rkey's line in this worker. */
export function pause(rkey: string, ms: number): void {
  let l = lines.get(rkey);
  if (l === undefined) {
    l = [];
    lines.set(rkey, l);
  }
  let w = mine(l);
  if (w === undefined) {
    const [sem] = semaphore.new(0);
    if (sem === undefined) {
      ngx.sleep(ms / 1000);
      return;
    }
    w = { sem, co: coroutine.running() as LuaThread, anchor: request.anchor() };
    l.push(w);
  }
  w.sem.wait(ms / 1000);
}

/** The caller's acquire is over (acquired, timed out, failed): it leaves the line of rkey. */
export function leave(rkey: string): void {
  const l = lines.get(rkey);
  if (l === undefined) return;
  const co = coroutine.running();
  for (const i of $range(1, l.length)) {
    if (l[i - 1]!.co === co) {
      table.remove(l, i);
      break;
    }
  }
  if (l.length === 0) lines.delete(rkey);
}

/** How many waiters of this worker wait for rkey now. */
export function waiters(rkey: string): number {
  const l = line(rkey);
  return l === undefined ? 0 : l.length;
}

/** Is the caller first in rkey's line (the one waiter of this worker that asks Redis)? */
export function first(rkey: string): boolean {
  const l = line(rkey);
  return l !== undefined && l[0]!.co === coroutine.running();
}

/** A release of rkey: the first waiter of this worker tries now. */
export function wake(rkey: string): void {
  const l = line(rkey);
  if (l !== undefined) l[0]!.sem.post(1);
}

/** Every waiter of rkey in this worker tries now (a subscription went down: they poll). */
export function wakeAll(rkey: string): void {
  const l = line(rkey);
  if (l === undefined) return;
  for (const w of l) w.sem.post(1);
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

