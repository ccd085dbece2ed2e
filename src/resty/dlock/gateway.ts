// resty.dlock.gateway: request guards for nginx.conf, built on locks and semaphores.
//
//   init_by_lua_block {
//     local gateway = require "resty.dlock.gateway"
//     guards = { orders = assert(gateway.new({ name = "orders", mode = "dedup",
//                  key = "$http_idempotency_key", ttl = 30000, hold = 5000, on_error = "allow" })) }
//   }
//   log_by_lua_block { require("resty.dlock.gateway").log() }   -- http level: every request's end
//   location /orders { access_by_lua_block { guards.orders:access() }  proxy_pass ...; }
//
// Modes: dedup (409 while the same key is in flight, optionally `hold` ms after a
// 2xx), concurrency (at most `permits` in flight per key, 429 after `wait`),
// throttle (one request per key per `ttl`, 429), mutex (one at a time, 503 after `wait`).

import * as check from "./core/check";
import * as dlock from "../dlock";
import * as shared from "./gateway/common";
import * as keys from "./gateway/key";
import * as idempotency from "./gateway/idempotency";
import * as inflight from "./gateway/inflight";
import * as guard from "./gateway/guard";
import type * as lease from "./core/lease";
import * as meter from "./core/meter";
import * as semaphore from "./semaphore";

export { VERSION as _VERSION } from "./version";
export type { Listed } from "./gateway/guard";

const MODES = new LuaTable<string, { status: number; wait: boolean }>();
MODES.set("dedup", { status: 409, wait: false });
MODES.set("concurrency", { status: 429, wait: true });
MODES.set("throttle", { status: 429, wait: false });
MODES.set("mutex", { status: 503, wait: true });

const OPTIONS = check.set(
  "name", "mode", "key", "dict", "redis", "prefix", "ttl", "hold", "permits", "wait",
  "renew", "on_missing", "on_error", "reject_status", "missing_status", "error_status",
  "headers", "breaker_failures", "breaker_cooldown", "read_body",
  "shared", // (rwlock) mode mutex: methods whose requests take the lock shared
  // mode idempotency only (validated in gateway/idempotency)
  "scope", "methods", "lease", "max_body", "max_request_body", "store", "store_headers",
);

const registry: guard.Listed[] = [];

/** Where gateway.new may run: before requests (and in timers, which belong to no request). */
const PHASES = check.set("init", "init_worker", "timer");

/** Guards created so far in this worker (in creation order), for status pages. */
export function guards(): guard.Listed[] {
  return registry;
}

const opt = shared.opt;

function status(o: LuaTable<string, unknown>, name: string, dflt: number): LuaMultiReturn<[number | undefined, string | undefined]> {
  return check.integer(name, opt(o, name, dflt), 200, 599, "an HTTP status code");
}

/**
 * Create a guard (once, in init_by_lua). Returns it, or nil and an error naming the bad option.
 * @customName new
 */
