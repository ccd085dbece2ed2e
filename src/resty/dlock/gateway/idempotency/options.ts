// Mode idempotency at gateway.new: the checks of its own options (declared
// with every other mode's in ../options.ts), and the guard's fields made of
// the checked table. Nothing here runs per request.

import * as backend from "../../redis/backend";
import * as check from "../../core/check";
import * as common from "../common";
import type * as gwoptions from "../options";
import type * as inflight from "../inflight";
import type * as lease from "../../core/lease";
import * as ledger from "../../core/ledger";
import * as meter from "../../core/meter";
import type * as redis from "../../redis/client";
import * as records from "../../redis/records";
import * as stats from "../stats";
import * as breaker from "../breaker";
import * as keys from "../key";

const lua_type = type;
const lua_pairs = pairs;
const lua_tostring = tostring;
const lua_tonumber = tonumber;
const str_match = string.match;
const str_lower = string.lower;
const found = check.found;

/** What a guard is made of; the face (../idempotency.ts) gives it its methods. */
export interface Fields {
  readonly name: string;
  readonly mode: "idempotency";
  readonly _dict: NgxSharedDict;
  readonly _key: keys.Template;
  /** nil: one scope shared by every client (scope = false). */
  readonly _scope: keys.Template | undefined;
  readonly _methods: LuaSet<string>;
  readonly _onMissing: "pass" | "reject";
  readonly _onError: "allow" | "deny";
  /** ms a completed response is replayed. */
  readonly _ttl: number;
  /** ms of the in-flight claim, renewed while the request runs. */
  readonly _lease: number;
  readonly _wait: number;
  readonly _maxBody: number;
  readonly _maxRequestBody: number;
  /** Statuses whose responses are stored. */
  readonly _store: LuaTable<number, boolean>;
  /** Response headers (lower case) not stored: hop-by-hop ones, and Set-Cookie unless store_headers lists it. */
  readonly _skip: LuaSet<string>;
  readonly _missingWhat: string;
  readonly _errorWhat: string;
  readonly _errorStatus: number;
  readonly _headers: LuaTable<string, string> | undefined;
  readonly _breakerFailures: number;
  readonly _breakerCooldown: number;
  /** Seconds a half-open breaker's probe has (breaker.probeWindow). */
  readonly _probeFor: number;
  readonly _conf: redis.RedisConf;
  readonly _prefix: string;
  /** What the keeper sees: renew every lease/3; the end of the request releases nothing (we store). */
  readonly _owner: inflight.Owner;
  readonly _kind: lease.Kind;
  readonly _leaseStore: lease.Store;
}

export interface Guard extends Fields {
  access(): void;
  log(): void;
  header_filter(): void;
  body_filter(): void;
}

/**
 * Not part of a stored response: hop-by-hop headers, those nginx sets anew on
 * a replay, and the RateLimit fields: they tell the quota at the time they
 * were sent (a rate guard sets the replay's own).
 */
const SKIP = ["connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer",
  "upgrade", "proxy-authenticate", "content-length", "date", "server", "idempotent-replayed",
  "ratelimit", "ratelimit-policy"];
/** Not stored unless store_headers lists them: one client's session must not reach another. */
const PRIVATE = ["set-cookie"];

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

/** The `store` option: statuses and classes, as a table of statuses. */
export function store(this: void, v: unknown): LuaMultiReturn<[unknown, string | undefined]> {
  if (v === undefined) return $multi(defaultStore(), undefined);
  const what = "store must be a list of statuses (200..599) and classes (\"2xx\"..\"5xx\")";
  if (lua_type(v) !== "table") return check.fail(what, v);
  // An empty list would store nothing: every retry would run again, not what anyone means by it.
  if ((v as unknown[]).length === 0 || !check.isList(v as LuaTable<AnyNotNil, unknown>)) return check.fail(what, v);
  const s = new LuaTable<number, boolean>();
  for (const [i, x] of lua_pairs(v as LuaTable<AnyNotNil, unknown>)) {
    if (lua_type(i) !== "number") return check.fail(what, i);
    if (lua_type(x) === "number") {
      const [n, err] = check.integer("store", x, 200, 599, "a status from 200 to 599");
      if (n === undefined) return $multi(undefined, err);
      s.set(n, true);
    } else {
      const [d] = str_match(lua_tostring(x), "^([2-5])xx$");
      if (lua_type(x) !== "string" || d === undefined) return check.fail(what, x);
      const base = lua_tonumber(d)! * 100;
      for (const j of $range(base, base + 99)) s.set(j, true);
    }
  }
  return $multi(s, undefined);
}

