// Waiting for a key: how an acquire that found the key taken spends the time
// until it may try again. Waiters of one worker queue per key on an
// ngx.semaphore, and a release in that worker wakes the next one at once;
// while a holder in another worker of this nginx has the key, waiters watch
// its shared-dict record instead of asking Redis.

import * as ledger from "./ledger";
import * as orphans from "./orphans";
import * as request from "./request";
import * as clock from "./clock";

const MAX_LOCAL_BACKOFF = 8; // ms, between shared-dict checks while a holder in this nginx has it

const semaphore = require("ngx.semaphore") as NgxSemaphoreModule;

const ngx_update_time = ngx.update_time;
const clock_now = clock.now;
const clock_sleep = clock.sleep;
const clock_timeout = clock.timeout;
const worker_pid = ngx.worker.pid;
const co_running = coroutine.running;
const co_status = coroutine.status;
const tab_remove = table.remove;
const math_floor = math.floor;
const math_max = math.max;
const math_min = math.min;
const math_random = math.random;
const lua_ipairs = ipairs;

/**
 * Waiters of this worker, per Redis key, in line: first come, first served.
 * A waiter keeps its place until its acquire returns, and a release wakes the
 * first of the line only, so a waiter that was woken and lost the key to
 * another worker is still first next time (with one shared queue it would go
 * to the back, and waiting would be a lottery), and only one waiter per
 * worker and key asks Redis. Each waiter naps on a semaphore of its own; a
 * post that comes while it is awake is kept for its next nap, so no wake-up is
 * lost. A waiter whose request was killed while it waited (ngx.exit from an
 * abort handler) cannot leave the line: it is recognised as gone and skipped.
 *
 * The acquire holds its Waiter and names it at every step: ngx_lua recycles
 * coroutines (lua_thread_cache_max_entries), so a killed waiter's coroutine
 * may already run another request, and must not be taken for it.
 */
export interface Waiter {
  readonly rkey: string;
  readonly sem: NgxSemaphore;
  readonly co: LuaThread;
  /** Its request (nil outside requests: then its coroutine tells). */
  readonly anchor: request.Anchor | undefined;
  /** Its lease's token: a key handed to it by name (scripts.ts, waiting in line) wakes it. */
  readonly token: string | undefined;
  /** Its ticket in the key's queue in Redis, dropped in the background should it go without a word. */
  ticket: orphans.Orphan | undefined;
  /**
   * Could a wake-up have been missed before the key's subscription was live?
   * Not for a ticket with others ahead of it: the key goes to them first.
   */
  unsure: boolean;
}

/** An acquire's place in a line: taken at its first nap (or before its first question, in line). */
export interface Turn {
  readonly rkey: string;
  readonly token: string | undefined;
  w: Waiter | undefined;
}

const lines = new LuaTable<string, Waiter[]>();

function gone(w: Waiter): boolean {
  // Outside requests, by Lua's own status (request.finished). In a request,
  // the request first: ngx_lua's coroutine.status reads the coroutine's context
  // from the request's pool, freed once it ended. A light thread killed in a
  // request that goes on is gone too. (A recycled coroutine reads as alive:
  // the waiter keeps its place, the safe side.)
  if (w.anchor === undefined) return request.finished(w.co);
  if (!request.alive(w.anchor)) return true;
  return co_status(w.co) === "dead";
}

