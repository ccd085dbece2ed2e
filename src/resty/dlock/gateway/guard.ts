// A guard of mode dedup, concurrency, throttle or mutex at work: access()
// decides for a request, log() ends what it took. Made by gateway.new
// (gateway.ts), which checks the options and builds the lock underneath.

import type * as lease from "../core/lease";
import * as shared from "./common";
import * as digest from "./digest";
import * as inflight from "./inflight";
import type * as keys from "./key";
import * as lockLocal from "./lock_local";
import * as stats from "./stats";

const read_body = ngx.req.read_body;
const hashed = digest.key;
const incr = stats.incr;
// Read per request by mutex guards with shared methods (readers).
const req_get_method = ngx.req.get_method;

export type Mode = "dedup" | "concurrency" | "throttle" | "mutex";
type KeyFn = keys.KeyFn;

/** What status pages need of any guard (idempotency guards included). */
export interface Listed {
  readonly name: string;
  readonly mode: string;
  readonly dict: NgxSharedDict;
}

/** A lock factory or a semaphore: what a guard acquires from. */
export interface Acquirer {
  readonly _store: lease.Store;
  acquire(key: string, opts?: LuaTable<string, unknown>): lease.AcquireResult;
}

export interface Guard {
  readonly name: string;
  readonly mode: Mode;
  /** Key template: literal parts and nginx variable names, alternating (literal first). */
  readonly parts: LuaTable<number, string> | undefined;
  readonly keyFn: KeyFn | undefined;
  readonly only: string | undefined;
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
  readonly onError: "allow" | "deny" | "local";
  /** on_error = "local" (concurrency, mutex): this nginx's share while Redis cannot decide. */
  readonly fallback: lockLocal.Local | undefined;
  readonly rejectStatus: number;
  readonly missingStatus: number;
  readonly errorStatus: number;
  readonly headers: LuaTable<string, string> | undefined;
  readonly breakerFailures: number;
  readonly breakerCooldown: number;
  /** Reused acquire options: first try without waiting, then with the wait budget. */
  readonly tryOpts: LuaTable<string, unknown>;
  readonly waitOpts: LuaTable<string, unknown>;
  /** (rwlock) Mode mutex: methods whose requests take the lock shared, with their acquire options. */
  readonly sharedMethods: LuaSet<string> | undefined;
  readonly sharedTry: LuaTable<string, unknown> | undefined;
  readonly sharedWait: LuaTable<string, unknown> | undefined;
  access(): void;
  log(): void;
}

function reject(g: Guard, status: number, retryAfterMs: number | undefined): never {
  return shared.refuse(g.headers, status, retryAfterMs);
}

function onRedisFailure(g: Guard, key: string): void {
  if (g.fallback !== undefined) {
    lockLocal.access(g, g.fallback, key, reject);
    return;
  }
  if (!stats.failedOpen(g)) reject(g, g.errorStatus, undefined);
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
      read_body();
    }
    const raw = shared.keyOf(this, this);
    if (raw === undefined) return;
    // Client-controlled: hash it, so any size and any bytes map to a bounded key.
    const key = hashed("", raw);
    if (stats.breakerOpen(this.dict, this.name) || (this.fallback !== undefined && !lockLocal.probe(this, this.fallback))) {
      incr(this.dict, this.name, "short_circuited");
      onRedisFailure(this, key);
      return;
    }
    // Readers share the key (gateway option shared).
    const reads = this.sharedMethods !== undefined && this.sharedMethods.has(req_get_method());
    const locks = this.locks;
    let [l, err, retryAfter] = locks.acquire(key, (reads && this.sharedTry) || this.tryOpts);
    if (l === undefined && err === "busy" && this.wait > 0) {
      incr(this.dict, this.name, "waited");
      [l, err, retryAfter] = locks.acquire(key, (reads && this.sharedWait) || this.waitOpts);
    }
    if (l !== undefined) {
      stats.success(this.dict, this.name);
      incr(this.dict, this.name, "acquired");
      inflight.track(this, l);
      return;
    }
    if (err === "busy" || err === "timeout") {
      stats.success(this.dict, this.name);
      incr(this.dict, this.name, err === "busy" ? "rejected" : "timed_out");
      reject(this, this.rejectStatus, retryAfter);
      return;
    }
    stats.redisFailed(this, err);
    onRedisFailure(this, key);
  },

  /**
   * In log_by_lua: the request is over; release this guard's lease (dedup after
   * a 2xx: hold it), or keep it unrenewed when the client went away while an
   * upstream was working. Finds the lease in whatever location the request ends.
   */
  log(this: Guard): void {
    inflight.finish(this);
    if (this.fallback !== undefined) lockLocal.finish(this, this.fallback);
  },
};
/** The metatable of every guard of these modes. */
export const mt = { __index: guardMethods };

