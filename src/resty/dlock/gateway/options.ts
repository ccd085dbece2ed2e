// The option table of gateway.new, declared once for every mode (core/schema.ts):
// which modes each option applies to, its bounds and default. A mode's table
// is the options that apply to it; the options of the other modes are refused
// by name ("hold applies to mode dedup only, not mutex").
//
// A new mode is a line in MODES (its name, the status it refuses with) and
// `modes: [...]` on the options only it takes (or a `notFor` entry with why
// on those that apply to every mode but it); the guard built from the checked
// table is the face's (gateway.ts).

import * as check from "../core/check";
import * as core from "../core/options";
import * as idem from "./idempotency/options";
import * as keys from "./key";
import type * as redis from "../redis/client";
import * as schema from "../core/schema";
import * as modes from "../core/schema/modes";

const lua_type = type;
const lua_pairs = pairs;
const lua_ipairs = ipairs;

export interface Mode extends modes.Mode {
  /** The status a refused request gets (reject_status's default). */
  readonly status: number;
}

export const MODES: Mode[] = [
  { name: "dedup", status: 409 },
  { name: "concurrency", status: 429 },
  { name: "throttle", status: 429 },
  { name: "mutex", status: 503 },
  { name: "idempotency", status: 409, apart: true },
  { name: "rate", status: 429, apart: true },
];

/** The modes that guard with a lock or a semaphore (all but idempotency). */
const LOCKING = ["dedup", "concurrency", "throttle", "mutex"];
const IDEMPOTENCY = ["idempotency"];
const RATE = ["rate"];
/** Lock modes that can fall back on this nginx's share (on_error = "local"). */
const SHARED_LOCAL = ["concurrency", "mutex"];
/** Modes that guard with Redis calls per request and a status of their own when refusing. */
const DECIDING = ["dedup", "concurrency", "throttle", "mutex", "rate"];
const DAY = 86400000;
/** Least `wait` of idempotency, ms: the time a response's store may take to reach Redis after the client has the response. */
const MIN_WAIT = 1000;

/**
 * Extra refusal headers. A name that is no HTTP token or a value with a control
 * character would reach every refused client as a split or broken response (or be
 * escaped by ngx_lua into something the operator never wrote): refused at new().
 */
function headers(this: void, h: unknown): LuaMultiReturn<[unknown, string | undefined]> {
  if (h === undefined) return $multi(undefined, undefined);
  if (lua_type(h) !== "table") return check.fail("headers must be a table of name = value strings", h);
  for (const [k, v] of lua_pairs(h as LuaTable<AnyNotNil, unknown>)) {
    if (lua_type(k) !== "string" || lua_type(v) !== "string") return check.fail("headers must be a table of name = value strings", k);
    if (!check.found(k as string, "^[!#$%%&'*+%-.^_`|~%w]+$")) return check.fail("headers: a header name must be an HTTP token", k);
    if (check.found(v as string, "[^\t%C]")) return check.fail("headers: the value of " + (k as string) + " has a control character", v);
  }
  return $multi(h, undefined);
}

/** A value checked with the others of its kind where they are used together (rate's limits: core/rate.ts parse). */
function given(this: void, v: unknown): LuaMultiReturn<[unknown, string | undefined]> {
  return $multi(v, undefined);
}

/** mode mutex's shared: the methods whose requests take the lock shared (readers), as a set. */
function methodsShared(this: void, v: unknown): LuaMultiReturn<[unknown, string | undefined]> {
  if (v === undefined) return $multi(undefined, undefined);
  if (lua_type(v) !== "table" || (v as unknown[]).length === 0 || !check.isList(v as LuaTable<AnyNotNil, unknown>)) {
    return check.fail("shared must be a list of HTTP methods ({ \"GET\", \"HEAD\" })", v);
  }
  const set = new LuaTable<string, boolean>();
  for (const [_, x] of lua_ipairs(v as unknown[])) {
    if (lua_type(x) !== "string" || !check.found(x as string, "^%u+$")) return check.fail("shared must be a list of upper-case HTTP methods", x);
    set.set(x as string, true);
  }
  return $multi(set, undefined);
}

