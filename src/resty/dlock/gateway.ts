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
// throttle (one request per key per `ttl`, 429), mutex (one at a time, 503 after `wait`),
// idempotency (gateway/idempotency.ts), rate (`rate` per `period` ms per key, 429: gateway/rate.ts).

import * as check from "./core/check";
import * as dlock from "../dlock";
import * as common from "./gateway/common";
import * as keys from "./gateway/key";
import * as idempotency from "./gateway/idempotency";
import * as inflight from "./gateway/inflight";
import * as lockLocal from "./gateway/lock_local";
import * as rateLocal from "./gateway/rate_local";
import * as recovery from "./core/recovery";
import * as workers from "./core/workers";
import * as guard from "./gateway/guard";
import * as rate from "./gateway/rate";
import * as registry from "./gateway/registry";
import type * as lease from "./core/lease";
import * as options from "./gateway/options";
import * as semaphore from "./semaphore";
import * as seen from "./gateway/seen";
import type * as request from "./core/request";
import * as stats from "./gateway/stats";
import * as breaker from "./gateway/breaker";

import * as version from "./version";
export const _VERSION = version.VERSION;
export type { Listed } from "./gateway/guard";

const lua_tostring = tostring;
const lua_setmetatable = setmetatable;
const str_gsub = string.gsub;
const get_phase = ngx.get_phase;

/** The options of the lock (or semaphore) underneath: the guard's, as the user gave them. */
function lockOptions(given: LuaTable<string, unknown>, o: options.Options, name: string): LuaTable<string, unknown> {
  const base = new LuaTable<string, unknown>();
  let dict = given.get("dict");
  if (dict === undefined) dict = "dlock";
  base.set("dict", dict);
  base.set("redis", given.get("redis"));
  base.set("prefix", o.prefix ?? "dlock:gw:" + name + ":");
  base.set("ttl", o.ttl);
  base.set("wait", o.wait);
  // Its counters and histograms under the guard's name ("mutex#1" as "mutex_1").
  base.set("name", str_gsub(name, "[^%w_%-%.]", "_")[0]);
  if (o.permits !== undefined) base.set("permits", o.permits);
  return base;
}

/**
 * Create a guard (once, in init_by_lua). Returns it, or nil and an error naming the bad option.
 * @customName new
 */
export function create(this: void, opts: unknown): LuaMultiReturn<[guard.Guard | idempotency.Guard | rate.Guard | undefined, string | undefined]> {
  const phase = get_phase();
  if (phase !== "init" && phase !== "init_worker" && phase !== "timer") {
    // Each request would get a lock of its own (excluding nothing) and a name of its own in the metrics.
    return $multi(undefined, "dlock: gateway.new in the " + phase + " phase: create guards once, in init_by_lua " +
      "or init_worker_by_lua, not per request (a guard made per request excludes nothing and adds metrics without bound)");
  }
  if (opts === undefined) return $multi(undefined, "dlock: gateway.new needs an options table with mode, key and on_error");
  const [o, oerr] = options.validate(opts);
  if (o === undefined) return $multi(undefined, oerr);
  const mode = o.mode;
  const name = o.name ?? mode + "#" + lua_tostring(registry.count() + 1);
  if (registry.taken(name)) return check.fail("a guard with this name exists already", name);

  if (mode === "idempotency") {
    // Its own module: Redis records and response capture of its own.
    const [ig, ierr] = idempotency.create(o, name);
    if (ig === undefined) return $multi(undefined, ierr);
    registry.add(ig);
    return $multi(ig, undefined);
  }
  if (mode === "rate") {
    // Its own module: a Redis script of its own, nothing held while the request runs.
    const [rg, rerr] = rate.create(o, name);
    if (rg === undefined) return $multi(undefined, rerr);
    if (rg._shares !== undefined) workers.onStart(() => rateLocal.resume(rg));
    registry.add(rg);
    return $multi(rg, undefined);
  }

  // The lock (or semaphore) underneath: the options checked above, checked again there (at new() only).
  const base = lockOptions(opts as LuaTable<string, unknown>, o, name);
  let locks: guard.Acquirer | undefined;
  let lerr: string | undefined;
  if (mode === "concurrency") {
    [locks, lerr] = semaphore.create(base);
  } else {
    [locks, lerr] = dlock.create(base);
  }
  if (locks === undefined) return $multi(undefined, lerr);
  const store: lease.Store = locks._store;
  recovery.keep(store);
  // A factory that refuses readers says why (redis.redlock).
  const sharedMethods = o.shared;
  let sharedTry: LuaTable<string, unknown> | undefined;
  let sharedWait: LuaTable<string, unknown> | undefined;
  if (sharedMethods !== undefined) {
    const noReaders = (locks as dlock.Locks)._noReaders;
    if (noReaders !== undefined) return $multi(undefined, noReaders);
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

  let fallback: lockLocal.Local | undefined;
  if (o.on_error === "local") {
    const [l, llerr] = lockLocal.create(mode, o.permits ?? 1, o.fleet, name, store.ttl, breaker.probeWindow(store.redis));
    if (l === undefined) return $multi(undefined, llerr);
    fallback = l;
  } else if (o.fleet !== undefined) {
    return check.fail("fleet applies with on_error = \"local\" only", o.fleet);
  }

  const key: keys.Template = o.key;
  const rejectStatus = o.reject_status ?? options.mode(mode).status;
  const g: guard.State = {
    name, mode: mode as guard.Mode, _key: key, _missingWhat: common.missingWhat(o.on_missing, o.missing_status),
    _errorWhat: common.errorWhat(o.on_error, o.error_status), _locks: locks, _dict: store.dict, _ttl: store.ttl,
    _hold: o.hold ?? 0, _wait: store.wait, _renew: o.renew === true, _release: mode !== "throttle",
    _givesBack: mode === "throttle",
    _readBody: o.read_body === true, _onMissing: o.on_missing, _onError: o.on_error, _fallback: fallback,
    _rejectStatus: rejectStatus, _missingStatus: o.missing_status, _errorStatus: o.error_status, _headers: o.headers,
    _refused: seen.create<request.Anchor>(),
    _breakerFailures: o.breaker_failures, _breakerCooldown: o.breaker_cooldown, _probeFor: breaker.probeWindow(store.redis),
    _tryOpts: tryOpts, _waitOpts: waitOpts,
    _sharedMethods: sharedMethods, _sharedTry: sharedTry, _sharedWait: sharedWait,
  };
  stats.prepare(store.dict, name);
  const made = lua_setmetatable(g, guard.mt) as unknown as guard.Guard;
  if (fallback !== undefined) {
    lockLocal.register(made);
    workers.onStart(() => lockLocal.resume(made));
  }
  registry.add(made);
  return $multi(made, undefined);
}

/**
 * log_by_lua at http (or server) level: ends the leases of every guard the
 * request passed, in whatever location it finished, also after internal redirects.
 */
export function log(this: void): void {
  inflight.finish(undefined);
  lockLocal.finishAll();
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
