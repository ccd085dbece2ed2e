// A request that holds a claim: the keeper renews the claim while it runs, the
// header and body filters note its response (up to max_body), and at the end
// of the body the claim becomes the stored record, written into the worker's
// next pipeline (filters have no cosockets; a timer when it cannot go that
// way). The captures table (requests of this worker holding a claim) lives
// here alone.

import * as backend from "../../redis/backend";
import type * as redis from "../../redis/client";
import * as check from "../../core/check";
import * as inflight from "../inflight";
import type * as lease from "../../core/lease";
import * as ledger from "../../core/ledger";
import * as meter from "../../core/meter";
import * as request from "../request";
import * as settle from "../../core/settle";
import * as scripts from "../../redis/scripts";
import * as stats from "../stats";
import * as claims from "./claim";
import type * as options from "./options";

const lua_pairs = pairs;
const lua_ipairs = ipairs;
const ngx_log = ngx.log;
const ERR = ngx.ERR;
const WARN = ngx.WARN;
const ngx_now = ngx.now;
const ngx_update_time = ngx.update_time;
const ngx_sleep = ngx.sleep;
const ngx_var = ngx.var;
const timer_at = ngx.timer.at;
const ngx_ = ngx;
const math_min = math.min;
const str_lower = string.lower;
const table_sort = table.sort;
const table_concat = table.concat;
const lua_type = type;
const lua_tostring = tostring;

type Guard = options.Guard;

// The parts of the ngx API only the filters use.
/** @noSelf */
interface NgxResp {
  get_headers(max?: number): LuaMultiReturn<[LuaTable<string, string | LuaTable<number, string>>, string | undefined]>;
}
interface NgxFilter {
  /** body_filter: [1] the chunk, [2] true at the end of the body. */
  readonly arg: LuaTable<number, unknown>;
  readonly resp: NgxResp;
}

// ngx.arg is one table whose fields read the current body_filter call's arguments.
const ngx_arg = (ngx as unknown as NgxFilter).arg;
const resp_get_headers = (ngx as unknown as NgxFilter).resp.get_headers;

const FINISHED = claims.FINISHED;

/** The response of a request that holds a claim, as the filters see it. */
interface Capture {
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
}

/** Requests of this worker that hold a claim, by request id (the same through internal redirects). */
const captures = new LuaTable<number, Capture>();

function current(): Capture | undefined {
  const rid = request.id();
  if (rid === undefined) return undefined;
  const c = captures.get(rid);
  if (c === undefined) return undefined;
  if (!request.alive(c.anchor)) {
    // A request that is gone had this address before: it ended unseen.
    captures.delete(rid);
    return undefined;
  }
  return c;
}

/** We hold the claim: renew it while the request runs, capture the response. */
export function hold(g: Guard, rkey: string, tok: string, fp: string): void {
  stats.incr(g.dict, g.name, "acquired");
  if (request.id() === undefined) return;
  const rec = ledger.recordKey(rkey, tok, true);
  const [recorded, recv] = ledger.record(g.dict, rec, tok, rkey, g.lease);
  if (recorded !== undefined) meter.recorded(g.leaseStore.meter, recorded);
  const now = ngx_now() * 1000;
  // Shaped as a lease of the lock, so the keeper renews it with the others (one pipeline per guard).
  const l = {
    key: rkey, token: tok, ttl: g.lease, fence: undefined, _store: g.leaseStore, _kind: g.kind, _rkey: rkey, _rec: rec,
    _recv: recv, _recAt: recorded ?? 0, _validUntil: now + g.lease, _expires: now + g.lease, _since: now,
  } as unknown as lease.Lease;
  const a = inflight.track(g.owner, l)!;
  captures.set(a.id, {
    g, anchor: a, lease: l, fp, status: undefined, headers: "", chunks: [], size: 0, tooLarge: false, complete: false,
    state: "", body: "", answered,
  });
}

export function headerFilter(): void {
  const c = current();
  if (c === undefined || c.complete) return;
  c.status = ngx_.status;
  const [hs] = resp_get_headers(200);
  const lines: string[] = [];
  for (const [name, v] of lua_pairs(hs)) {
    const n = str_lower(name as string);
    if (!c.g.skip.has(n)) {
      if (lua_type(v) === "table") {
        for (const [, one] of lua_ipairs(v as unknown as string[])) {
          lines.push(n + ": " + one + "\n");
        }
      } else {
        lines.push(n + ": " + lua_tostring(v) + "\n");
      }
    }
  }
  // A stable order: the same response stores the same bytes.
  table_sort(lines);
  c.headers = table_concat(lines);
}

export function bodyFilter(): void {
  const c = current();
  if (c === undefined || c.complete || c.status === undefined) return;
  const arg = ngx_arg;
  const chunk = arg.get(1);
  if (!c.tooLarge && lua_type(chunk) === "string" && (chunk as string).length > 0) {
    const s = chunk as string;
    c.size += s.length;
    if (c.size > c.g.maxBody) {
      // Not silently: the record says the operation completed, retries are told it is not replayable.
      c.tooLarge = true;
      c.chunks = [];
    } else {
      c.chunks.push(s);
    }
  }
  if (arg.get(2) === true) {
    if (!AMBIGUOUS.has(lua_tostring(c.status))) {
      // Before these last bytes leave: a retry reaching this nginx waits for the store, not 409.
      c.g.dict.set(FINISHED + c.lease._rkey, true, c.g.lease / 1000);
    }
    schedule(c);
  }
}