function key(this: void, v: unknown): LuaMultiReturn<[unknown, string | undefined]> {
  return keys.compile("key", v);
}

const STATUS = "an HTTP status code from 300 to 599 (a refusal must not read as a success)";

export const SPECS: schema.Spec[] = [
  { name: "mode", kind: "enum", values: ["dedup", "concurrency", "throttle", "mutex", "idempotency", "rate"], required: true },
  // The same rule as a factory's name: it becomes a label in metrics.
  { name: "name", kind: "check", check: core.checkName, doc: "`<mode>#<n>`" },
  { name: "key", kind: "check", check: key, required: true },
  { name: "scope", kind: "check", check: idem.scope, required: true, modes: IDEMPOTENCY },
  { name: "methods", kind: "check", check: idem.methods, default: ["POST", "PATCH"], modes: IDEMPOTENCY },
  {
    name: "on_error", kind: "enum", values: ["allow", "deny"], required: true,
    unit: "\"allow\" (fail open) or \"deny\" (fail closed)", modes: ["dedup", "throttle", "idempotency"],
  },
  {
    name: "on_error", kind: "enum", values: ["allow", "deny", "local"], required: true, modes: SHARED_LOCAL,
    unit: "\"allow\" (fail open), \"deny\" (fail closed) or \"local\" (this nginx's share of the permits)",
  },
  {
    name: "on_error", kind: "enum", values: ["allow", "deny", "local"], required: true, modes: RATE,
    unit: "\"allow\" (fail open), \"deny\" (fail closed) or \"local\" (this nginx's share of the limit)",
  },
  // The limits of mode rate: rate, period and burst (or limits) are checked together, and cost against the
  // smallest burst, by core/rate.ts and gateway/rate.ts; declared here so that other modes refuse them by name.
  { name: "rate", kind: "check", check: given, doc: "required (or `limits`)", modes: RATE },
  { name: "period", kind: "check", check: given, doc: "1000", modes: RATE },
  { name: "burst", kind: "check", check: given, doc: "`rate`", modes: RATE },
  { name: "limits", kind: "check", check: given, doc: "none", modes: RATE },
  { name: "cost", kind: "check", check: given, doc: "1", modes: RATE },
  { name: "ratelimit_headers", kind: "boolean", default: true, modes: RATE },
  // How many nginx share the limit or the permits: checked with on_error (gateway/rate.ts, gateway/lock_local.ts).
  { name: "fleet", kind: "check", check: given, doc: "required there", modes: ["rate", "concurrency", "mutex"] },
  { name: "on_missing", kind: "enum", values: ["pass", "reject"], default: "pass" },
  // Requests of these methods are readers of the mutex: they share it, and exclude the others.
  { name: "shared", kind: "check", check: methodsShared, doc: "none", modes: ["mutex"] },
  { name: "hold", kind: "integer", min: 0, max: core.MAX_TTL, unit: "a non-negative integer of ms", default: 0, modes: ["dedup"] },
  { name: "renew", kind: "boolean", default: true, modes: LOCKING, notFor: { throttle: "its lock is never released" } },
  {
    name: "read_body", kind: "boolean", default: false, modes: LOCKING,
    notFor: { throttle: "it holds nothing while the request runs" },
  },
  { name: "reject_status", kind: "integer", min: 300, max: 599, unit: STATUS, doc: "per mode", modes: DECIDING },
  { name: "missing_status", kind: "integer", min: 300, max: 599, unit: STATUS, default: 400, modes: DECIDING },
  {
    name: "ttl", kind: "integer", min: 1000, max: 30 * DAY, unit: "an integer of ms (at least 1000)", default: DAY,
    modes: IDEMPOTENCY,
  },
  { name: "lease", kind: "integer", min: 300, max: DAY, unit: "an integer of ms (at least 300)", default: 60000, modes: IDEMPOTENCY },
  // A retry sent right after the first response may reach Redis before that response's store (a timer):
  // waiting at least MIN_WAIT answers it with the replay, from any nginx, instead of a 409.
  {
    name: "wait", kind: "integer", min: MIN_WAIT, max: DAY, default: MIN_WAIT, modes: IDEMPOTENCY,
    unit: "an integer of ms of at least " + tostring(MIN_WAIT) + " (a retry sent right after the first response must find it stored)",
  },
  {
    name: "max_body", kind: "integer", min: 0, max: 512 * 1048576, unit: "a non-negative integer of bytes", default: 1048576,
    modes: IDEMPOTENCY,
  },
  {
    name: "max_request_body", kind: "integer", min: 0, max: 512 * 1048576, unit: "a non-negative integer of bytes",
    default: 1048576, modes: IDEMPOTENCY,
  },
  { name: "store", kind: "check", check: idem.store, doc: "2xx, 3xx, 4xx except 408/409/425/429, and 500", modes: IDEMPOTENCY },
  { name: "store_headers", kind: "check", check: idem.storeHeaders, doc: "none", modes: IDEMPOTENCY },
  { name: "error_status", kind: "integer", min: 300, max: 599, unit: STATUS, default: 503 },
  { name: "headers", kind: "check", check: headers, doc: "none" },
  { name: "breaker_failures", kind: "integer", min: 1, max: 1000000, unit: "a positive integer", default: 3 },
  { name: "breaker_cooldown", kind: "integer", min: 1, max: 3600000, unit: "a positive integer of ms", default: 5000 },
  // What the lock (or semaphore) underneath takes, as dlock.new and semaphore.new do.
  modes.only(core.PERMITS, ["concurrency"]),
  { name: "dict", kind: "check", check: check.sharedDict, default: "dlock" },
  core.REDIS,
  { name: "prefix", kind: "string", maxLen: 256, empty: true, doc: "`dlock:gw:<name>:`", modes: DECIDING },
  { name: "prefix", kind: "string", maxLen: 256, doc: "`dlock:gw:<name>:`", modes: IDEMPOTENCY },
  modes.only(core.TTL, LOCKING),
  modes.only(core.WAIT, ["concurrency", "mutex"]),
];

