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
import type * as lease from "./core/lease";
import * as meter from "./core/meter";
import * as request from "./gateway/request";
import * as semaphore from "./semaphore";
import * as stats from "./gateway/stats";
import * as token from "./core/token";

export { VERSION as _VERSION } from "./version";

type Mode = "dedup" | "concurrency" | "throttle" | "mutex";
type KeyFn = keys.KeyFn;

/** What status pages need of any guard (idempotency guards included). */
export interface Listed {
  readonly name: string;
  readonly mode: string;
  readonly dict: NgxSharedDict;
}

/** A lock factory or a semaphore: what a guard acquires from. */
interface Acquirer extends lease.Store {
  acquire(key: string, opts?: LuaTable<string, unknown>): lease.AcquireResult;
}

export interface Guard {
  readonly name: string;
  readonly mode: Mode;
  /** Key template: literal parts and nginx variable names, alternating (literal first). */
  readonly parts: LuaTable<number, string> | undefined;
  readonly keyFn: KeyFn | undefined;
  readonly source: string;
  /** What happens to a request without its key, and to one whose key cannot be computed (for log lines). */
  readonly missingWhat: string;
  readonly errorWhat: string;
  readonly locks: Acquirer;
  readonly dict: NgxSharedDict;
  readonly ttl: number;
  readonly hold: number;
  readonly wait: number;
  readonly renew: boolean;
  /** Release when the request ends (not throttle: its key stays for the ttl). */
  readonly release: boolean;
  /** Read the request body before taking the lease (slow uploads hold no permit). */
  readonly readBody: boolean;
  readonly onMissing: "pass" | "reject";
  readonly onError: "allow" | "deny";
  readonly rejectStatus: number;
  readonly missingStatus: number;
  readonly errorStatus: number;
  readonly headers: LuaTable<string, string> | undefined;
  readonly breakerFailures: number;
  readonly breakerCooldown: number;
  /** Reused acquire options: first try without waiting, then with the wait budget. */
  readonly tryOpts: LuaTable<string, unknown>;
  readonly waitOpts: LuaTable<string, unknown>;
  access(): void;
  log(): void;
}

const MODES = new LuaTable<string, { status: number; wait: boolean }>();
MODES.set("dedup", { status: 409, wait: false });
MODES.set("concurrency", { status: 429, wait: true });
MODES.set("throttle", { status: 429, wait: false });
MODES.set("mutex", { status: 503, wait: true });

const OPTIONS = check.set(
  "name", "mode", "key", "dict", "redis", "prefix", "ttl", "hold", "permits", "wait",
  "renew", "on_missing", "on_error", "reject_status", "missing_status", "error_status",
  "headers", "breaker_failures", "breaker_cooldown", "read_body",
  // mode idempotency only (validated in gateway/idempotency)
  "scope", "methods", "lease", "max_body", "max_request_body", "store", "store_headers",
);

const registry: Listed[] = [];

/** Where gateway.new may run: before requests (and in timers, which belong to no request). */
const PHASES = check.set("init", "init_worker", "timer");

/** Guards created so far in this worker (in creation order), for status pages. */
export function guards(): Listed[] {
  return registry;
}

function reject(g: Guard, status: number, retryAfterMs: number | undefined): never {
  if (retryAfterMs !== undefined) {
    ngx.header.set("Retry-After", math.max(1, math.ceil(retryAfterMs / 1000)));
  }
  if (g.headers !== undefined) {
    for (const [k, v] of g.headers) {
      ngx.header.set(k, v);
    }
  }
  return ngx.exit(status);
}

function onRedisFailure(g: Guard): void {
  if (g.onError === "allow") {
    stats.incr(g.dict, g.name, "failed_open");
    return;
  }
  stats.incr(g.dict, g.name, "failed_closed");
  reject(g, g.errorStatus, undefined);
}

