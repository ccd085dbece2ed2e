// The watchdog: leases taken with `renew = true` are extended by one sweep per worker (not a timer
// per lease: a busy worker would run out of lua_max_pending_timers), a third of their ttl after the
// last renewal, one pipeline per Redis endpoint. When a renewal finds the key gone or someone
// else's, or Redis cannot be reached until the lease has run out by the local clock, the lease is
// lost: lease:valid() says false from then on, the error log says so, and the lease's on_lost runs
// once.
//
// A renewed lease lives as long as what took it: a request (until it ends, internal redirects
// included) or a timer or light thread (until its function returns). A lease its holder forgot to
// release is released then, with a warning, instead of being kept alive for as long as the worker
// runs, which is how a watchdog turns a forgotten unlock into a lock held forever.

import * as check from "./check";
import * as meter from "./meter";
import * as batch from "./batch";
import type * as lease from "./lease";
import * as loop from "./loop";
import * as request from "./request";
import * as clock from "./clock";
import * as quiet from "./quiet";

const ngx_update_time = ngx.update_time;
const clock_now = clock.now;
const ngx_log = ngx.log;
const ERR = ngx.ERR;
const WARN = ngx.WARN;
const co_running = coroutine.running;
const math_max = math.max;
const math_min = math.min;
const lua_pcall = pcall;
const lua_pairs = pairs;
const lua_ipairs = ipairs;
const timer_at = ngx.timer.at;
const thread_spawn = ngx.thread.spawn;
const thread_wait = ngx.thread.wait;
const quiet_due = quiet.due;
const quiet_more = quiet.more;

/** The line about renewals Redis did not answer: one per interval, not one per lease and sweep. */
const unanswered = quiet.make();

/**
 * For leases whose holder manages their life itself (the gateway's in-flight
 * requests): told what each renewal found, instead of the lease's on_lost and
 * the watchdog's own log lines; and never released for outliving a request.
 */
export interface Hooks {
  renewed(this: void, l: lease.Lease): void;
  lost(this: void, l: lease.Lease, why: string): void;
  failed(this: void, l: lease.Lease, err: string): void;
}

interface Watched {
  readonly lease: lease.Lease;
  /** The request that took it, or (outside requests) the coroutine that did. */
  readonly anchor: request.Anchor | undefined;
  readonly co: LuaThread | undefined;
  readonly hooks: Hooks | undefined;
  /** A renewal of it is on its way in a light thread of its endpoint's (renewApart). */
  renewing: boolean;
}

const watched = new LuaTable<lease.Lease, Watched>();
let count = 0;

/**
 * A lease is due for renewal once no more than this share of its ttl is left
 * of its validity: 30 % of the ttl after the send of the call that took or
 * last extended it (its validity counts from there). Counted from the answer,
 * a Redis 40 ms away let the validity of a 100 ms lease run out between
 * renewals, and one 60 ms away lost it.
 */
const DUE = 0.7;

/** Seconds between sweeps: a sixth of the shortest ttl watched, within these bounds. */
const MIN_TICK = 0.01;
const MAX_TICK = 0.5;
/** What the sweep sleeps now (or is about to): a lease that needs less wakes it (hurry). */
let tick = MAX_TICK;

function tickFor(ttl: number): number {
  return math_max(MIN_TICK, math_min(MAX_TICK, ttl / 6000));
}

/** Before each sleep: from the leases watched now, so that it grows again once the short ones are gone. */
function nextTick(this: void): number {
  let t = MAX_TICK;
  for (const [l] of lua_pairs(watched)) {
    const lt = tickFor(l.ttl);
    if (lt < t) t = lt;
  }
  tick = t;
  return t;
}


function drop(l: lease.Lease): void {
  if (watched.has(l)) {
    watched.delete(l);
    count--;
  }
}

/** Run a lease's on_lost; what it raises is logged. */
function tell(this: void, _premature: boolean, onLost: lease.OnLost, l: lease.Lease, why: string): void {
  const [ok, err] = lua_pcall(onLost, l, why);
  if (!ok) {
    ngx_log(ERR, "dlock: on_lost of the lease on ", l.key, " raised: ", check.text(err));
  }
}

/** The lease is lost: say so once, and tell its holder. `counted`: the renewal's answer counted it already (settle). */
function lost(l: lease.Lease, why: string, hooks: Hooks | undefined, counted: boolean): void {
  drop(l);
  if (l._lost) return;
  l._lost = true;
  if (!counted) meter.lost(l._store.meter);
  if (hooks !== undefined) {
    hooks.lost(l, why);
    return;
  }
  ngx_log(ERR, "dlock: lease on ", l.key, " lost: ", why);
  const onLost = l._onLost;
  if (onLost !== undefined) {
    // In a timer of its own: a callback that calls Redis (takes the key again,
    // waits) must not hold up the renewals of every other lease of the worker.
    const [ok] = timer_at(0, tell, onLost, l, why);
    if (ok === undefined) tell(false, onLost, l, why);
  }
}

/** Has what took the lease ended (a request that is over, a timer whose function returned)? */
function orphaned(w: Watched): boolean {
  if (w.hooks !== undefined) return false;
  if (w.anchor !== undefined) return !request.alive(w.anchor);
  return w.co !== undefined && request.finished(w.co);
}

