// The leases of in-flight gateway requests, per worker: found again by request (not by ngx.ctx,
// which an internal redirect replaces), renewed while the request runs, and ended when the
// request ends, however it ends:
// - log() of any guard, or the module-level gateway.log(), in whatever location the request
//   finishes: release (or, dedup after a 2xx, hold the key);
// - a client that went away while an upstream was working, or an upstream that timed out: the
//   backend may still be running, so the key is kept until its lease runs out, unrenewed;
// - a request that ended without any log() (its final location has none): the keeper notices
//   it is gone and releases.
//
// One keeper loop per worker watches every in-flight request, in rounds (the watchdog, one sweep
// per worker too, renews their leases): a timer per request or per guard would exhaust
// lua_max_pending_timers on a busy gateway, ngx.timer.every lets rounds overlap when Redis is slow,
// and it stops when the worker starts exiting (nginx -s reload / quit) while that worker still
// has requests running. The loop runs while there is anything to watch, also in an exiting
// worker, and hands over to a fresh timer now and then. The log phase has no cosockets:
// releases.ts puts a release into the worker's next pipeline (or queues it, and a hold, for a
// timer); renewals.ts has the watchdog renew the leases meanwhile.

import * as advice from "./advice";
import type * as lease from "../core/lease";
import * as loop from "../core/loop";
import * as releases from "./releases";
import * as renewals from "./renewals";
import * as request from "../core/request";
import * as upstream from "./upstream";
import * as stats from "./stats";
import * as subrequests from "./subrequests";

const ngx_ = ngx;
const math_min = math.min;
const math_max = math.max;
const request_id = request.id;
const request_alive = request.alive;
const request_here = request.here;
const request_main = request.mainOf;
const request_connection = request.connection;
const answered = releases.answered;
const advice_unlogged = advice.unlogged;
const lua_pairs = pairs;

/** What the keeper and the drains need of a guard. */
export interface Owner {
  readonly name: string;
  readonly _dict: NgxSharedDict;
  readonly _ttl: number;
  /** Extend the lease while the request runs. */
  readonly _renew: boolean;
  /** Release when the request ends (throttle keeps its key for the whole ttl). */
  readonly _release: boolean;
  /** Released when a later guard refuses the request in the same pass (a throttle: the request never ran). */
  readonly _givesBack?: boolean;
  /** ms to keep the key after a 2xx (dedup `hold`), 0 to release. */
  readonly _hold: number;
  /** Called when a request of this owner ended without any log() (what it kept of the request can go). */
  readonly _unlogged?: (this: void, rid: number) => void;
}

type Held = renewals.Held;

/**
 * A request holding leases, its own anchor: its first lease is held in the
 * record itself (one table for the usual request, which passes one guard), the
 * others in `more`.
 */
interface Req extends Held, request.Anchor {
  more: Held[] | undefined;
  /** A subrequest's: its main request's connection, whose log() ends it (subrequests.ts). */
  readonly conn: number | undefined;
}

/** In-flight requests of this worker that hold a guard's lease, by request id. */
const requests = new LuaTable<number, Req>();
let count = 0;

// ------------------------------------------------------------ ending requests

/** How a request ended, for the leases it holds ("refused": by a later guard, in access). */
type End = "logged" | "aborted" | "unlogged" | "refused";

function endHeld(h: Held, how: End, status: number): void {
  if (h.done) {
    return;
  }
  h.done = true;
  // No more renewals: released or held below, or (aborted) kept until it runs out.
  const o = h.owner;
  if (o._renew) renewals.unwatch(h);
  stats.adjust(o._dict, o.name, "in_flight", -1);
  if (!o._release && !(how === "refused" && o._givesBack === true)) {
    return;
  }
  if (how === "aborted") {
    // The client went away while an upstream worked on the request; nginx cut
    // that connection but the backend may still be running. Keep the key until
    // its lease runs out (no more renewals) rather than let a retry in beside it.
    stats.incr(o._dict, o.name, "aborted");
    return;
  }
  if (how === "unlogged") {
    stats.incr(o._dict, o.name, "unlogged");
    advice_unlogged(o.name);
  }
  releases.done(h, how === "logged" && o._hold > 0 && status >= 200 && status < 300 ? o._hold : 0);
}

function endOne(rid: number, h: Held, how: End, status: number): void {
  endHeld(h, how, status);
  const unlogged = h.owner._unlogged;
  if (how === "unlogged" && unlogged !== undefined) {
    unlogged(rid);
  }
}

function endReq(rid: number, req: Req, how: End, status: number): void {
  requests.delete(rid);
  count--;
  if (req.conn !== undefined) subrequests.unlink(req.conn, rid);
  endOne(rid, req, how, status);
  const more = req.more;
  if (more !== undefined) {
    for (const i of $range(1, more.length)) endOne(rid, more[i - 1]!, how, status);
  }
}

/** The current request's record, after ending the one of a request that is gone and had its address; and its id. */
function current(): LuaMultiReturn<[Req | undefined, number]> {
  const rid = request_id();
  if (rid === undefined) return $multi(undefined, 0);
  const req = requests.get(rid);
  if (req === undefined) return $multi(undefined, rid);
  if (!request_alive(req)) {
    // A request that is gone had this address before us and ended unseen.
    endReq(rid, req, "unlogged", 0);
    return $multi(undefined, rid);
  }
  return $multi(req, rid);
}