const guardMethods = {
  /** In access_by_lua: let the request through, or end it with the guard's status. */
  access(this: Guard): void {
    if (!shared.decides(this.name)) return;
    if (inflight.holds(this)) {
      // The same request again, after an internal redirect: it holds the key already.
      return;
    }
    if (this.readBody) {
      // A permit held while a slow client trickles its body in would starve the key.
      ngx.req.read_body();
    }
    const [raw, kerr] = keys.value(this);
    if (raw === undefined) {
      if (kerr !== undefined) {
        // Not a missing key: on_missing = "pass" must not let it through unguarded.
        stats.incr(this.dict, this.name, "key_errors");
        keys.failed(this.name, kerr, this.errorWhat);
        if (this.onError === "deny") reject(this, this.errorStatus, undefined);
        return;
      }
      stats.incr(this.dict, this.name, "missing_key");
      keys.note(this.name, this, false, this.missingWhat);
      if (this.onMissing === "reject") {
        reject(this, this.missingStatus, undefined);
      }
      return;
    }
    keys.note(this.name, this, true, this.missingWhat);
    if (stats.breakerOpen(this.dict, this.name)) {
      stats.incr(this.dict, this.name, "short_circuited");
      onRedisFailure(this);
      return;
    }
    // Client-controlled: hash it, so any size and any bytes map to a bounded key.
    const key = token.hex(ngx.sha1_bin(raw));
    let [l, err, retryAfter] = this.locks.acquire(key, this.tryOpts);
    if (l === undefined && err === "busy" && this.wait > 0) {
      stats.incr(this.dict, this.name, "waited");
      [l, err, retryAfter] = this.locks.acquire(key, this.waitOpts);
    }
    if (l !== undefined) {
      stats.success(this.dict, this.name);
      stats.incr(this.dict, this.name, "acquired");
      const a = request.anchor();
      if (a !== undefined) {
        inflight.track(this, l, a);
      }
      return;
    }
    if (err === "busy" || err === "timeout") {
      stats.success(this.dict, this.name);
      stats.incr(this.dict, this.name, err === "busy" ? "rejected" : "timed_out");
      reject(this, this.rejectStatus, retryAfter);
      return;
    }
    stats.incr(this.dict, this.name, "redis_errors");
    stats.failure(this.dict, this.name, this.breakerFailures, this.breakerCooldown);
    ngx.log(ngx.ERR, "dlock: guard ", this.name, ": ", check.reason(err));
    onRedisFailure(this);
  },

  /**
   * In log_by_lua: the request is over; release this guard's lease (dedup after
   * a 2xx: hold it), or keep it unrenewed when the client went away while an
   * upstream was working. Finds the lease in whatever location the request ends.
   */
  log(this: Guard): void {
    inflight.finish(this);
  },
};
const guardMt = { __index: guardMethods };

const opt = shared.opt;

function status(o: LuaTable<string, unknown>, name: string, dflt: number): LuaMultiReturn<[number | undefined, string | undefined]> {
  return check.integer(name, opt(o, name, dflt), 200, 599, "an HTTP status code");
}

/**
 * Create a guard (once, in init_by_lua). Returns it, or nil and an error naming the bad option.
 * @customName new
 */
export function create(this: void, opts: unknown): LuaMultiReturn<[Guard | idempotency.Guard | undefined, string | undefined]> {
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
  let locks: Acquirer | undefined;
  let lerr: string | undefined;
  if (mode === "concurrency") {
    base.set("permits", o.get("permits"));
    [locks, lerr] = semaphore.create(base);
  } else {
    [locks, lerr] = dlock.create(base);
  }
  if (locks === undefined) return $multi(undefined, lerr);
  const store: lease.Store = locks;

  const tryOpts = new LuaTable<string, unknown>();
  tryOpts.set("wait", 0);
  const waitOpts = new LuaTable<string, unknown>();
  waitOpts.set("wait", store.wait);

  const missingWhat = onMissing === "reject" ? "refused with " + missingStatus + " (on_missing = \"reject\")"
    : "let through unguarded (on_missing = \"pass\")";
  const errorWhat = onError === "deny" ? "refused with " + common.errorStatus + " (on_error = \"deny\")"
    : "let through unguarded (on_error = \"allow\")";
  const g = {
    name, mode: mode as Mode, parts, keyFn, source, missingWhat, errorWhat, locks, dict: store.dict, ttl: store.ttl, hold,
    wait: store.wait, renew: renewOn, release: mode !== "throttle", readBody, onMissing, onError, rejectStatus, missingStatus,
    errorStatus: common.errorStatus, headers: common.headers, breakerFailures: common.breakerFailures,
    breakerCooldown: common.breakerCooldown, tryOpts, waitOpts,
  };
  const guard = setmetatable(g, guardMt) as unknown as Guard;
  registry.push(guard);
  return $multi(guard, undefined);
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
