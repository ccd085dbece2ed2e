// A request that holds a claim: the keeper renews the claim while it runs, the
// header and body filters note its response (up to max_body), and at the end
// of the body the claim becomes the stored record (record.ts). The captures
// table (requests of this worker holding a claim) lives here alone.

import * as inflight from "../inflight";
import * as backend from "../../redis/backend";
import * as records from "../../redis/records";
import type * as lease from "../../core/lease";
import * as ledger from "../../core/ledger";
import * as meter from "../../core/meter";
import * as request from "../../core/request";
import * as stats from "../stats";
import * as claims from "./claim";
import * as record from "./record";
import type * as options from "./options";
import * as clock from "../../core/clock";

const lua_pairs = pairs;
const lua_ipairs = ipairs;
const ngx_log = ngx.log;
const WARN = ngx.WARN;
const clock_now = clock.now;
const ngx_var = ngx.var;
const ngx_ = ngx;
const str_lower = string.lower;
const table_sort = table.sort;
const table_concat = table.concat;
const lua_type = type;
const lua_tostring = tostring;
const req_get_method = ngx.req.get_method;

type Guard = options.Guard;

// The parts of the ngx API only the filters use.
/** @noSelf */
interface NgxResp {
  get_headers(max?: number, raw?: boolean): LuaMultiReturn<[LuaTable<string, string | LuaTable<number, string>>, string | undefined]>;
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

type Capture = record.Capture;
const AMBIGUOUS = record.AMBIGUOUS;

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

/**
 * We hold the claim: renew it while the request runs, capture the response.
 * False when it cannot be renewed (no timer for the watchdog): the claim is dropped.
 */
export function hold(g: Guard, rkey: string, tok: string, fp: string): boolean {
  stats.incr(g._dict, g.name, "acquired");
  if (request.id() === undefined) return true;
  const rec = ledger.recordKey(g._leaseStore.redis.keyspace, rkey, tok, true);
  const [recorded, recv] = ledger.record(g._dict, rec, tok, rkey, g._lease);
  if (recorded !== undefined) meter.recorded(g._leaseStore.meter, recorded);
  const now = clock_now() * 1000;
  // Shaped as a lease of the lock, so the keeper renews it with the others (one pipeline per guard).
  const l = {
    key: rkey, token: tok, ttl: g._lease, fence: undefined, _store: g._leaseStore, _kind: g._kind, _rkey: rkey, _rec: rec,
    _recv: recv, _recAt: recorded ?? 0, _validUntil: now + g._lease, _expires: now + g._lease, _since: now,
  } as unknown as lease.Lease;
  const a = inflight.track(g._owner, l)!;
  if (a === false) {
    ledger.dropOwned(g._dict, rec);
    backend.call(g._conf, records.IDEM_RELEASE, rkey, tok);
    return false;
  }
  captures.set(a.id, {
    g, anchor: a, lease: l, fp, status: undefined, headers: "", chunks: [], size: 0, tooLarge: false, complete: false,
    state: "", body: "", answered: record.answered, refused: false,
  });
  return true;
}

/**
 * "name: value\n". Not a value that is empty: a replay sets headers through
 * ngx.header, where an empty value removes the header (README, stored headers).
 */
function addLine(lines: string[], n: string, v: string): void {
  if (v !== "") lines.push(n + ": " + v + "\n");
}

/** The whole response went by: store it. */
function complete(c: Capture): void {
  if (!c.refused && !AMBIGUOUS.has(lua_tostring(c.status))) {
    // Before its last bytes leave: a retry reaching this nginx waits for the store, not 409.
    // Only into free memory: a full dict never loses a lease's record for it (a retry then gets 409, not the wait).
    c.g._dict.safe_set(FINISHED + c.lease._rkey, true, c.g._lease / 1000);
  }
  record.schedule(c);
}

export function headerFilter(): void {
  const c = current();
  if (c === undefined || c.complete) return;
  c.status = ngx_.status;
  // Raw: the names as the backend wrote them, which the replay sends again.
  const [hs] = resp_get_headers(200, true);
  // A response to HEAD is its header: no body filter call ends it, and its
  // Content-Length (the GET body's) is kept for the replay.
  const head = req_get_method() === "HEAD";
  // Names in a stable order (the same response stores the same bytes); the
  // values of a repeated name in the order they were sent (RFC 9110 5.3).
  const names: string[] = [];
  for (const [name] of lua_pairs(hs)) {
    const n = str_lower(name as string);
    if (!c.g._skip.has(n) || (head && n === "content-length")) names.push(name as string);
  }
  table_sort(names);
  const lines: string[] = [];
  for (const [_, name] of lua_ipairs(names)) {
    const v = hs.get(name);
    if (lua_type(v) === "table") {
      for (const [_, one] of lua_ipairs(v as unknown as string[])) {
        addLine(lines, name, one);
      }
    } else {
      addLine(lines, name, lua_tostring(v));
    }
  }
  c.headers = table_concat(lines);
  if (head) complete(c);
}

export function bodyFilter(): void {
  const c = current();
  if (c === undefined || c.complete || c.status === undefined) return;
  const arg = ngx_arg;
  const chunk = arg.get(1);
  if (!c.tooLarge && lua_type(chunk) === "string" && (chunk as string).length > 0) {
    const s = chunk as string;
    c.size += s.length;
    if (c.size > c.g._maxBody) {
      // Not silently: the record says the operation completed, retries are told it is not replayable.
      c.tooLarge = true;
      c.chunks = [];
    } else {
      c.chunks[c.chunks.length] = s;
    }
  }
  if (arg.get(2) === true) complete(c);
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

/**
 * A later guard refused request rid in the pass that claimed its key (ctx,
 * giveback.ts): the refusal is no answer of the application's, so it is not
 * stored; the claim is dropped once the refusal is sent, as for a 409.
 */
export function refused(rid: number, ctx: LuaTable<string, unknown>): void {
  const c = captures.get(rid);
  if (c !== undefined && c.anchor.ctx === ctx && request.alive(c.anchor)) c.refused = true;
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
  stats.incr(g._dict, g.name, "not_stored");
  if (c.status === undefined && ngx_var.get("request_completion") === "OK" && !warnedFilters) {
    warnedFilters = true;
    ngx_log(WARN, "dlock: guard ", g.name, ": a response went by unseen, so it was not stored: add ",
      "header_filter_by_lua_block { require(\"resty.dlock.gateway\").header_filter() } and ",
      "body_filter_by_lua_block { require(\"resty.dlock.gateway\").body_filter() } at http level");
  }
  if (ngx_var.get("request_completion") !== "OK") {
    stats.incr(g._dict, g.name, "aborted");
  }
  // No full response (client gone while the upstream works, upstream cut): the
  // backend may still run it, so the claim stays until its lease runs out,
  // unrenewed (the keeper stops at the end of the request).
}