/** The headers not stored: SKIP, and PRIVATE ones store_headers does not list. */
export function storeHeaders(this: void, v: unknown): LuaMultiReturn<[unknown, string | undefined]> {
  const skip = new LuaSet<string>();
  for (const i of $range(1, SKIP.length)) skip.add(SKIP[i - 1]!);
  for (const i of $range(1, PRIVATE.length)) skip.add(PRIVATE[i - 1]!);
  if (v === undefined) return $multi(skip, undefined);
  const what = "store_headers must be a list of headers not stored by default (\"Set-Cookie\")";
  if (lua_type(v) !== "table") return check.fail(what, v);
  for (const [i, x] of lua_pairs(v as LuaTable<AnyNotNil, unknown>)) {
    if (lua_type(i) !== "number" || lua_type(x) !== "string") return check.fail(what, x);
    const n = str_lower(x as string);
    let known = false;
    for (const j of $range(1, PRIVATE.length)) if (PRIVATE[j - 1] === n) known = true;
    if (!known) {
      return check.fail(what + "; other headers are stored anyway, and hop-by-hop ones never", x);
    }
    skip.delete(n);
  }
  return $multi(skip, undefined);
}

const KIND: lease.Kind = {
  acquire: records.IDEM_CLAIM, release: records.IDEM_RELEASE, extend: records.IDEM_EXTEND, shared: true, fenced: false,
  drop: undefined,
};

/**
 * The `scope` option: required, since without one a client's stored response
 * (its cookies, its data) is replayed to any other that sends the same key;
 * false shares every key among all clients (nil in the guard).
 */
export function scope(this: void, v: unknown): LuaMultiReturn<[unknown, string | undefined]> {
  if (v === undefined) {
    return check.fail("scope is required for mode idempotency: what tells clients apart (\"$http_authorization\", " +
      "\"$cookie_session\", a function), or scope = false to share every key among all clients", v);
  }
  if (v === false) return $multi(undefined, undefined);
  return keys.compile("scope", v);
}

/** The `methods` option: a list of methods, as a set. */
export function methods(this: void, m: unknown): LuaMultiReturn<[unknown, string | undefined]> {
  if (lua_type(m) !== "table" || (m as unknown[]).length === 0 || !check.isList(m as LuaTable<AnyNotNil, unknown>)) {
    return check.fail("methods must be a list of HTTP methods ({ \"POST\", \"PATCH\" })", m);
  }
  const set = new LuaSet<string>();
  const list = m as unknown[];
  for (const i of $range(1, list.length)) {
    const x = list[i - 1];
    if (lua_type(x) !== "string" || !found(x as string, "^%u+$")) {
      return check.fail("methods must be a list of upper-case HTTP methods", x);
    }
    set.add(x as string);
  }
  return $multi(set, undefined);
}

/**
 * The guard's fields, of options checked by ../options.ts. unlogged: what the
 * keeper calls for a request of the guard that ended without log() (inflight.Owner).
 */
export function parse(
  o: gwoptions.Options, name: string, unlogged: (this: void, rid: number) => void,
): LuaMultiReturn<[Fields | undefined, string | undefined]> {
  const conf = o.redis;
  const refused = backend.refuses(conf, "idempotency");
  if (refused !== undefined) return $multi(undefined, refused);
  const dict = o.dict;
  const prefix = o.prefix ?? "dlock:gw:" + name + ":";
  ledger.prepare(dict);
  stats.prepare(dict, name);
  const leaseMs = o.lease;
  const owner: inflight.Owner = {
    name, _dict: dict, _ttl: leaseMs, _renew: true, _release: false, _hold: 0, _unlogged: unlogged,
  };
  const leaseStore: lease.Store = { dict, redis: conf, prefix, ttl: leaseMs, wait: 0, meter: meter.make(dict, name) };
  const f: Fields = {
    name, mode: "idempotency" as const, _dict: dict, _key: o.key, _scope: o.scope, _methods: o.methods,
    _onMissing: o.on_missing, _onError: o.on_error as "allow" | "deny", _ttl: o.ttl, _lease: leaseMs, _wait: o.wait!,
    _maxBody: o.max_body, _maxRequestBody: o.max_request_body, _store: o.store, _skip: o.store_headers,
    _missingWhat: common.missingWhat(o.on_missing, 400),
    _errorWhat: common.errorWhat(o.on_error, o.error_status),
    _errorStatus: o.error_status, _headers: o.headers,
    _breakerFailures: o.breaker_failures, _breakerCooldown: o.breaker_cooldown, _probeFor: breaker.probeWindow(conf),
    _conf: conf, _prefix: prefix, _owner: owner, _kind: KIND, _leaseStore: leaseStore,
  };
  return $multi(f, undefined);
}
