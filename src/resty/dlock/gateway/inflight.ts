// The leases of in-flight gateway requests, per worker: found again by request
// (not by ngx.ctx, which an internal redirect replaces), renewed while the
// request runs, and ended when the request ends, however it ends:
// - log() of any guard, or the module-level gateway.log(), in whatever location
//   the request finishes: release (or, dedup after a 2xx, hold the key);
// - a client that went away while an upstream was working: the backend may
//   still be running, so the key is kept until its lease runs out, unrenewed;
// - a request that ended without any log() (its final location has none): the
//   keeper notices it is gone and releases.
//
// One keeper loop per worker watches every in-flight request, in rounds (the
// watchdog, one sweep per worker too, renews their leases): a timer per request or per guard would exhaust lua_max_pending_timers
// on a busy gateway, ngx.timer.every lets rounds overlap when Redis is slow, and
// it stops when the worker starts exiting (nginx -s reload / quit) while that
// worker still has requests running. The loop runs while there is anything to
// watch, also in an exiting worker, and hands over to a fresh timer now and
// then. Releases cannot go out from the log phase (no cosockets there): they
// are queued and drained by a few timers, one pipeline per guard.

import * as check from "../core/check";
import * as batch from "../core/batch";
import type * as lease from "../core/lease";
import * as loop from "../core/loop";
import * as request from "./request";
import * as stats from "./stats";
import * as watchdog from "../core/watchdog";

/** What the keeper and the drains need of a guard. */
export interface Owner {
  readonly name: string;
  readonly dict: NgxSharedDict;
  readonly ttl: number;
  /** Extend the lease while the request runs. */
  readonly renew: boolean;
  /** Release when the request ends (throttle keeps its key for the whole ttl). */
  readonly release: boolean;
  /** ms to keep the key after a 2xx (dedup `hold`), 0 to release. */
  readonly hold: number;
  /** Called when a request of this owner ended without any log() (what it kept of the request can go). */
  readonly unlogged?: (this: void, rid: number) => void;
}

interface Held {
  readonly owner: Owner;
  readonly lease: lease.Lease;
  done: boolean;
}

interface Req {
  readonly anchor: request.Anchor;
  readonly held: Held[];
}

/** In-flight requests of this worker that hold a guard's lease, by request id. */
const requests = new LuaTable<number, Req>();
let count = 0;

// ------------------------------------------------------------ the release queue

interface Finish {
  owner: Owner;
  lease: lease.Lease;
  /** ms to keep the key instead of releasing it. */
  hold: number;
}

const queue = new LuaTable<number, Finish>();
let head = 1;
let tail = 0;
let draining = 0;
const MAX_DRAINERS = 8;
const BATCH = 64;
/** Batches one drain timer works off before it hands over to a fresh one. */
const DRAIN_ROUNDS = 32;

function hold(this: void, f: Finish): void {
  const [ok, err] = f.lease.extend(f.hold);
  if (ok === undefined && err !== "not_owner") {
    failed(f.owner, "holding " + f.lease.key, err);
  }
}

function releaseList(this: void, owner: Owner, list: lease.Lease[]): void {
  const [n, err] = batch.releaseAll(list);
  if (n > 0) {
    failed(owner, "releasing " + n + " lease(s)", err);
  }
}

function drain(this: void, premature: boolean): void {
  // Runs also when premature (the worker is exiting): cosockets still work here.
  // Each piece of work is protected: one that raises must neither take the rest
  // of its batch down nor leave `draining` counted up for good.
  for (const _ of $range(1, DRAIN_ROUNDS)) {
    if (head > tail) break;
    // Releases of one guard go out together, one pipeline per guard; holds one by one.
    const byOwner = new LuaMap<Owner, lease.Lease[]>();
    for (const _ of $range(1, BATCH)) {
      if (head > tail) break;
      const f = queue.get(head);
      queue.delete(head);
      head++;
      if (f.hold > 0) {
        const [ok, err] = pcall(hold, f);
        if (!ok) raised(err);
      } else {
        let list = byOwner.get(f.owner);
        if (list === undefined) {
          list = [];
          byOwner.set(f.owner, list);
        }
        list.push(f.lease);
      }
    }
    for (const [owner, list] of byOwner) {
      const [ok, err] = pcall(releaseList, owner, list);
      if (!ok) raised(err);
    }
  }
  draining--;
  // More than one timer's share is queued: a fresh timer takes over.
  schedule();
}