/** What the schema of a mode hands back (the options of other modes absent). */
export interface Options {
  readonly mode: string;
  readonly name: string | undefined;
  readonly key: keys.Template;
  readonly scope: keys.Template | undefined;
  readonly methods: LuaSet<string>;
  readonly on_error: "allow" | "deny" | "local";
  readonly on_missing: "pass" | "reject";
  readonly hold: number | undefined;
  readonly renew: boolean | undefined;
  readonly read_body: boolean | undefined;
  readonly reject_status: number | undefined;
  readonly missing_status: number;
  readonly ttl: number;
  readonly lease: number;
  readonly wait: number | undefined;
  readonly max_body: number;
  readonly max_request_body: number;
  readonly store: LuaTable<number, boolean>;
  readonly store_headers: LuaSet<string>;
  readonly error_status: number;
  readonly headers: LuaTable<string, string> | undefined;
  readonly breaker_failures: number;
  readonly breaker_cooldown: number;
  readonly permits: number | undefined;
  readonly dict: NgxSharedDict;
  readonly redis: redis.RedisConf;
  readonly prefix: string | undefined;
  /** mode mutex: methods whose requests share the lock. */
  readonly shared: LuaSet<string> | undefined;
  // mode rate (checked together by gateway/rate.ts)
  readonly rate: unknown;
  readonly period: unknown;
  readonly burst: unknown;
  readonly limits: unknown;
  readonly cost: unknown;
  readonly ratelimit_headers: boolean;
  readonly fleet: unknown;
}

export const validate = modes.modes<Options>("gateway.new options", "mode", MODES, SPECS);

/** The mode named `name` (valid after validate). */
export function mode(name: string): Mode {
  let found = MODES[0]!;
  for (const i of $range(1, MODES.length)) {
    if (MODES[i - 1]!.name === name) found = MODES[i - 1]!;
  }
  return found;
}
