// A guard of mode dedup, concurrency, throttle or mutex at work: access()
// decides for a request, log() ends what it took. Made by gateway.new
// (gateway.ts), which checks the options and builds the lock underneath.

import type * as lease from "../core/lease";
import * as meter from "../core/meter";
import * as shared from "./common";
import * as digest from "./digest";
import * as inflight from "./inflight";
import type * as keys from "./key";
import * as lockLocal from "./lock_local";
import * as onway from "./onway";
import * as stats from "./stats";
import * as breaker from "./breaker";
import * as request from "../core/request";
import * as seen from "./seen";

const read_body = ngx.req.read_body;
const hashed = digest.key;
const incr = stats.incr;
const meter_refused = meter.refused;
// Read per request by mutex guards with shared methods (readers).
const req_get_method = ngx.req.get_method;
const request_id = request.id;
const request_anchor = request.anchor;
const seen_find = seen.find;
const seen_put = seen.put;

export type Mode = "dedup" | "concurrency" | "throttle" | "mutex";

/** What status pages need of any guard (idempotency guards included). */
export interface Listed {
  readonly name: string;
  readonly mode: string;
  readonly _dict: NgxSharedDict;
  /** "local": the guard decides alone while its breaker is open (status shows it degraded). */
  readonly _onError: string;
}

/** A lock factory or a semaphore: what a guard acquires from. */
export interface Acquirer {
  readonly _store: lease.Store;
  acquire(key: string, opts?: LuaTable<string, unknown>): lease.AcquireResult;
  /** acquire() whose busy answer is not metered: the try before a wait. */
  _try(key: string, opts?: LuaTable<string, unknown>): lease.AcquireResult;
}

/** A guard's state: its name and mode to read, the rest private (gateway.new builds it). */
export interface State {
  readonly name: string;
  readonly mode: Mode;
  /** The key option, compiled (key.ts). */
  readonly _key: keys.Template;
  /** What happens to a request without its key, and to one whose key cannot be computed (for log lines). */
  readonly _missingWhat: string;
  readonly _errorWhat: string;
  readonly _locks: Acquirer;
  readonly _dict: NgxSharedDict;
  readonly _ttl: number;
  readonly _hold: number;
  readonly _wait: number;
  readonly _renew: boolean;
  /** Release when the request ends (not throttle: its key stays for the ttl). */
  readonly _release: boolean;
  /** Throttle: its key is given back when a later guard refuses the request (giveback.ts). */
  readonly _givesBack: boolean;
  /** Read the request body before taking the lease (slow uploads hold no permit). */
  readonly _readBody: boolean;
  readonly _onMissing: "pass" | "reject";
  readonly _onError: "allow" | "deny" | "local";
  /** on_error = "local" (concurrency, mutex): this nginx's share while Redis cannot decide. */
  readonly _fallback: lockLocal.Local | undefined;
  readonly _rejectStatus: number;
  readonly _missingStatus: number;
  readonly _errorStatus: number;
  readonly _headers: LuaTable<string, string> | undefined;
  /** Requests it refused, still running: an error_page may bring them back (refusedHere). */
  readonly _refused: seen.Seen<request.Anchor>;
  readonly _breakerFailures: number;
  readonly _breakerCooldown: number;
  /** Seconds a half-open breaker's probe has (breaker.probeWindow). */
  readonly _probeFor: number;
  /** Reused acquire options: first try without waiting, then with the wait budget. */
  readonly _tryOpts: LuaTable<string, unknown>;
  readonly _waitOpts: LuaTable<string, unknown>;
  /** (rwlock) Mode mutex: methods whose requests take the lock shared, with their acquire options. */
  readonly _sharedMethods: LuaSet<string> | undefined;
  readonly _sharedTry: LuaTable<string, unknown> | undefined;
  readonly _sharedWait: LuaTable<string, unknown> | undefined;
}

export interface Guard extends State {
  access(): void;
  log(): void;
}

/** Keep the request g refuses, for refusedHere() should an error_page bring it back. */
function remember(g: Guard): void {
  const an = request_anchor();
  if (an !== undefined) seen_put(g._refused, an);
}

/** Refuse a request Redis decided against: the guards it passed before give back what they took. */
function reject(g: Guard, status: number, retryAfterMs: number | undefined): never {
  remember(g);
  return shared.refuse(g._headers, status, retryAfterMs);
}

/** Refuse a request because Redis failed (or the breaker is open). */
function rejectDown(g: Guard, status: number, retryAfterMs: number | undefined): never {
  remember(g);
  return shared.refuseDown(g._headers, status, retryAfterMs);
}