/** The line of rkey without the waiters that are gone; nil when nobody waits. */
function line(rkey: string): Waiter[] | undefined {
  const l = lines.get(rkey);
  if (l === undefined) return undefined;
  let i = 1;
  while (i <= l.length) {
    const w = l[i - 1]!;
    if (gone(w)) {
      // Killed while waiting: nothing of it runs any more, so its ticket is dropped from here.
      if (w.ticket !== undefined) orphans.adopt(w.ticket);
      tab_remove(l, i);
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

/** A place at the end of rkey's line; nil when no semaphore can be made (then naps are plain sleeps). */
function join(rkey: string, token: string | undefined): Waiter | undefined {
  const [sem] = semaphore.new(0);
  if (sem === undefined) return undefined;
  const w: Waiter = { rkey, sem, co: co_running() as LuaThread, anchor: request.anchor(), token, ticket: undefined, unsure: true };
  let l = lines.get(rkey);
  if (l === undefined) {
    l = [];
    lines.set(rkey, l);
  }
  l.push(w);
  return w;
}

/** A turn for an acquire of rkey; its place in line is taken at its first nap, or by enter(). */
export function turn(rkey: string, token?: string): Turn {
  return { rkey, token, w: undefined };
}

/** Take the turn's place in line now: a key handed to its token while its question is on its way is not missed. */
function enter(t: Turn): void {
  if (t.w === undefined) t.w = join(t.rkey, t.token);
}

/**
 * The turn holds a ticket in its key's queue in Redis, with `ahead` waiters
 * before it: should it go without a word, drop the ticket.
 */
export function holdTicket(t: Turn, ticket: orphans.Orphan, ahead: number): void {
  enter(t);
  if (t.w !== undefined) {
    t.w.ticket = ticket;
    t.w.unsure = ahead <= 0;
  }
}

/** Sleep up to `ms`, or less when woken as the first of the line in this worker (or by name): woken? */
function pause(t: Turn, ms: number): boolean {
  enter(t);
  if (t.w === undefined) {
    clock_sleep(ms / 1000);
    return false;
  }
  const [ok] = t.w.sem.wait(clock_timeout(ms / 1000));
  return ok === true;
}

/**
 * The acquire is over (acquired, timed out, failed): its place in line is
 * given up. With `passOn` (waiters by turns: semaphores, Redlock), the
 * wake-ups it did not take go to the next in line: two permits freed at once
 * both woke the first, and each may be a free permit. (A key handed on by
 * name wakes its waiter twice, by name and as the first: no use passing that on.)
 */
export function leave(t: Turn, passOn: boolean): void {
  const w = t.w;
  if (w === undefined) return;
  t.w = undefined;
  const l = lines.get(w.rkey);
  if (l === undefined) return;
  for (const i of $range(1, l.length)) {
    if (l[i - 1] === w) {
      tab_remove(l, i);
      break;
    }
  }
  if (l.length === 0) {
    lines.delete(w.rkey);
    return;
  }
  if (!passOn) return;
  const unused = w.sem.count();
  if (unused > 0) l[0]!.sem.post(unused);
}

/** How many waiters of this worker wait for rkey now. */
export function waiters(rkey: string): number {
  const l = line(rkey);
  return l === undefined ? 0 : l.length;
}

/** Is the turn first in its key's line (the one waiter of this worker that asks Redis)? */
export function first(t: Turn): boolean {
  const l = line(t.rkey);
  return l !== undefined && t.w !== undefined && l[0] === t.w;
}

/** A release of rkey: the first waiter of this worker tries now. */
export function wake(rkey: string): void {
  const l = line(rkey);
  if (l !== undefined) l[0]!.sem.post(1);
}

/** rkey was handed to the waiter holding `token`: wake it, if it waits here. */
export function wakeToken(rkey: string, token: string): boolean {
  const l = line(rkey);
  if (l === undefined) return false;
  for (const [_, w] of lua_ipairs(l)) {
    if (w.token === token) {
      w.sem.post(1);
      return true;
    }
  }
  return false;
}

/**
 * rkey's subscription is live: the waiters here that may have missed a
 * release or a key handed to them while it was not look once more.
 */
export function recheck(rkey: string): void {
  const l = line(rkey);
  if (l === undefined) return;
  for (const [_, w] of lua_ipairs(l)) {
    if (w.unsure) w.sem.post(1);
  }
}

/** Every waiter of rkey in this worker tries now (a subscription went down: they poll). */
export function wakeAll(rkey: string): void {
  const l = line(rkey);
  if (l === undefined) return;
  for (const [_, w] of lua_ipairs(l)) w.sem.post(1);
}

/**
 * While a worker of this nginx holds the key, wait without polling Redis: a
 * holder in this worker wakes one waiter when it releases (waiters queue on a
 * semaphore, first come first served); a holder in another worker drops its
 * shared-dict record, which costs nothing to watch. "none": no holder here;
 * "free": try Redis now; "timeout": the deadline passed, and then the ms until
 * the holder's lease ends (retry_after).
 */
export function awaitLocalHolder(dict: NgxSharedDict, space: string, t: Turn, deadline: number): LuaMultiReturn<["none" | "free" | "timeout", number | undefined]> {
  const rec = ledger.recordKey(space, t.rkey, "", false);
  let step = 1;
  let seen = false;
  while (true) {
    const [pid, expires] = ledger.holder(dict, rec);
    if (pid === undefined) {
      return $multi(seen ? "free" : "none", undefined);
    }
    seen = true;
    ngx_update_time();
    const now = clock_now() * 1000;
    if (now >= deadline) {
      return $multi("timeout", math_max(0, math_floor(expires - now)));
    }
    if (pid === worker_pid()) {
      // Woken by its release, or at its expiry if it never releases.
      pause(t, math_min(deadline - now, math_max(1, expires - now + 1)));
      return $multi("free", undefined);
    }
    pause(t, math_min(deadline - now, step / 2 + math_random() * step / 2));
    step = math_min(step * 2, MAX_LOCAL_BACKOFF);
  }
}

// Exported by name: this module's own uses of them are locals, not lookups in its exports table.
export { enter, pause };
