// Leases: what resty.dlock locks and resty.dlock.semaphore permits have in
// common (their options: options.ts): the lease object, made by an acquire (acquire.ts), released and extended
// owner-checked (what Redis's answers do to it is settle.ts's; many leases in
// one round trip, batch.ts; `with`, with.ts).

import * as check from "./check";
import * as ledger from "./ledger";
import * as meter from "./meter";
import * as options from "./options";
import * as backend from "../redis/backend";
import * as redis from "../redis/client";
import * as scripts from "../redis/scripts";
import * as settle from "./settle";
import * as watchdog from "./watchdog";
import * as clock from "./clock";

const ngx_get_phase = ngx.get_phase;
const clock_now = clock.now;
const clock_sleep = clock.sleep;
const lua_setmetatable = setmetatable;
const nowMs = settle.nowMs;
const extendScript = settle.extendScript;
const notSelf = check.notSelf;

/** The scripts of one kind of lease. */
export interface Kind {
  readonly acquire: scripts.Script;
  readonly release: scripts.Script;
  readonly extend: scripts.Script;
  /**
   * Redlock: the extend sent while the lease is valid, which also puts the key
   * back on a master that lost it (see core/settle.ts extendScript).
   */
  readonly restore?: scripts.Script;
  /** Several holders per key (permits): bookkeeping per token, not per key. */
  readonly shared: boolean;
  /** The acquire script also counts fences, in backend.fenceKey(lock key). */
  readonly fenced: boolean;
  /**
   * Waiters take tickets in the key's queue and the release hands the key to
   * the first (scripts.ts): then `drop` takes a ticket (or a handed key) back.
   */
  readonly drop: scripts.Script | undefined;
  /**
   * A shared lock's reader (redis/rwscripts.ts): its scripts take the key's
   * readers' set after the lock key, and its leases say `shared`.
   */
  readonly reader?: boolean;
}


/** What a factory (locks, semaphore) gives its leases. */
export interface Store {
  readonly dict: NgxSharedDict;
  readonly redis: redis.RedisConf;
  readonly prefix: string;
  readonly ttl: number;
  readonly wait: number;
  /** Its counters and histograms, under its name. */
  readonly meter: meter.Meter;
}

/**
 * A lease as its holder sees it: key, token, ttl, fence (with fencing) and the
 * methods. The rest is the library's (`_` fields): a holder that reads them
 * relies on what may change in any release.
 */
export interface Lease {
  readonly key: string;
  readonly token: string;
  ttl: number;
  /** With fencing: larger than the fence of every earlier holder of the key. */
  readonly fence: number | undefined;
  /** Taken with shared = true: one of the key's readers, beside others, never beside a writer. */
  readonly shared: boolean;
  readonly _store: Store;
  readonly _kind: Kind;
  readonly _rkey: string;
  /** Its record's key in the shared dict (see ledger). */
  readonly _rec: string;
  /** Its record as last written (ledger.drop and ledger.move compare it whole), nil when there is none of its own. */
  _recv: string | undefined;
  /** When that record expires (epoch ms): the held gauge's second it counts in. */
  _recAt: number;
  /** Over: Redis confirmed the release, or said the key is not ours. */
  _released?: boolean;
  /**
   * Epoch ms before which the key cannot have expired in Redis: ttl counted
   * from when the acquire or the last confirmed extend was sent.
   */
  _validUntil: number;
  /**
   * Epoch ms by which the key is gone from Redis at the latest, as far as this
   * worker knows: how long a release Redis did not confirm is retried.
   */
  _expires: number;
  /** A release reached Redis in time, but its reply was lost: it may have deleted the key. */
  _releaseSent?: boolean;
  /** release() was called: the watchdog stops renewing it, and a failed renewal is not a loss. */
  _releasing?: boolean;
  /**
   * An extend() and the watchdog's renewal of the lease may reach Redis in
   * either order, and the last sets the key's ttl: a renewal at the old ttl
   * landing after extend(10000) cut the key short under a lease that said
   * valid. A renewal sent while an extend() is on its way renews at the ttl
   * the extend() asks (_extendingMs: kept should its coroutine be killed on
   * the way, the ttl its holder asked for), and an extend() waits for a
   * renewal on its way (_renewing, set by the watchdog, whose thread ends).
   */
  _extendingMs?: number;
  _renewing?: boolean;
  /** The watchdog found it gone, or could not renew it before it expired. */
  _lost?: boolean;
  /** Told once when the lease is lost (renew = true only). */
  _onLost: OnLost | undefined;
  /** Epoch ms when it was taken (for the hold-time histogram). */
  _since: number;
  valid(): boolean;
  release(): LuaMultiReturn<[true | undefined, string | undefined]>;
  extend(ttl?: number): LuaMultiReturn<[true | undefined, string | undefined]>;
}

export type AcquireResult = LuaMultiReturn<[Lease | undefined, string | undefined, number | undefined]>;

// Where ngx_lua allows cosockets. Elsewhere (init, set, header/body filter, log,
// balancer) a Redis call would raise; say so as an error instead.
const COSOCKET_PHASES = check.set("rewrite", "server_rewrite", "access", "content", "timer",
  "ssl_cert", "ssl_session_fetch", "ssl_client_hello", "preread");

function phaseError(op: string): string | undefined {
  const phase = ngx_get_phase();
  if (COSOCKET_PHASES.has(phase)) {
    return undefined;
  }
  return "dlock: " + op + " needs cosockets, which nginx does not allow in the " + phase +
    " phase (use it in access/content, or from ngx.timer.at)";
}

