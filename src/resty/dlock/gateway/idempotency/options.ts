// The options of mode idempotency, checked once at gateway.new: what the
// guard's fields are made of. Nothing here runs per request.

import * as backend from "../../redis/backend";
import * as check from "../../core/check";
import type * as inflight from "../inflight";
import type * as lease from "../../core/lease";
import * as ledger from "../../core/ledger";
import * as meter from "../../core/meter";
import * as redis from "../../redis/client";
import * as scripts from "../../redis/scripts";
import * as shared from "../common";
import * as keys from "../key";

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

/** What a guard is made of; the face (../idempotency.ts) gives it its methods. */
export interface Fields {
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
}

export interface Guard extends Fields {
  access(): void;
  log(): void;
  header_filter(): void;
  body_filter(): void;
}

/** Not part of a stored response: hop-by-hop headers, and those nginx sets anew on a replay. */
const SKIP = ["connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer",
  "upgrade", "proxy-authenticate", "content-length", "date", "server", "idempotent-replayed"];
/** Not stored unless store_headers lists them: one client's session must not reach another. */
const PRIVATE = ["set-cookie"];

const opt = shared.opt;

const found = check.found;

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

/**
 * Validate the options (already checked against gateway.new's names) into a
 * guard's fields. unlogged: what the keeper calls for a request of the guard
 * that ended without log() (inflight.Owner).
 */
export function parse(
  o: LuaTable<string, unknown>, name: string, unlogged: (this: void, rid: number) => void,
): LuaMultiReturn<[Fields | undefined, string | undefined]> {
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
  const [conf, rerr] = backend.parse(o.get("redis"), dict);
  if (conf === undefined) return $multi(undefined, rerr);
  const refused = backend.refuses(conf, "idempotency");
  if (refused !== undefined) return $multi(undefined, refused);
  const [prefix, perr] = check.str("prefix", opt(o, "prefix", "dlock:gw:" + name + ":"), 256);
  if (prefix === undefined) return $multi(undefined, perr);
  ledger.prepare(dict);

  const owner: inflight.Owner = { name, dict, ttl: leaseMs, renew: true, release: false, hold: 0, unlogged };
  const leaseStore: lease.Store = { dict, redis: conf, prefix, ttl: leaseMs, wait: 0, meter: meter.make(dict, name) };
  const f: Fields = {
    name, mode: "idempotency" as const, dict, key, scope, methods, onMissing, onError, ttl, lease: leaseMs, wait,
    maxBody, maxRequestBody: maxReq, store: storeSet, skip,
    missingWhat: onMissing === "reject" ? "refused with 400 (on_missing = \"reject\")" : "let through unguarded (on_missing = \"pass\")",
    errorWhat: onError === "deny" ? "refused with " + common.errorStatus + " (on_error = \"deny\")" : "let through unguarded (on_error = \"allow\")",
    errorStatus: common.errorStatus, headers: common.headers,
    breakerFailures: common.breakerFailures, breakerCooldown: common.breakerCooldown,
    conf, prefix, owner, kind: KIND, leaseStore,
  };
  return $multi(f, undefined);
}
