// Gateway mode "idempotency": the first request with an Idempotency-Key runs,
// its response is stored in Redis, and every retry with the same key (from any
// nginx sharing the Redis) gets that response back instead of running the
// operation again (draft-ietf-httpapi-idempotency-key-header, Stripe semantics).
//
// One Redis hash per (scope, key), both hashed (see scripts.IDEM_*):
// - access: read the request body, fingerprint the request, and claim the key
//   in one script: SET NX of a "running" record with our token, or the record
//   that is there (running: 409 or wait; done: replay; other fingerprint: 422);
// - while the request runs, the gateway's keeper renews the claim like any
//   lease (inflight.ts), also through internal redirects and reloads;
// - header_filter / body_filter: note the status, headers and body (up to
//   max_body); at the end of the body a timer turns the claim into the stored
//   record, owner-checked (filters have no cosockets). The client may have the
//   response, and retry, before that store lands: so a duplicate that finds the
//   claim running waits for it (wait, at least 1 s, fleet-wide), and on this
//   nginx a mark in the shared dict, set before the last bytes leave, makes it
//   wait for as long as the store may take (up to the lease);
// - log: a request that ended without its full response (client abort while
//   the upstream works, a cut upstream) keeps its claim until the lease runs
//   out, unrenewed: the backend may still be running it.

import * as backend from "../backend";
import * as check from "../check";
import * as inflight from "../inflight";
import type * as lease from "../lease";
import * as ledger from "../ledger";
import * as meter from "../meter";
import * as orphans from "../orphans";
import * as redis from "../redis";
import * as request from "../request";
import * as scripts from "../scripts";
import * as stats from "../stats";
import * as token from "../token";
import * as shared from "./common";
import * as keys from "./key";

const semaphore = require("ngx.semaphore") as NgxSemaphoreModule;

// The parts of the ngx API only this mode uses.
/** @noSelf */
interface NgxReqBody {
  read_body(): void;
  get_body_data(): string | undefined;
  get_body_file(): string | undefined;
}
/** @noSelf */
interface NgxResp {
  get_headers(max?: number): LuaMultiReturn<[LuaTable<string, string | LuaTable<number, string>>, string | undefined]>;
}
interface NgxFilter {
  /** body_filter: [1] the chunk, [2] true at the end of the body. */
  readonly arg: LuaTable<number, unknown>;
  readonly resp: NgxResp;
}
const nreq = ngx.req as unknown as NgxReqBody;

/** Options no other mode takes. */
export const ONLY = ["scope", "methods", "lease", "max_body", "max_request_body", "store", "store_headers"];

const OPTIONS = check.set(
  "name", "mode", "key", "scope", "methods", "on_missing", "ttl", "lease", "wait", "max_body",
  "max_request_body", "store", "store_headers", "on_error", "error_status", "headers", "breaker_failures",
  "breaker_cooldown", "dict", "redis", "prefix",
);

const DAY = 86400000;
/** Least `wait`, ms: the time a response's store may take to reach Redis after the client has the response. */
const MIN_WAIT = 1000;
/** Longest key accepted, in bytes, after unquoting (Stripe's limit). */
const MAX_KEY = 255;
/** Problem types (RFC 9457 `type`), one per refusal. */
// A URN: no page of ours to point at, and clients match the string, not its content.
const TYPE = "urn:resty-dlock:idempotency:";

export interface Guard {
  readonly name: string;
  readonly mode: "idempotency";
  readonly dict: NgxSharedDict;
  readonly key: keys.Template;
  /** nil: one scope shared by every client (scope = false). */
  readonly scope: keys.Template | undefined;
  readonly methods: LuaSet<string>;
  readonly onMissing: "pass" | "reject";
  readonly onError: "allow" | "deny";
  /** ms a completed response is replayed. */
  readonly ttl: number;
  /** ms of the in-flight claim, renewed while the request runs. */
  readonly lease: number;
  readonly wait: number;
  readonly maxBody: number;
  readonly maxRequestBody: number;
  /** Statuses whose responses are stored. */
  readonly store: LuaTable<number, boolean>;
  /** Response headers (lower case) not stored: hop-by-hop ones, and Set-Cookie unless store_headers lists it. */
  readonly skip: LuaSet<string>;
  readonly missingWhat: string;
  readonly errorWhat: string;
  readonly errorStatus: number;
  readonly headers: LuaTable<string, string> | undefined;
  readonly breakerFailures: number;
  readonly breakerCooldown: number;
  readonly conf: redis.RedisConf;
  readonly prefix: string;
  /** What the keeper sees: renew every lease/3; the end of the request releases nothing (we store). */
  readonly owner: inflight.Owner;
  readonly kind: lease.Kind;
  readonly leaseStore: lease.Store;
  access(): void;
  log(): void;
  header_filter(): void;
  body_filter(): void;
}