/** End the leases req (request rid) holds of `owner`, or of every guard when owner is nil. */
function endOwned(rid: number, req: Req, owner: Owner | undefined, how: End, status: number): void {
  if (owner === undefined) {
    endReq(rid, req, how, status);
    return;
  }
  let open = 0;
  if (req.owner === owner) {
    endHeld(req, how, status);
  } else if (!req.done) {
    open++;
  }
  const more = req.more;
  if (more !== undefined) {
    for (const i of $range(1, more.length)) {
      const h = more[i - 1]!;
      if (h.owner === owner) {
        endHeld(h, how, status);
      } else if (!h.done) {
        open++;
      }
    }
  }
  if (open === 0) endReq(rid, req, how, status);
}

/**
 * The current request (log phase) is over: end the leases it holds of
 * `owner`, or of every guard when owner is nil; and those its subrequests
 * took (they have no log phase of their own).
 */
export function finish(owner: Owner | undefined): void {
  const [req, rid] = current();
  let subs: number[] | undefined;
  if (subrequests.any()) subs = subrequests.of(request_connection()!);
  if (req === undefined && subs === undefined) return;
  const how: End = upstream.aborted() ? "aborted" : "logged";
  const status = ngx_.status;
  if (req !== undefined) endOwned(rid, req, owner, how, status);
  if (subs === undefined) return;
  let i = subs.length;
  while (i >= 1) {
    const sid = subs[i - 1]!;
    const sub = requests.get(sid);
    if (sub !== undefined) endOwned(sid, sub, owner, how, status);
    i--;
  }
}

/**
 * In access: does the current request hold `owner`'s lease on key already?
 * True when it passes the guard again after an internal redirect (try_files
 * to a named location with the same guard, error_page...) on the same key: it
 * must not queue behind itself. A redirect that changed its key ($uri, the
 * arguments) finds false: the key it is now under is taken like any other.
 * key nil: any key of owner's (an idempotency claim is the request's, whatever its location).
 * A request that is gone and had the same address is ended here.
 */
export function holds(owner: Owner, key: string | undefined): boolean {
  const [req] = current();
  if (req === undefined) return false;
  if (req.owner === owner && !req.done && (key === undefined || req.lease.key === key)) return true;
  const more = req.more;
  if (more !== undefined) {
    for (const i of $range(1, more.length)) {
      const h = more[i - 1]!;
      if (h.owner === owner && !h.done && (key === undefined || h.lease.key === key)) return true;
    }
  }
  return false;
}

/** A later guard refused request rid in the pass that took its leases (giveback.ts): a throttle gives its key back. */
export function refused(rid: number, ctx: LuaTable<string, unknown>): void {
  const req = requests.get(rid);
  // Taken in an earlier pass (before an internal redirect): the request may have run.
  if (req === undefined || req.ctx !== ctx || !request_alive(req)) return;
  if (req.owner._givesBack === true) endHeld(req, "refused", 0);
  const more = req.more;
  if (more === undefined) return;
  for (const i of $range(1, more.length)) {
    if (more[i - 1]!.owner._givesBack === true) endHeld(more[i - 1]!, "refused", 0);
  }
}

// ------------------------------------------------------------ the keeper

/** Seconds between keeper rounds: a sixth of the shortest ttl, within these bounds. */
const MIN_TICK = 0.05;
const MAX_TICK = 0.5;

let tick = MAX_TICK;

/** One round: end the requests that are gone (the watchdog renews the leases of the others). */
function round(): void {
  const gone: number[] = [];
  for (const [rid, req] of lua_pairs(requests)) {
    if (!request_alive(req)) {
      gone.push(rid);
    }
  }
  for (const i of $range(1, gone.length)) {
    const rid = gone[i - 1]!;
    const req = requests.get(rid);
    if (req !== undefined && !request_alive(req)) {
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
  tick = math_min(tick, math_max(MIN_TICK, owner._ttl / 6000));
  if (keeper.running) return;
  const err = loop.start(keeper);
  if (err !== undefined) advice.noKeeper(owner.name, err);
}

/**
 * Is req, at the current request's address, gone and ended unseen? Not this
 * one after a redirect to another guard (a new ngx.ctx, the same live request),
 * unless nginx hides whether a request lives.
 */
function ended(req: Req, ctx: LuaTable<string, unknown>): boolean {
  return (req.ref < 0 && req.ctx !== ctx) || (req.ref >= 0 && !request_alive(req));
}

/**
 * In access: the current request now holds `l` for `owner`. Returns the
 * request's anchor; nil outside a request (then nothing is tracked); false
 * when the lease cannot be renewed (it is let go: the guard's on_error decides).
 */
export function track(owner: Owner, l: lease.Lease): request.Anchor | false | undefined {
  const [rid, ctx, ref] = request_here();
  if (rid === undefined) return undefined;
  if (ref < 0) advice.blind();
  let req: Req | undefined = requests.get(rid);
  if (req !== undefined && ended(req, ctx)) {
    endReq(rid, req, "unlogged", 0);
    req = undefined;
  }
  let h: Held;
  if (req === undefined) {
    const conn = request_main();
    req = { id: rid, ctx, ref, owner, lease: l, done: false, answered, more: undefined, conn };
    requests.set(rid, req);
    count++;
    if (conn !== undefined) subrequests.link(conn, rid);
    h = req;
  } else {
    h = { owner, lease: l, done: false, answered };
    if (req.more === undefined) req.more = [];
    req.more[req.more.length] = h;
  }
  stats.adjust(owner._dict, owner.name, "in_flight", 1);
  keep(owner);
  // Unrenewed, it would run out under the running request and let a second one in.
  if (owner._renew && !renewals.watch(h)) {
    endHeld(h, "logged", 0);
    return false;
  }
  return req;
}