function onRedisFailure(g: Guard, key: string): void {
  if (g._fallback !== undefined) {
    lockLocal.access(g, g._fallback, key, rejectDown);
    return;
  }
  if (!breaker.failedOpen(g)) rejectDown(g, g._errorStatus, undefined);
}

/**
 * Must this request do without Redis? The breaker open; or half open and this
 * is not the request that asks Redis whether it is back (with a local
 * fallback, a timer of this nginx asks it, and no request).
 */
function skipsRedis(g: Guard, fallback: lockLocal.Local | undefined): boolean {
  if (fallback !== undefined) return breaker.breakerOpen(g._dict, g.name) || !lockLocal.probe(g, fallback);
  return breaker.skips(g._dict, g.name, g._probeFor);
}

/**
 * Did this guard refuse this request already? An error_page for its status
 * brings it back (a busy page under the guarded location): it passes to
 * that page, as nginx's limit_req and limit_conn decide once per request,
 * instead of waiting a second time and answering with nginx's own page.
 */
function refusedHere(g: Guard): boolean {
  if (g._refused.count === 0) return false;
  const rid = request_id();
  return rid !== undefined && seen_find(g._refused, rid) !== undefined;
}

/** The metatable of every guard of these modes (its __index, the methods, is set once they are). */
const mt: { __index?: object } = {};

const guardMethods = {
  /** In access_by_lua: let the request through, or end it with the guard's status. */
  access(this: Guard): void {
    if (shared.misused(this, mt, "access")) return;
    if (!shared.decides(this.name)) return;
    if (refusedHere(this)) return;
    if (this._readBody) {
      // A permit held while a slow client trickles its body in would starve the key.
      read_body();
    }
    const raw = shared.keyOf(this, this._key);
    if (raw === undefined) return;
    // Client-controlled: hash it, so any size and any bytes map to a bounded key.
    const key = hashed("", raw);
    if (inflight.holds(this, key)) {
      // The same request again, after an internal redirect: it holds the key already.
      return;
    }
    const fallback = this._fallback;
    if (skipsRedis(this, fallback)) {
      incr(this._dict, this.name, "short_circuited");
      onRedisFailure(this, key);
      return;
    }
    // Readers share the key (gateway option shared).
    const reads = this._sharedMethods !== undefined && this._sharedMethods.has(req_get_method());
    const locks = this._locks;
    // A try first, without joining a line: the wait (and its turn in this worker) only when the key is held.
    // Its busy answer is not metered: what follows it is the request's outcome.
    const tryOpts = (reads && this._sharedTry) || this._tryOpts;
    let [l, err, retryAfter] = locks._try(key, tryOpts);
    if (l === undefined && err === "busy") {
      if (this._wait > 0) {
        incr(this._dict, this.name, "waited");
        [l, err, retryAfter] = locks.acquire(key, (reads && this._sharedWait) || this._waitOpts);
      } else if (onway.awaited(this._dict, locks._store.prefix + key)) {
        // Held by a request of this nginx that has ended, its release on its way (onway.ts): once more.
        [l, err, retryAfter] = locks.acquire(key, tryOpts);
      } else {
        meter_refused(locks._store.meter, "busy");
      }
    }
    if (l !== undefined) {
      breaker.success(this._dict, this.name);
      incr(this._dict, this.name, "acquired");
      if (inflight.track(this, l) !== false) return;
      // No watchdog (no timer to be had): the lease was let go, and on_error decides, as without Redis.
      onRedisFailure(this, key);
      return;
    }
    if (err === "busy" || err === "timeout") {
      breaker.success(this._dict, this.name);
      incr(this._dict, this.name, err === "busy" ? "rejected" : "timed_out");
      reject(this, this._rejectStatus, retryAfter);
      return;
    }
    breaker.redisFailed(this, err);
    onRedisFailure(this, key);
  },

  /**
   * In log_by_lua: the request is over; release this guard's lease (dedup after
   * a 2xx: hold it), or keep it unrenewed when the client went away while an
   * upstream was working. Finds the lease in whatever location the request ends.
   */
  log(this: Guard): void {
    if (shared.misused(this, mt, "log")) return;
    inflight.finish(this);
    if (this._fallback !== undefined) lockLocal.finish(this, this._fallback);
  },
};
mt.__index = guardMethods;

// Exported by name: the methods read it as a local on every request, not through the exports table.
export { mt };