export function create(this: void, opts: unknown): LuaMultiReturn<[guard.Guard | idempotency.Guard | undefined, string | undefined]> {
  const phase = ngx.get_phase();
  if (!PHASES.has(phase)) {
    // Each request would get a lock of its own (excluding nothing) and a name of its own in the metrics.
    return $multi(undefined, "dlock: gateway.new in the " + phase + " phase: create guards once, in init_by_lua " +
      "or init_worker_by_lua, not per request (a guard made per request excludes nothing and adds metrics without bound)");
  }
  if (opts === undefined) return $multi(undefined, "dlock: gateway.new needs an options table with mode, key and on_error");
  const [o, oerr] = check.options("gateway.new options", opts, OPTIONS);
  if (o === undefined) return $multi(undefined, oerr);

  const mode = o.get("mode");
  const spec = type(mode) === "string" ? MODES.get(mode as string) : undefined;
  if (spec === undefined && mode !== "idempotency") {
    return check.fail("mode must be \"dedup\", \"concurrency\", \"throttle\", \"mutex\" or \"idempotency\"", mode);
  }
  let name = (mode as string) + "#" + (registry.length + 1);
  if (o.get("name") !== undefined) {
    // The same rule as a factory's name: it becomes a label in metrics.
    const [n, err] = meter.checkName(o.get("name"));
    if (n === undefined) return $multi(undefined, err);
    name = n;
  }
  for (const other of registry) {
    if (other.name === name) return check.fail("a guard with this name exists already", name);
  }

  if (mode === "idempotency") {
    // Its own module: options, Redis records and response capture of its own.
    const [ig, ierr] = idempotency.create(o, name);
    if (ig === undefined) return $multi(undefined, ierr);
    registry.push(ig);
    return $multi(ig, undefined);
  }
  for (const only of idempotency.ONLY) {
    if (o.get(only) !== undefined) {
      return check.fail(only + " applies to mode idempotency only, not " + mode, o.get(only));
    }
  }

  const [tpl, kerr] = keys.compile("key", o.get("key"));
  if (tpl === undefined) return $multi(undefined, kerr);
  const parts = tpl.parts;
  const keyFn = tpl.keyFn;
  const source = tpl.source;

  const onError = o.get("on_error");
  if (onError !== "allow" && onError !== "deny") {
    return check.fail("on_error must be \"allow\" (fail open) or \"deny\" (fail closed)", onError);
  }
  const onMissing = opt(o, "on_missing", "pass");
  if (onMissing !== "pass" && onMissing !== "reject") {
    return check.fail("on_missing must be \"pass\" or \"reject\"", onMissing);
  }

  // Options that only mean something in some modes are errors elsewhere, not silently ignored.
  if (o.get("hold") !== undefined && mode !== "dedup") {
    return check.fail("hold applies to mode dedup only, not " + mode, o.get("hold"));
  }
  if (o.get("permits") !== undefined && mode !== "concurrency") {
    return check.fail("permits applies to mode concurrency only, not " + mode, o.get("permits"));
  }
  if (o.get("wait") !== undefined && !spec!.wait) {
    return check.fail("wait applies to modes concurrency and mutex only, not " + mode, o.get("wait"));
  }
  if (o.get("read_body") !== undefined && mode === "throttle") {
    return check.fail("read_body does not apply to mode throttle (it holds nothing while the request runs)", o.get("read_body"));
  }
  if (o.get("renew") !== undefined && mode === "throttle") {
    return check.fail("renew does not apply to mode throttle (its lock is never released)", o.get("renew"));
  }
  // (rwlock) Requests of these methods are readers of the mutex: they share it, and exclude the others.
  let sharedMethods: LuaSet<string> | undefined;
  const sh = o.get("shared");
  if (sh !== undefined) {
    if (mode !== "mutex") return check.fail("shared applies to mode mutex only, not " + mode, sh);
    if (type(sh) !== "table" || (sh as unknown[]).length === 0) {
      return check.fail("shared must be a list of HTTP methods ({ \"GET\", \"HEAD\" })", sh);
    }
    sharedMethods = new LuaSet<string>();
    for (const x of sh as unknown[]) {
      if (type(x) !== "string" || !check.found(x as string, "^%u+$")) {
        return check.fail("shared must be a list of upper-case HTTP methods", x);
      }
      sharedMethods.add(x as string);
    }
  }
  let hold = 0;
  if (o.get("hold") !== undefined) {
    const [n, err] = check.integer("hold", o.get("hold"), 0, dlock.MAX_TTL, "a non-negative integer of ms");
    if (n === undefined) return $multi(undefined, err);
    hold = n;
  }
  let renewOn = mode !== "throttle";
  if (o.get("renew") !== undefined) {
    const [b, err] = check.bool("renew", o.get("renew"));
    if (b === undefined) return $multi(undefined, err);
    renewOn = b;
  }
  let readBody = false;
  if (o.get("read_body") !== undefined) {
    const [b, err] = check.bool("read_body", o.get("read_body"));
    if (b === undefined) return $multi(undefined, err);
    readBody = b;
  }
  const [rejectStatus, e1] = status(o, "reject_status", spec!.status);
  if (rejectStatus === undefined) return $multi(undefined, e1);
  const [missingStatus, e2] = status(o, "missing_status", 400);
  if (missingStatus === undefined) return $multi(undefined, e2);
  const [common, ce] = shared.parse(o);
  if (common === undefined) return $multi(undefined, ce);

  // The lock (or semaphore) underneath validates dict, redis, prefix, ttl, wait and permits.
  const base = new LuaTable<string, unknown>();
  base.set("dict", opt(o, "dict", "dlock"));
  base.set("redis", o.get("redis"));
  base.set("prefix", opt(o, "prefix", "dlock:gw:" + name + ":"));
  base.set("ttl", o.get("ttl"));
  base.set("wait", o.get("wait"));
  // Its counters and histograms under the guard's name ("mutex#1" as "mutex_1").
  base.set("name", string.gsub(name, "[^%w_%-%.]", "_")[0]);
  let locks: guard.Acquirer | undefined;
  let lerr: string | undefined;
  if (mode === "concurrency") {
    base.set("permits", o.get("permits"));
    [locks, lerr] = semaphore.create(base);
  } else {
    [locks, lerr] = dlock.create(base);
  }
  if (locks === undefined) return $multi(undefined, lerr);
  const store: lease.Store = locks;
  // (rwlock) A factory that refuses readers says why (redis.redlock).
  const noReaders = (locks as dlock.Locks).noReaders;
  if (sharedMethods !== undefined && noReaders !== undefined) return $multi(undefined, noReaders);
  let sharedTry: LuaTable<string, unknown> | undefined;
  let sharedWait: LuaTable<string, unknown> | undefined;
  if (sharedMethods !== undefined) {
    sharedTry = new LuaTable<string, unknown>();
    sharedTry.set("wait", 0);
    sharedTry.set("shared", true);
    sharedWait = new LuaTable<string, unknown>();
    sharedWait.set("wait", store.wait);
    sharedWait.set("shared", true);
  }

  const tryOpts = new LuaTable<string, unknown>();
  tryOpts.set("wait", 0);
  const waitOpts = new LuaTable<string, unknown>();
  waitOpts.set("wait", store.wait);

  const missingWhat = onMissing === "reject" ? "refused with " + missingStatus + " (on_missing = \"reject\")"
    : "let through unguarded (on_missing = \"pass\")";
  const errorWhat = onError === "deny" ? "refused with " + common.errorStatus + " (on_error = \"deny\")"
    : "let through unguarded (on_error = \"allow\")";
  const g = {
    name, mode: mode as guard.Mode, parts, keyFn, source, missingWhat, errorWhat, locks, dict: store.dict, ttl: store.ttl, hold,
    wait: store.wait, renew: renewOn, release: mode !== "throttle", readBody, onMissing, onError, rejectStatus, missingStatus,
    errorStatus: common.errorStatus, headers: common.headers, breakerFailures: common.breakerFailures,
    breakerCooldown: common.breakerCooldown, tryOpts, waitOpts, sharedMethods, sharedTry, sharedWait,
  };
  const made = setmetatable(g, guard.mt) as unknown as guard.Guard;
  registry.push(made);
  return $multi(made, undefined);
}

/**
 * log_by_lua at http (or server) level: ends the leases of every guard the
 * request passed, in whatever location it finished, also after internal redirects.
 */
export function log(this: void): void {
  inflight.finish(undefined);
  idempotency.finish();
}

/**
 * header_filter_by_lua at http (or server) level: idempotency guards note the
 * status and headers of the response to store. Does nothing for other requests.
 */
export function header_filter(this: void): void {
  idempotency.headerFilter();
}

/** body_filter_by_lua at http (or server) level: idempotency guards keep the body to store (up to max_body). */
export function body_filter(this: void): void {
  idempotency.bodyFilter();
}