// ------------------------------------------------------------ requests in flight

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
  /** The whole body went by: handed to a timer to store. */
  complete: boolean;
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

// ------------------------------------------------------------ waiting duplicates

/** A completed record, as the claim script returns it. */
interface Rec {
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
 */
interface Watch {
  readonly sem: NgxSemaphore;
  waiters: number;
  polling: boolean;
  rec: Rec | undefined;
}
const watches = new LuaTable<string, Watch>();

/** The stored record of rkey is known (or, rec nil, the claim was dropped): wake the waiters. */
function notify(rkey: string, rec: Rec | undefined): void {
  const w = watches.get(rkey);
  if (w === undefined || w.waiters === 0) return;
  if (rec !== undefined) w.rec = rec;
  w.sem.post(w.waiters);
}

// ------------------------------------------------------------ answers

function jsonStr(s: string): string {
  const [q] = string.gsub(s, "[%c\"\\]", (c: string) => string.format("\\u%04x", string.byte(c)));
  return "\"" + q + "\"";
}

/** An RFC 9457 problem details answer, and the end of the request. */
function problem(g: Guard, status: number, kind: string, title: string, detail: string, retryAfter?: number): never {
  ngx.status = status;
  ngx.header.set("Content-Type", "application/problem+json");
  if (retryAfter !== undefined) {
    ngx.header.set("Retry-After", retryAfter);
  }
  if (g.headers !== undefined) {
    for (const [k, v] of g.headers) {
      ngx.header.set(k, v);
    }
  }
  const body = string.format("{\"type\":%s,\"title\":%s,\"status\":%d,\"detail\":%s}\n",
    jsonStr(TYPE + kind), jsonStr(title), status, jsonStr(detail));
  ngx.header.set("Content-Length", body.length);
  ngx.print(body);
  return ngx.exit(ngx.HTTP_OK);
}

/** Answer with the stored response. */
function replay(g: Guard, rec: Rec): never {
  stats.incr(g.dict, g.name, "replayed");
  ngx.status = rec.status;
  // Header lines "name: value\n", a name repeated for each of its values (Set-Cookie...).
  const multi = new LuaTable<string, string[]>();
  for (const [n, v] of string.gmatch(rec.headers, "([^:\n]+): ([^\n]*)\n")) {
    const name = n as string;
    let list = multi.get(name);
    if (list === undefined) {
      list = [];
      multi.set(name, list);
    }
    list.push(v as string);
  }
  for (const [name, list] of multi) {
    if (list.length === 1) {
      ngx.header.set(name, list[0]!);
    } else {
      ngx.header.set(name, list as unknown as string);
    }
  }
  ngx.header.set("Idempotent-Replayed", "true");
  if (rec.status === 204 || rec.status === 304) {
    // RFC 9110: a 204 has no Content-Length, and a 304's would describe the
    // representation, not this empty answer; ngx.exit on its own would add "0".
    ngx.send_headers();
    return ngx.exit(ngx.HTTP_OK);
  }
  ngx.header.set("Content-Length", rec.body.length);
  ngx.print(rec.body);
  return ngx.exit(ngx.HTTP_OK);
}

/** A completed record for this request: replay it, or say why it cannot be. */
function answer(g: Guard, rec: Rec, fp: string): never {
  if (rec.fp !== fp) {
    stats.incr(g.dict, g.name, "mismatch");
    return problem(g, 422, "mismatch", "Idempotency-Key reused with another request",
      "this key was first used with another method, path, query or body");
  }
  if (rec.state === "done") {
    return replay(g, rec);
  }
  // Completed, but its response was not kept (larger than max_body): the
  // operation ran, so it must not run again; tell the client so, for good.
  stats.incr(g.dict, g.name, "replayed");
  ngx.header.set("Idempotent-Replayed", "true");
  return problem(g, 409, "not-replayable", "Request already processed, its response is not replayable",
    "the first request with this key completed with status " + rec.status +
    "; its response was too large to store, so it cannot be replayed");
}

function inFlight(g: Guard): never {
  stats.incr(g.dict, g.name, "conflict");
  return problem(g, 409, "in-flight", "A request with this Idempotency-Key is being processed",
    "retry after the first request with this key has completed", 1);
}

/** A key (or scope) that cannot be computed: on_error, never a pass as if it were missing. */
function keyFailure(g: Guard, problemText: string): void {
  stats.incr(g.dict, g.name, "key_errors");
  keys.failed(g.name, problemText, g.errorWhat);
  if (g.onError === "allow") return;
  problem(g, g.errorStatus, "unavailable", "Idempotency keys cannot be checked right now",
    "the idempotency key of this request could not be computed; retry later with the same key");
}

function onRedisFailure(g: Guard, err: string | undefined): void {
  if (err !== undefined) {
    stats.incr(g.dict, g.name, "redis_errors");
    stats.failure(g.dict, g.name, g.breakerFailures, g.breakerCooldown);
    ngx.log(ngx.ERR, "dlock: guard ", g.name, ": ", check.reason(err));
  }
  if (g.onError === "allow") {
    // Runs without protection against a second execution: counted, logged above.
    stats.incr(g.dict, g.name, "failed_open");
    return;
  }
  stats.incr(g.dict, g.name, "failed_closed");
  problem(g, g.errorStatus, "unavailable", "Idempotency keys cannot be checked right now",
    "the store of idempotency keys is unavailable; retry later with the same key");
}

// ------------------------------------------------------------ the request

function found(s: string, pattern: string): boolean {
  const [at] = string.find(s, pattern);
  return at !== undefined;
}

/** The key as sent: an sf-String ("...", \" and \\ escaped) unquoted, or a bare token. nil when invalid. */
export function parseKey(raw: string): string | undefined {
  let k: string;
  if (string.sub(raw, 1, 1) === "\"") {
    if (raw.length < 3 || string.sub(raw, -1) !== "\"") return undefined;
    const inner = string.sub(raw, 2, -2);
    // Printable ASCII only; a quote or backslash only as part of an escape pair.
    if (found(inner, "[^\x20-\x7e]")) return undefined;
    const [rest] = string.gsub(inner, "\\[\"\\]", "");
    if (found(rest, "[\"\\]")) return undefined;
    [k] = string.gsub(inner, "\\([\"\\])", "%1");
  } else {
    // tchar (RFC 9110) plus ":" and "/", as sf-Token allows: a bare UUID too.
    if (!found(raw, "^[%w!#%$%%&'%*%+%-%.%^_`|~:/]+$")) return undefined;
    k = raw;
  }
  if (k.length === 0 || k.length > MAX_KEY) return undefined;
  return k;
}

/** The request body (read now), or nil and the reason when it is larger than max. */
function body(max: number): LuaMultiReturn<[string | undefined, string | undefined]> {
  const len = tonumber(ngx.var.get("content_length"));
  if (len !== undefined && len > max) return $multi(undefined, "large");
  nreq.read_body();
  const data = nreq.get_body_data();
  if (data !== undefined) {
    if (data.length > max) return $multi(undefined, "large");
    return $multi(data, undefined);
  }
  const file = nreq.get_body_file();
  if (file === undefined) return $multi("", undefined);
  // Buffered to a file (larger than client_body_buffer_size): read it back, bounded.
  const [f] = io.open(file, "rb");
  if (f === undefined) return $multi(undefined, "unreadable");
  const s = f.read(max + 1);
  f.close();
  const text = type(s) === "string" ? (s as string) : "";
  if (text.length > max) return $multi(undefined, "large");
  return $multi(text, undefined);
}

/** Method, path with query as sent, and body: two requests that differ in any of them differ here. */
function fingerprint(method: string, b: string): string {
  return token.hex(ngx.sha1_bin(method + "\n" + (ngx.var.get("request_uri") ?? "") + "\n" + ngx.sha1_bin(b)));
}

type Claim = LuaMultiReturn<["claimed" | "error" | "record" | "timeout", Rec | undefined, string | undefined]>;

function claim(g: Guard, rkey: string, tok: string, fp: string): Claim {
  const [res, err, fault] = backend.call(g.conf, scripts.IDEM_CLAIM, rkey, tok, g.lease, fp);
  if (res === undefined) {
    if (fault === "lost") {
      // The claim may have landed with nobody to complete it: drop it (owner-checked) rather than
      // let it refuse retries for a whole lease.
      orphans.adoptAcquire(g.conf, scripts.IDEM_RELEASE, rkey, tok);
    }
    return $multi("error", undefined, err);
  }
  stats.success(g.dict, g.name);
  if (res === "OK") return $multi("claimed", undefined, undefined);
  const r = res as LuaTable<number, string | number>;
  const rec: Rec = {
    state: tostring(r.get(1)), fp: tostring(r.get(2)), status: tonumber(r.get(3)) ?? 0,
    headers: tostring(r.get(4)), body: tostring(r.get(5)),
  };
  return $multi("record", rec, undefined);
}

/**
 * Wait up to g.wait ms for the first request's response. Returns "record" with
 * it, "claimed" when the first request's claim was dropped and we took the key,
 * "timeout", or "error".
 */
function waitFor(g: Guard, rkey: string, tok: string, fp: string): Claim {
  let w = watches.get(rkey);
  if (w === undefined) {
    const [sem, serr] = semaphore.new(0);
    if (sem === undefined) return $multi("error", undefined, "dlock: ngx.semaphore: " + tostring(serr));
    w = { sem, waiters: 0, polling: false, rec: undefined };
    watches.set(rkey, w);
  }
  w.waiters++;
  let deadline = ngx.now() * 1000 + g.wait;
  let extended = false;
  let pause = 5;
  let what: "claimed" | "error" | "record" | "timeout" = "timeout";
  let found: Rec | undefined;
  let err: string | undefined;
  while (true) {
    if (w.rec !== undefined) {
      what = "record";
      found = w.rec;
      break;
    }
    ngx.update_time();
    let left = deadline - ngx.now() * 1000;
    let mark: unknown = undefined;
    if (left <= 0 && !extended) [mark] = g.dict.get(FINISHED + rkey);
    if (mark !== undefined) {
      // The first request's response went out from this nginx: it is being
      // stored, which may take up to the lease (the store retries): a retry
      // sent after it must get the replay, not a 409.
      extended = true;
      deadline = ngx.now() * 1000 + g.lease;
      left = g.lease;
    }
    if (left <= 0) break;
    if (w.polling) {
      // Another waiter of this worker asks Redis; it (or the store) wakes us.
      w.sem.wait(math.min(left, 250) / 1000);
    } else {
      w.polling = true;
      const [got, rec, cerr] = claim(g, rkey, tok, fp);
      w.polling = false;
      if (got === "record" && rec!.state !== "running") {
        w.rec = rec;
        // The others of this worker (ngx.semaphore refuses to post 0).
        if (w.waiters > 1) w.sem.post(w.waiters - 1);
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
      w.sem.wait(math.min(left, pause) / 1000);
      pause = math.min(pause * 2, 100);
    }
  }
  w.waiters--;
  if (w.waiters === 0 && watches.get(rkey) === w) watches.delete(rkey);
  return $multi(what, found, err);
}

/** The claim's record out of the shared dict, and out of the guard's held gauge. */
function unrecord(g: Guard, l: lease.Lease): void {
  const expires = ledger.forget(g.dict, l.rec, l.token);
  if (expires !== undefined) meter.forgotten(g.leaseStore.meter, expires);
}

/** Shared dict mark of a claim whose holder has sent its whole response (the store is on its way). */
const FINISHED = "idem:fin:";

/** We hold the claim: renew it while the request runs, capture the response. */
function hold(g: Guard, rkey: string, tok: string, fp: string): void {
  stats.incr(g.dict, g.name, "acquired");
  const a = request.anchor();
  if (a === undefined) return;
  const rec = ledger.recordKey(rkey, tok, true);
  const recorded = ledger.record(g.dict, rec, tok, rkey, g.lease);
  if (recorded !== undefined) meter.recorded(g.leaseStore.meter, recorded);
  const now = ngx.now() * 1000;
  // Shaped as a lease of the lock, so the keeper renews it with the others (one pipeline per guard).
  const l = {
    key: rkey, token: tok, ttl: g.lease, store: g.leaseStore, kind: g.kind, rkey, rec, fence: undefined,
    released: false, validUntil: now + g.lease, expires: now + g.lease, releaseSent: false, since: now,
  } as unknown as lease.Lease;
  inflight.track(g.owner, l, a);
  captures.set(a.id, {
    g, anchor: a, lease: l, fp, status: undefined, headers: "", chunks: [], size: 0, tooLarge: false, complete: false,
  });
}

function access(g: Guard): void {
  if (!shared.decides(g.name)) return;
  if (inflight.holds(g.owner)) {
    // The same request again, after an internal redirect: it holds the claim already.
    return;
  }
  const method = ngx.req.get_method();
  if (!g.methods.has(method)) return;
  const [raw, kerr] = keys.value(g.key);
  if (raw === undefined) {
    if (kerr !== undefined) {
      keyFailure(g, kerr);
      return;
    }
    stats.incr(g.dict, g.name, "missing_key");
    keys.note(g.name, g.key, false, g.missingWhat);
    if (g.onMissing === "reject") {
      problem(g, 400, "missing-key", "Idempotency-Key missing", "this endpoint requires an Idempotency-Key header");
    }
    return;
  }
  keys.note(g.name, g.key, true, g.missingWhat);
  const k = parseKey(raw);
  if (k === undefined) {
    stats.incr(g.dict, g.name, "missing_key");
    problem(g, 400, "invalid-key", "Idempotency-Key invalid",
      "the key must be a quoted string or a token of 1 to " + MAX_KEY + " printable ASCII characters");
    return;
  }
  const [b, berr] = body(g.maxRequestBody);
  if (b === undefined) {
    if (berr === "large") {
      problem(g, 413, "request-too-large", "Request body too large for an idempotent request",
        "requests with an Idempotency-Key may have bodies of up to " + g.maxRequestBody + " bytes");
    }
    ngx.log(ngx.ERR, "dlock: guard ", g.name, ": cannot read the request body back from its temp file");
    problem(g, 500, "unreadable", "Request body unreadable", "the request body could not be read");
    return;
  }
  const fp = fingerprint(method, b);
  if (stats.breakerOpen(g.dict, g.name)) {
    stats.incr(g.dict, g.name, "short_circuited");
    onRedisFailure(g, undefined);
    return;
  }
  // Scope and key both client-controlled: hashed, fixed length, never stored in clear.
  let scoped = k;
  if (g.scope !== undefined) {
    const [sv, serr] = keys.value(g.scope);
    if (sv === undefined) {
      if (serr !== undefined) {
        keyFailure(g, "scope: " + serr);
        return;
      }
      // Without it, this client's key would be looked up among every other
      // scopeless client's: another one's stored response could be replayed to it.
      stats.incr(g.dict, g.name, "missing_key");
      if (g.onMissing === "reject") {
        problem(g, 400, "missing-scope", "Idempotency-Key without a client identity",
          "this endpoint keeps idempotency keys per client, and this request does not say which client it is");
      }
      return;
    }
    scoped = ngx.sha1_bin(sv) + k;
  }
  const rkey = g.prefix + token.hex(ngx.sha1_bin(scoped));
  const [tok, terr] = token.random();
  if (tok === undefined) {
    onRedisFailure(g, terr);
    return;
  }
  let [what, rec, err] = claim(g, rkey, tok, fp);
  if (what === "record" && rec!.state === "running") {
    if (rec!.fp !== fp) {
      answer(g, rec!, fp);
    }
    stats.incr(g.dict, g.name, "waited");
    [what, rec, err] = waitFor(g, rkey, tok, fp);
    if (what === "timeout") {
      stats.incr(g.dict, g.name, "timed_out");
      inFlight(g);
    }
  }
  if (what === "claimed") {
    hold(g, rkey, tok, fp);
    return;
  }
  if (what === "record") {
    answer(g, rec!, fp);
  }
  onRedisFailure(g, err);
}

// ------------------------------------------------------------ capturing and storing

/** Not part of a stored response: hop-by-hop headers, and those nginx sets anew on a replay. */
const SKIP = ["connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer",
  "upgrade", "proxy-authenticate", "content-length", "date", "server", "idempotent-replayed"];
/** Not stored unless store_headers lists them: one client's session must not reach another. */
const PRIVATE = ["set-cookie"];

export function headerFilter(): void {
  const c = current();
  if (c === undefined || c.complete) return;
  c.status = ngx.status;
  const [hs] = (ngx as unknown as NgxFilter).resp.get_headers(200);
  const lines: string[] = [];
  for (const [name, v] of pairs(hs)) {
    const n = string.lower(name as string);
    if (!c.g.skip.has(n)) {
      if (type(v) === "table") {
        for (const one of v as unknown as string[]) {
          lines.push(n + ": " + one + "\n");
        }
      } else {
        lines.push(n + ": " + tostring(v) + "\n");
      }
    }
  }
  // A stable order: the same response stores the same bytes.
  table.sort(lines);
  c.headers = table.concat(lines);
}

export function bodyFilter(): void {
  const c = current();
  if (c === undefined || c.complete || c.status === undefined) return;
  const arg = (ngx as unknown as NgxFilter).arg;
  const chunk = arg.get(1);
  if (!c.tooLarge && type(chunk) === "string" && (chunk as string).length > 0) {
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
    if (!AMBIGUOUS.has(tostring(c.status))) {
      // Before these last bytes leave: a retry reaching this nginx waits for the store, not 409.
      c.g.dict.set(FINISHED + c.lease.rkey, true, c.g.lease / 1000);
    }
    schedule(c);
  }
}

/** The response is complete: a timer stores it (no cosockets in the filters or the log phase). */
function schedule(c: Capture): void {
  c.complete = true;
  const [ok, err] = ngx.timer.at(0, store, c);
  if (!ok) {
    c.g.dict.delete(FINISHED + c.lease.rkey);
    stats.incr(c.g.dict, c.g.name, "not_stored");
    ngx.log(ngx.ERR, "dlock: guard ", c.g.name, ": cannot store the response (the key stays claimed until its lease ",
      "runs out): ", err);
  }
}

/** Statuses not stored after which the backend may still be working (gateway timeout, cut connection). */
const AMBIGUOUS = check.set("502", "504");

function store(this: void, premature: boolean, c: Capture): void {
  const g = c.g;
  const l = c.lease;
  const status = c.status!;
  if (g.store.get(status) !== true) {
    stats.incr(g.dict, g.name, "not_stored");
    g.dict.delete(FINISHED + l.rkey);
    if (AMBIGUOUS.has(tostring(status))) {
      // The operation may have run, or may still be running: no retry before the claim runs out.
      return;
    }
    // The application said it did not do it (409, 429, 503...): retries may run it.
    const [res, err] = backend.call(g.conf, scripts.IDEM_RELEASE, l.rkey, l.token);
    if (res === undefined) {
      ngx.log(ngx.WARN, "dlock: guard ", g.name, ": dropping a claim: ", check.reason(err), " (it runs out after the lease)");
    }
    unrecord(g, l);
    notify(l.rkey, undefined);
    return;
  }
  const state = c.tooLarge ? "unreplayable" : "done";
  const b = c.tooLarge ? "" : table.concat(c.chunks);
  // Until the claim would run out: Redis may come back meanwhile.
  ngx.update_time();
  const deadline = ngx.now() + g.lease / 1000;
  let pause = 0.05;
  while (true) {
    const [res, err] = backend.call(g.conf, scripts.IDEM_COMPLETE, l.rkey, l.token, g.ttl, state, status, c.headers, b);
    if (res === 1) {
      g.dict.delete(FINISHED + l.rkey);
      stats.incr(g.dict, g.name, c.tooLarge ? "not_stored" : "stored");
      unrecord(g, l);
      notify(l.rkey, { state, fp: c.fp, status, headers: c.headers, body: b });
      return;
    }
    if (res !== undefined) {
      g.dict.delete(FINISHED + l.rkey);
      stats.incr(g.dict, g.name, "not_stored");
      stats.incr(g.dict, g.name, "lost");
      ngx.log(ngx.ERR, "dlock: guard ", g.name, ": the claim on ", l.rkey, " ran out before its response could be stored");
      return;
    }
    stats.incr(g.dict, g.name, "redis_errors");
    ngx.update_time();
    if (ngx.now() + pause >= deadline) {
      g.dict.delete(FINISHED + l.rkey);
      stats.incr(g.dict, g.name, "not_stored");
      ngx.log(ngx.ERR, "dlock: guard ", g.name, ": response not stored, the claim runs out: ", check.reason(err));
      return;
    }
    ngx.sleep(pause);
    pause = math.min(pause * 2, 1);
  }
}

/**
 * The keeper found a request of ours that ended without log(): drop what was
 * captured of it (up to max_body of response), which no later phase will.
 */
function forget(this: void, rid: number): void {
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
  if (c.status === undefined && ngx.var.get("request_completion") === "OK" && !warnedFilters) {
    warnedFilters = true;
    ngx.log(ngx.WARN, "dlock: guard ", g.name, ": a response went by unseen, so it was not stored: add ",
      "header_filter_by_lua_block { require(\"resty.dlock.gateway\").header_filter() } and ",
      "body_filter_by_lua_block { require(\"resty.dlock.gateway\").body_filter() } at http level");
  }
  if (ngx.var.get("request_completion") !== "OK") {
    stats.incr(g.dict, g.name, "aborted");
  }
  // No full response (client gone while the upstream works, upstream cut): the
  // backend may still run it, so the claim stays until its lease runs out,
  // unrenewed (the keeper stops at the end of the request).
}

const guardMethods = {
  /** In access_by_lua: replay, refuse, or let the first request with its key through. */
  access(this: Guard): void {
    access(this);
  },
  /** In log_by_lua (the module-level gateway.log() does the same for every guard). */
  log(this: Guard): void {
    inflight.finish(this.owner);
    finish();
  },
  header_filter(this: Guard): void {
    headerFilter();
  },
  body_filter(this: Guard): void {
    bodyFilter();
  },
};
const guardMt = { __index: guardMethods };

// ------------------------------------------------------------ options

const opt = shared.opt;

/**
 * Stored by default: what the application decided (2xx, 3xx, 4xx, and 500 as
 * Stripe does), not what says "not done, try again" (408, 409, 425, 429) nor
 * gateway errors (502, 503, 504: the operation may or may not have run).
 */
function defaultStore(): LuaTable<number, boolean> {
  const s = new LuaTable<number, boolean>();
  for (const i of $range(200, 499)) s.set(i, true);
  s.set(408, undefined as unknown as boolean);
  s.set(409, undefined as unknown as boolean);
  s.set(425, undefined as unknown as boolean);
  s.set(429, undefined as unknown as boolean);
  s.set(500, true);
  return s;
}

function parseStoreOpt(v: unknown): LuaMultiReturn<[LuaTable<number, boolean> | undefined, string | undefined]> {
  if (v === undefined) return $multi(defaultStore(), undefined);
  const what = "store must be a list of statuses (200..599) and classes (\"2xx\"..\"5xx\")";
  if (type(v) !== "table") return check.fail(what, v);
  const s = new LuaTable<number, boolean>();
  for (const [i, x] of pairs(v as LuaTable<AnyNotNil, unknown>)) {
    if (type(i) !== "number") return check.fail(what, i);
    if (type(x) === "number") {
      const [n, err] = check.integer("store", x, 200, 599, "a status from 200 to 599");
      if (n === undefined) return $multi(undefined, err);
      s.set(n, true);
    } else {
      const [d] = string.match(tostring(x), "^([2-5])xx$");
      if (type(x) !== "string" || d === undefined) return check.fail(what, x);
      const base = tonumber(d)! * 100;
      for (const j of $range(base, base + 99)) s.set(j, true);
    }
  }
  return $multi(s, undefined);
}

/** The headers not stored: SKIP, and PRIVATE ones store_headers does not list. */
function parseStoreHeaders(v: unknown): LuaMultiReturn<[LuaSet<string> | undefined, string | undefined]> {
  const skip = new LuaSet<string>();
  for (const n of SKIP) skip.add(n);
  for (const n of PRIVATE) skip.add(n);
  if (v === undefined) return $multi(skip, undefined);
  const what = "store_headers must be a list of headers not stored by default (\"Set-Cookie\")";
  if (type(v) !== "table") return check.fail(what, v);
  for (const [i, x] of pairs(v as LuaTable<AnyNotNil, unknown>)) {
    if (type(i) !== "number" || type(x) !== "string") return check.fail(what, x);
    const n = string.lower(x as string);
    let known = false;
    for (const pn of PRIVATE) if (pn === n) known = true;
    if (!known) {
      return check.fail(what + "; other headers are stored anyway, and hop-by-hop ones never", x);
    }
    skip.delete(n);
  }
  return $multi(skip, undefined);
}

const KIND: lease.Kind = {
  acquire: scripts.IDEM_CLAIM, release: scripts.IDEM_RELEASE, extend: scripts.IDEM_EXTEND, shared: true, fenced: false,
  drop: undefined,
};

/** Validate the options (already checked against gateway.new's names) and build the guard. */
export function create(o: LuaTable<string, unknown>, name: string): LuaMultiReturn<[Guard | undefined, string | undefined]> {
  // Options of the other modes (hold, permits, renew, read_body, reject_status...) are errors here.
  for (const [k, v] of pairs(o)) {
    if (!OPTIONS.has(k)) return check.fail(k + " does not apply to mode idempotency", v);
  }
  const [key, kerr] = keys.compile("key", o.get("key"));
  if (key === undefined) return $multi(undefined, kerr);
  // Per client by default: without a scope, one client's stored response (its
  // cookies, its data) is replayed to any other that sends the same key.
  let scope: keys.Template | undefined;
  const sc = o.get("scope");
  if (sc === undefined) {
    return check.fail("scope is required for mode idempotency: what tells clients apart (\"$http_authorization\", " +
      "\"$cookie_session\", a function), or scope = false to share every key among all clients", sc);
  }
  if (sc !== false) {
    const [s, serr] = keys.compile("scope", sc);
    if (s === undefined) return $multi(undefined, serr);
    scope = s;
  }
  const methods = new LuaSet<string>();
  const m = opt(o, "methods", ["POST", "PATCH"]);
  if (type(m) !== "table" || (m as unknown[]).length === 0) {
    return check.fail("methods must be a list of HTTP methods ({ \"POST\", \"PATCH\" })", m);
  }
  for (const x of m as unknown[]) {
    if (type(x) !== "string" || !found(x as string, "^%u+$")) {
      return check.fail("methods must be a list of upper-case HTTP methods", x);
    }
    methods.add(x as string);
  }
  const onError = o.get("on_error");
  if (onError !== "allow" && onError !== "deny") {
    return check.fail("on_error must be \"allow\" (fail open) or \"deny\" (fail closed)", onError);
  }
  const onMissing = opt(o, "on_missing", "pass");
  if (onMissing !== "pass" && onMissing !== "reject") {
    return check.fail("on_missing must be \"pass\" or \"reject\"", onMissing);
  }
  const [ttl, e1] = check.integer("ttl", opt(o, "ttl", DAY), 1000, 30 * DAY, "an integer of ms (at least 1000)");
  if (ttl === undefined) return $multi(undefined, e1);
  const [leaseMs, e2] = check.integer("lease", opt(o, "lease", 60000), 300, DAY, "an integer of ms (at least 300)");
  if (leaseMs === undefined) return $multi(undefined, e2);
  // A retry sent right after the first response may reach Redis before that response's store (a timer):
  // waiting at least MIN_WAIT answers it with the replay, from any nginx, instead of a 409.
  const [wait, e3] = check.integer("wait", opt(o, "wait", MIN_WAIT), MIN_WAIT, DAY,
    "an integer of ms of at least " + MIN_WAIT + " (a retry sent right after the first response must find it stored)");
  if (wait === undefined) return $multi(undefined, e3);
  const [maxBody, e4] = check.integer("max_body", opt(o, "max_body", 1048576), 0, 512 * 1048576, "a non-negative integer of bytes");
  if (maxBody === undefined) return $multi(undefined, e4);
  const [maxReq, e5] = check.integer("max_request_body", opt(o, "max_request_body", 1048576), 0, 512 * 1048576,
    "a non-negative integer of bytes");
  if (maxReq === undefined) return $multi(undefined, e5);
  const [storeSet, e6] = parseStoreOpt(o.get("store"));
  if (storeSet === undefined) return $multi(undefined, e6);
  const [skip, e7] = parseStoreHeaders(o.get("store_headers"));
  if (skip === undefined) return $multi(undefined, e7);
  const [common, ce] = shared.parse(o);
  if (common === undefined) return $multi(undefined, ce);

  const [dict, derr] = check.sharedDict(opt(o, "dict", "dlock"));
  if (dict === undefined) return $multi(undefined, derr);
  const [conf, rerr] = redis.parse(o.get("redis"), dict);
  if (conf === undefined) return $multi(undefined, rerr);
  const refused = backend.refuses(conf, "idempotency");
  if (refused !== undefined) return $multi(undefined, refused);
  const [prefix, perr] = check.str("prefix", opt(o, "prefix", "dlock:gw:" + name + ":"), 256);
  if (prefix === undefined) return $multi(undefined, perr);
  ledger.prepare(dict);

  const owner: inflight.Owner = { name, dict, ttl: leaseMs, renew: true, release: false, hold: 0, unlogged: forget };
  const leaseStore: lease.Store = { dict, redis: conf, prefix, ttl: leaseMs, wait: 0, meter: meter.make(dict, name) };
  const g = {
    name, mode: "idempotency" as const, dict, key, scope, methods, onMissing, onError, ttl, lease: leaseMs, wait,
    maxBody, maxRequestBody: maxReq, store: storeSet, skip,
    missingWhat: onMissing === "reject" ? "refused with 400 (on_missing = \"reject\")" : "let through unguarded (on_missing = \"pass\")",
    errorWhat: onError === "deny" ? "refused with " + common.errorStatus + " (on_error = \"deny\")" : "let through unguarded (on_error = \"allow\")",
    errorStatus: common.errorStatus, headers: common.headers,
    breakerFailures: common.breakerFailures, breakerCooldown: common.breakerCooldown,
    conf, prefix, owner, kind: KIND, leaseStore,
  };
  return $multi(setmetatable(g, guardMt) as unknown as Guard, undefined);
}