function raised(err: unknown): void {
  ngx.log(ngx.ERR, "dlock: gateway release queue: ", check.text(err));
}

/** Start drain timers for what is queued (at most MAX_DRAINERS at once). */
function schedule(): void {
  if (head > tail || draining >= MAX_DRAINERS || draining >= tail - head + 1) {
    return;
  }
  // A delay of 0 is the one nginx still allows in a worker that is exiting.
  const [ok, err] = ngx.timer.at(0, drain);
  if (ok) {
    draining++;
  } else if (draining === 0) {
    ngx.log(ngx.ERR, "dlock: gateway: cannot schedule ", tail - head + 1,
      " release(s), they expire on their own: ", err);
  }
}

/** Queue the end of a lease for a timer: release it, or keep it `hold` more ms. */
export function enqueue(owner: Owner, l: lease.Lease, hold: number): void {
  tail++;
  queue.set(tail, { owner, lease: l, hold });
  schedule();
}

function failed(owner: Owner, what: string, err: string | undefined): void {
  stats.incr(owner.dict, owner.name, "redis_errors");
  ngx.log(ngx.WARN, "dlock: guard ", owner.name, ": ", what, " failed (retried until Redis answers or the lease expires): ",
    check.reason(err));
}

// ------------------------------------------------------------ ending requests

/** How a request ended, for the leases it holds. */
type End = "logged" | "aborted" | "unlogged";

const warnedUnlogged = new LuaSet<string>();

function endHeld(h: Held, how: End, status: number): void {
  if (h.done) {
    return;
  }
  h.done = true;
  // No more renewals: released or held below, or (aborted) kept until it runs out.
  watchdog.unwatch(h.lease);
  heldOf.delete(h.lease);
  const o = h.owner;
  stats.adjust(o.dict, o.name, "in_flight", -1);
  if (!o.release) {
    return;
  }
  if (how === "aborted") {
    // The client went away while an upstream worked on the request; nginx cut
    // that connection but the backend may still be running. Keep the key until
    // its lease runs out (no more renewals) rather than let a retry in beside it.
    stats.incr(o.dict, o.name, "aborted");
    return;
  }
  if (how === "unlogged") {
    stats.incr(o.dict, o.name, "unlogged");
    if (!warnedUnlogged.has(o.name)) {
      warnedUnlogged.add(o.name);
      ngx.log(ngx.WARN, "dlock: guard ", o.name, ": a request ended without log() (its final location runs none, ",
        "e.g. after error_page, try_files or X-Accel-Redirect); its lease was released late and a client abort ",
        "could not be seen: add log_by_lua_block { require(\"resty.dlock.gateway\").log() } at http level");
    }
  }
  enqueue(o, h.lease, how === "logged" && o.hold > 0 && status >= 200 && status < 300 ? o.hold : 0);
}

function endReq(rid: number, req: Req, how: End, status: number): void {
  requests.delete(rid);
  count--;
  for (const h of req.held) {
    endHeld(h, how, status);
    if (how === "unlogged" && h.owner.unlogged !== undefined) {
      h.owner.unlogged(rid);
    }
  }
}

/** How the current request (in its log phase) ended: aborted by the client while an upstream worked, or logged. */
function outcome(): End {
  if (ngx.var.get("request_completion") !== "OK") {
    const upstream = ngx.var.get("upstream_addr");
    if (upstream !== undefined && upstream !== "") {
      return "aborted";
    }
  }
  return "logged";
}

/**
 * The current request (log phase) is over: end the leases it holds of `owner`,
 * or of every guard when owner is nil.
 */
export function finish(owner: Owner | undefined): void {
  const rid = request.id();
  if (rid === undefined) return;
  const req = requests.get(rid);
  if (req === undefined) return;
  if (!request.alive(req.anchor)) {
    // A request that is gone had this address before us and ended unseen.
    endReq(rid, req, "unlogged", 0);
    return;
  }
  const how = outcome();
  const status = ngx.status;
  if (owner === undefined) {
    endReq(rid, req, how, status);
    return;
  }
  let open = 0;
  for (const h of req.held) {
    if (h.owner === owner) {
      endHeld(h, how, status);
    } else if (!h.done) {
      open++;
    }
  }
  if (open === 0) {
    requests.delete(rid);
    count--;
  }
}