/** Renew the leases due, and settle what their answers say. */
function renew(due: lease.Lease[]): void {
  const results = batch.extendAll(due);
  for (const i of $range(1, due.length)) {
    const l = due[i - 1]!;
    const w = watched.get(l);
    const r = results[i - 1]!;
    // Released (or being released, or no longer watched) while the renewal was on its way: nothing was lost.
    if (w !== undefined && !l._releasing) {
      const hooks = w.hooks;
      if (r === true) {
        if (hooks !== undefined) hooks.renewed(l);
      } else if (r === "not_owner") {
        lost(l, "the key is gone from Redis, or someone else's", hooks, true);
      } else if (clock_now() * 1000 >= l._validUntil) {
        lost(l, "Redis could not renew it before it expired (" + check.reason(r) + ")", hooks, false);
      } else if (hooks !== undefined) {
        hooks.failed(l, r);
      } else {
        const n = quiet_due(unanswered);
        if (n > 0) {
          ngx_log(WARN, "dlock: renewing the lease on ", l.key, ": ", check.reason(r), " (trying again)",
            quiet_more(n));
        }
      }
    }
  }
}

/** renew(list) in a light thread of its own; its leases are not sent again until it is back (raise or not). */
function renewApart(this: void, list: lease.Lease[]): void {
  const [ok, err] = lua_pcall(renew, list);
  if (!ok) ngx_log(ERR, "dlock: lease watchdog: ", check.text(err));
  for (const [_, l] of lua_ipairs(list)) {
    const w = watched.get(l);
    if (w !== undefined) w.renewing = false;
  }
}

/**
 * The leases due, renewed: of one endpoint (the usual case) in this round; of
 * several, each endpoint's in a light thread that the sweep does not wait for,
 * so that a Redis that does not answer (paused, failing over) holds up neither
 * the others' renewals nor the next rounds, which renew its leases once it is back.
 */
function renewByEndpoint(due: lease.Lease[]): void {
  const groups = batch.perEndpoint(due);
  if (groups === undefined) {
    renew(due);
    return;
  }
  for (const [_, list] of lua_pairs(groups)) {
    for (const [_, l] of lua_ipairs(list)) watched.get(l)!.renewing = true;
    const [ok] = lua_pcall(thread_spawn, renewApart, list);
    if (!ok) renewApart(list);
  }
}

function round(): void {
  ngx_update_time();
  const now = clock_now();
  const due: lease.Lease[] = [];
  const forgotten: lease.Lease[] = [];
  for (const [l, w] of lua_pairs(watched)) {
    if (l._released || l._releasing || l._lost) {
      drop(l);
    } else if (orphaned(w)) {
      forgotten.push(l);
    } else if (!w.renewing && l._validUntil - now * 1000 <= l.ttl * DUE) {
      due.push(l);
    }
  }
  let releasing: NgxThread | undefined;
  if (forgotten.length > 0) {
    for (const [_, l] of lua_ipairs(forgotten)) {
      drop(l);
      ngx_log(WARN, "dlock: lease on ", l.key, " (renew = true) outlived the request or timer that took it: released");
    }
    // Beside the renewals, not before them: a Redis slow to answer the releases holds up no renewal.
    const [ok, co] = lua_pcall(thread_spawn, batch.releaseAll, forgotten);
    if (ok) releasing = co as NgxThread;
    else batch.releaseAll(forgotten);
  }
  if (due.length > 0) renewByEndpoint(due);
  if (releasing !== undefined) thread_wait(releasing);
}

const sweeper: loop.Loop = {
  name: "lease watchdog",
  busy: () => count > 0,
  tick: nextTick,
  round,
  running: false,
};

/** l needs renewing sooner than the sweep now sleeps: wake it. */
function sooner(l: lease.Lease): void {
  const t = tickFor(l.ttl);
  if (t < tick) {
    tick = t;
    loop.hurry(sweeper);
  }
}

/**
 * Keep l alive until it is released, lost, unwatched, or (without hooks) what
 * took it ends. With hooks, the caller hears of every renewal.
 */
function watch(l: lease.Lease, hooks?: Hooks): string | undefined {
  let co: LuaThread | undefined;
  let anchor: request.Anchor | undefined;
  if (hooks === undefined) {
    anchor = request.anchor();
    if (anchor === undefined) co = co_running();
  }
  if (!watched.has(l)) count++;
  watched.set(l, { lease: l, anchor, co, hooks, renewing: false });
  const err = loop.start(sweeper);
  if (err !== undefined) {
    drop(l);
    return err;
  }
  sooner(l);
  return undefined;
}

/** Does the watchdog renew l (renew = true, not yet released or lost)? */
export function watches(l: lease.Lease): boolean {
  return watched.has(l);
}

/** Its holder extended l (lease:extend): at its new ttl, which may want the sweep sooner than it sleeps. */
export function extended(l: lease.Lease): void {
  if (!watched.has(l)) return;
  sooner(l);
}

/**
 * The end of an acquire with renew = true: the lease, watched from now on; or,
 * when the watchdog cannot run, nil and why (the lease is given back).
 */
export function hold(l: lease.Lease, onLost: lease.OnLost | undefined): lease.AcquireResult {
  l._onLost = onLost;
  const err = watch(l);
  if (err !== undefined) {
    l.release();
    return $multi(undefined, err, undefined);
  }
  return $multi(l, undefined, undefined);
}

/** Stop renewing l (its holder keeps it as it is, or ends it). */
export function unwatch(l: lease.Lease): void {
  drop(l);
}

/** Leases the watchdog of this worker renews now (for status pages). */
export function size(): number {
  return count;
}

// Exported by name: this module's own uses of them are locals, not lookups in its exports table.
export { watch };