/** Until a renewal of l on its way is back (bounded by its call's timeouts): an extend() must reach Redis after it. */
function quiesce(l: Lease): void {
  if (!l._renewing) return;
  const conf = l._store.redis;
  const deadline = clock_now() + (conf.connect_timeout + conf.read_timeout) / 1000;
  while (l._renewing && clock_now() < deadline) clock_sleep(0.002);
}

/** What the lease's holder is told when the watchdog finds it lost. */
export type OnLost = (this: void, lease: Lease, why: string) => void;


/** The leases' metatable (its __index, the methods, is set once they are). */
const leaseMt: { __index?: object } = {};

/**
 * lease:valid(): may the holder still act on it? No round trip: false once it
 * is released or lost, or when its ttl has run out by the local clock since
 * the acquire or the last renewal Redis confirmed.
 */
function valid(this: Lease): boolean {
  if (notSelf(this, leaseMt, "lease:valid()") !== undefined) return false;
  return !this._released && !this._lost && nowMs() < this._validUntil;
}

const leaseMethods = {
  /**
   * true, or nil, "not_owner" when the lease expired and the key is gone or
   * someone else's. On a Redis failure nil, "dlock: redis ...": the lease is
   * still ours as far as we know, and release() may be called again.
   */
  release(this: Lease): LuaMultiReturn<[true | undefined, string | undefined]> {
    const bad = notSelf(this, leaseMt, "lease:release()");
    if (bad !== undefined) return $multi(undefined, bad);
    const perr = phaseError("release");
    if (perr !== undefined) return $multi(undefined, perr);
    if (this._released) {
      return $multi(undefined, "not_owner");
    }
    this._releasing = true;
    const [res, err, fault] = backend.own(this._store.redis, this._kind.release, this._rkey, this.token);
    if (res === undefined) {
      settle.unconfirmed(this, fault, true);
      return $multi(undefined, err);
    }
    return settle.released(this, res);
  },

  valid,

  /** Reset the lease to `ttl` ms from now (default: its current ttl). */
  extend(this: Lease, ttl?: number): LuaMultiReturn<[true | undefined, string | undefined]> {
    const bad = notSelf(this, leaseMt, "lease:extend()");
    if (bad !== undefined) return $multi(undefined, bad);
    const perr = phaseError("extend");
    if (perr !== undefined) return $multi(undefined, perr);
    const [ms, terr] = options.extendTtl(ttl, this.ttl);
    if (ms === undefined) return $multi(undefined, terr);
    const watched = watchdog.watches(this);
    const rerr = options.renewable(watched, ms);
    if (rerr !== undefined) return $multi(undefined, rerr);
    if (this._released) {
      return $multi(undefined, "not_owner");
    }
    // Only the watchdog's renewals can cross an extend() (_extendingMs).
    if (watched) {
      quiesce(this);
      this._extendingMs = ms;
    }
    const sent = clock_now() * 1000;
    const [res, err, fault] = backend.own(this._store.redis, extendScript(this, nowMs()), this._rkey, this.token, ms);
    this._extendingMs = undefined;
    if (res === undefined) {
      settle.unconfirmed(this, fault, false);
      return $multi(undefined, err);
    }
    const [ok, xerr] = settle.extended(this, res, ms, sent);
    // A renewed lease at a shorter ttl: the watchdog's sweep must come sooner.
    if (ok !== undefined) watchdog.extended(this);
    return $multi(ok, xerr);
  },
};
leaseMt.__index = leaseMethods;

/** A lease just taken: sent is when its acquire was sent (epoch ms), fence its fence (fenced kinds). */
export function make(store: Store, kind: Kind, key: string, rkey: string, tok: string, ttl: number, sent: number, fence: number | undefined): Lease {
  const rec = ledger.recordKey(store.redis.keyspace, rkey, tok, kind.shared);
  const [recorded, recv] = ledger.record(store.dict, rec, tok, key, ttl);
  if (recorded !== undefined) meter.recorded(store.meter, recorded);
  const now = nowMs();
  // The flags (_released, _releaseSent, _releasing, _lost) start nil: 14
  // fields, 15 with _onLost, keep the table within 16 hash slots; at 17 LuaJIT
  // gives it 32, 384 bytes more per lease.
  const lease = {
    key, token: tok, ttl, fence, shared: kind.reader === true, _store: store, _kind: kind, _rkey: rkey, _rec: rec,
    _recv: recv, _recAt: recorded ?? 0,
    _validUntil: sent + backend.validity(store.redis, ttl), _expires: now + ttl, _since: now,
  };
  // Not a tail call: LuaJIT gives up a trace that tail-calls a builtin on its
  // way out ("leaving loop in root trace"), and leaves the function interpreted.
  const l = lua_setmetatable(lease, leaseMt) as Lease;
  return l;
}

/**
 * Release l without waiting for Redis, from any phase (the gateway's log
 * phase has no cosockets): its release rides the next pipeline to its server
 * (backend.postOwn), and the sender reports the answered call to the job's
 * `post` (set by the caller), for posted() to settle. nil when it cannot go
 * that way (no auto-pipelining, Redlock, a Cluster map being read): then
 * release() it from a timer.
 */
export function post(l: Lease): backend.Job | undefined {
  if (l._released) return undefined;
  const j = backend.postOwn(l._store.redis, l._kind.release, l._rkey, l.token);
  if (j !== undefined) l._releasing = true;
  return j;
}

/** What a posted release came to, as release() would say it. */
export function posted(l: Lease, j: backend.Job): LuaMultiReturn<[true | undefined, string | undefined]> {
  if (j.res === undefined) {
    settle.unconfirmed(l, j.fault, true);
    return $multi(undefined, j.err);
  }
  return settle.released(l, j.res);
}

// Exported by name: this module's own uses of them are locals, not lookups in its exports table.
export { phaseError, quiesce };