/**
 * In access: does the current request hold a lease of `owner` already? True
 * when it passes the guard again after an internal redirect (try_files to a
 * named location with the same guard, error_page...): it must not queue
 * behind itself. A request that is gone and had the same address is ended here.
 */
export function holds(owner: Owner): boolean {
  const rid = request.id();
  if (rid === undefined) return false;
  const req = requests.get(rid);
  if (req === undefined) return false;
  if (!request.alive(req.anchor)) {
    endReq(rid, req, "unlogged", 0);
    return false;
  }
  for (const h of req.held) {
    if (h.owner === owner && !h.done) return true;
  }
  return false;
}

// ------------------------------------------------------------ the keeper

/** Seconds between keeper rounds: a sixth of the shortest ttl, within these bounds. */
const MIN_TICK = 0.05;
const MAX_TICK = 0.5;

let tick = MAX_TICK;

/** Leases the watchdog renews for in-flight requests, and whose they are. */
const heldOf = new LuaTable<lease.Lease, Held>();
/** Per guard, what the watchdog tells about its renewals. */
const hooksOf = new LuaMap<Owner, watchdog.Hooks>();

function hooks(owner: Owner): watchdog.Hooks {
  let hk = hooksOf.get(owner);
  if (hk === undefined) {
    hk = {
      renewed(this: void): void {
        stats.incr(owner.dict, owner.name, "renewed");
      },
      lost(this: void, l: lease.Lease): void {
        const h = heldOf.get(l);
        heldOf.delete(l);
        if (h === undefined || h.done) return;
        h.done = true;
        stats.adjust(owner.dict, owner.name, "in_flight", -1);
        stats.incr(owner.dict, owner.name, "lost");
        ngx.log(ngx.ERR, "dlock: guard ", owner.name, ": lease on ", l.key, " lost while its request is in flight");
      },
      failed(this: void, l: lease.Lease, err: string): void {
        // A Redis hiccup: the next sweep tries again; if the lease runs out meanwhile, it is reported lost.
        stats.incr(owner.dict, owner.name, "redis_errors");
        ngx.log(ngx.WARN, "dlock: guard ", owner.name, ": renewing ", l.key, ": ", check.reason(err));
      },
    };
    hooksOf.set(owner, hk);
  }
  return hk;
}

/** One round: end the requests that are gone (the watchdog renews the leases of the others). */
function round(): void {
  const gone: number[] = [];
  for (const [rid, req] of requests) {
    if (!request.alive(req.anchor)) {
      gone.push(rid);
    }
  }
  for (const rid of gone) {
    const req = requests.get(rid);
    if (req !== undefined && !request.alive(req.anchor)) {
      endReq(rid, req, "unlogged", 0);
    }
  }
}

const keeper: loop.Loop = {
  name: "gateway keeper",
  busy: () => count > 0,
  tick: () => tick,
  round,
  running: false,
};

function keep(owner: Owner): void {
  tick = math.min(tick, math.max(MIN_TICK, owner.ttl / 6000));
  const err = loop.start(keeper);
  if (err !== undefined) ngx.log(ngx.ERR, "dlock: guard ", owner.name, ": ", check.reason(err));
}

let warnedBlind = false;

/** In access: the current request now holds `l` for `owner`. */
export function track(owner: Owner, l: lease.Lease, anchor: request.Anchor): void {
  if (anchor.ref < 0 && !warnedBlind) {
    warnedBlind = true;
    ngx.log(ngx.WARN, "dlock: gateway: this ngx_lua does not let us see when a request is over: only log() ",
      "ends a lease, so put log_by_lua_block { require(\"resty.dlock.gateway\").log() } at http level");
  }
  let req = requests.get(anchor.id);
  if (req === undefined || req.anchor.ctx !== anchor.ctx) {
    if (req !== undefined) {
      // Its address belonged to a request that is gone and ended unseen.
      endReq(anchor.id, req, "unlogged", 0);
    }
    req = { anchor, held: [] };
    requests.set(anchor.id, req);
    count++;
  }
  const h: Held = { owner, lease: l, done: false };
  req.held.push(h);
  stats.adjust(owner.dict, owner.name, "in_flight", 1);
  if (owner.renew) {
    heldOf.set(l, h);
    const werr = watchdog.watch(l, hooks(owner));
    if (werr !== undefined) ngx.log(ngx.ERR, "dlock: guard ", owner.name, ": ", check.reason(werr));
  }
  keep(owner);
}