/**
 * The response is complete. No cosockets in the filters or the log phase: a
 * response to store rides the worker's next pipeline (backend.post); what the
 * store's reply says is seen to by answered(). A timer stores it when it
 * cannot go that way or Redis did not answer, and drops the claim of a
 * response not to store.
 */
function schedule(c: Capture): void {
  c.complete = true;
  const g = c.g;
  const status = c.status!;
  if (g.store.get(status) === true) {
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

/** The store of c's response, sent through `send` (backend.call, or backend.post). */
function completing<R>(send: (this: void, conf: redis.RedisConf, s: scripts.Script, rkey: string, ...args: (string | number)[]) => R, c: Capture): R {
  const l = c.lease;
  return send(c.g.conf, scripts.IDEM_COMPLETE, l._rkey, l.token, c.g.ttl, c.state, c.status!, c.headers, c.body);
}

/** Store c from a timer. */
function later(c: Capture): void {
  const [ok, err] = timer_at(0, store, c);
  if (!ok) {
    c.g.dict.delete(FINISHED + c.lease._rkey);
    stats.incr(c.g.dict, c.g.name, "not_stored");
    ngx_log(ERR, "dlock: guard ", c.g.name, ": cannot store the response (the key stays claimed until its lease ",
      "runs out): ", err);
  }
}

/** Statuses not stored after which the backend may still be working (gateway timeout, cut connection). */
const AMBIGUOUS = check.set("502", "504");

/** What Redis answered to the store of c, seen to; false when it did not answer. */
function stored(c: Capture, res: RedisValue | undefined): boolean {
  const g = c.g;
  const l = c.lease;
  if (res === undefined) return false;
  g.dict.delete(FINISHED + l._rkey);
  if (res === 1) {
    stats.incr(g.dict, g.name, c.tooLarge ? "not_stored" : "stored");
    settle.forget(l);
    claims.notify(l._rkey, { state: c.state, fp: c.fp, status: c.status!, headers: c.headers, body: c.body });
    return true;
  }
  stats.incr(g.dict, g.name, "not_stored");
  stats.incr(g.dict, g.name, "lost");
  ngx_log(ERR, "dlock: guard ", g.name, ": the claim on ", l._rkey, " ran out before its response could be stored");
  return true;
}

/** A store that rode a pipeline was answered (in the sender's timer: nothing here may wait); a timer tries again when Redis did not answer. */
function answered(this: void, j: backend.Job): void {
  const c = j.post as Capture;
  if (stored(c, j.res)) return;
  stats.incr(c.g.dict, c.g.name, "redis_errors");
  later(c);
}

function store(this: void, premature: boolean, c: Capture): void {
  const g = c.g;
  const l = c.lease;
  const status = c.status!;
  if (g.store.get(status) !== true) {
    stats.incr(g.dict, g.name, "not_stored");
    g.dict.delete(FINISHED + l._rkey);
    if (AMBIGUOUS.has(lua_tostring(status))) {
      // The operation may have run, or may still be running: no retry before the claim runs out.
      return;
    }
    // The application said it did not do it (409, 429, 503...): retries may run it.
    const [res, err] = backend.call(g.conf, scripts.IDEM_RELEASE, l._rkey, l.token);
    if (res === undefined) {
      ngx_log(WARN, "dlock: guard ", g.name, ": dropping a claim: ", check.reason(err), " (it runs out after the lease)");
    }
    settle.forget(l);
    claims.notify(l._rkey, undefined);
    return;
  }
  // Until the claim would run out: Redis may come back meanwhile.
  ngx_update_time();
  const deadline = ngx_now() + g.lease / 1000;
  let pause = 0.05;
  while (true) {
    const [res, err] = completing(backend.call, c);
    if (stored(c, res)) return;
    stats.incr(g.dict, g.name, "redis_errors");
    ngx_update_time();
    if (ngx_now() + pause >= deadline) {
      g.dict.delete(FINISHED + l._rkey);
      stats.incr(g.dict, g.name, "not_stored");
      ngx_log(ERR, "dlock: guard ", g.name, ": response not stored, the claim runs out: ", check.reason(err));
      return;
    }
    ngx_sleep(pause);
    pause = math_min(pause * 2, 1);
  }
}

/**
 * The keeper found a request of ours that ended without log(): drop what was
 * captured of it (up to max_body of response), which no later phase will.
 */
export function forget(this: void, rid: number): void {
  const c = captures.get(rid);
  if (c !== undefined && !request.alive(c.anchor)) {
    captures.delete(rid);
  }
}

let warnedFilters = false;

/** log phase: a claim whose response never completed. */
export function finish(): void {
  const rid = request.id();
  if (rid === undefined) return;
  const c = captures.get(rid);
  if (c === undefined) return;
  captures.delete(rid);
  if (c.complete || !request.alive(c.anchor)) return;
  const g = c.g;
  stats.incr(g.dict, g.name, "not_stored");
  if (c.status === undefined && ngx_var.get("request_completion") === "OK" && !warnedFilters) {
    warnedFilters = true;
    ngx_log(WARN, "dlock: guard ", g.name, ": a response went by unseen, so it was not stored: add ",
      "header_filter_by_lua_block { require(\"resty.dlock.gateway\").header_filter() } and ",
      "body_filter_by_lua_block { require(\"resty.dlock.gateway\").body_filter() } at http level");
  }
  if (ngx_var.get("request_completion") !== "OK") {
    stats.incr(g.dict, g.name, "aborted");
  }
  // No full response (client gone while the upstream works, upstream cut): the
  // backend may still run it, so the claim stays until its lease runs out,
  // unrenewed (the keeper stops at the end of the request).
}
