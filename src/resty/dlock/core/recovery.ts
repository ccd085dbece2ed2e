// Crash recovery: a worker that dies without running its Lua (SIGKILL, a
// segfault, the OOM killer) leaves its leases taken in Redis until their ttl
// runs out. nginx starts a replacement at once; that worker reads the dead
// one's records from the shared dict (they carry its pid, the key and the
// token) and releases them, owner-checked, so a successor that already took
// a key is never touched. Every factory made in this process is registered
// with what its records need: the dict, the prefix, the Redis it uses and its
// release script. The leases of a whole nginx that died (the dict dies with
// it) still expire by their ttl.
//
// A worker that exits gracefully (nginx -s reload, -s quit) is no crash:
// what it leaves recorded is kept on purpose until its ttl (a client abort
// while the backend works, a throttle, a dedup hold, a Lua caller's lease),
// and a sweep after it is gone (the next reload's workers) must not release
// it. As it begins to exit, nginx fires its pending timers early: one of
// them marks its pid in every dict ("x:<pid>"), and sweeps pass marked pids
// by; the mark goes once the worker is gone and nothing of it is left.
//
// Run from init_worker_by_lua (dlock.init_worker()), and otherwise at a
// worker's first acquire.

import * as backend from "../redis/backend";
import * as script from "../redis/script";
import * as check from "./check";
import type * as lease from "./lease";
import * as ledger from "./ledger";
import * as meter from "./meter";
import * as quiet from "./quiet";
import type * as scripts from "../redis/scripts";

const ffi = require("ffi") as FfiModule;
pcall(ffi.cdef, "int kill(int pid, int sig);");

const ngx_get_phase = ngx.get_phase;
const worker_pid = ngx.worker.pid;
const timer_at = ngx.timer.at;
const timer_every = ngx.timer.every;
const ngx_log = ngx.log;
const WARN = ngx.WARN;
const NOTICE = ngx.NOTICE;
const lua_tostring = tostring;
const lua_pcall = pcall;
const lua_pairs = pairs;
const lua_ipairs = ipairs;
const math_min = math.min;
const lockKey = script.lockKey;
const quiet_tally = quiet.tally;
const quiet_add = quiet.add;
const quiet_named = quiet.named;
const lua_tonumber = tonumber;
const str_sub = string.sub;
const ESRCH = 3;

interface Factory {
  readonly store: lease.Store;
  readonly kind: lease.Kind;
}

/** Registered factories whose dead workers' leases this worker has not looked for yet. */
let pending: Factory[] = [];

/** The dicts of every registered factory: where an exiting worker leaves its mark. */
const dicts = new LuaTable<NgxSharedDict, boolean>();

/** The mark of a worker that began a graceful exit: "x:<pid>". */
const EXITED = "x:";

/** Remember a factory: its dead workers' leases can be released. */
export function register(store: lease.Store, kind: lease.Kind): void {
  pending.push({ store, kind });
  dicts.set(store.dict, true);
}

/** Stores whose dead workers' leases run out by their ttl: a guard's (the backend may still run their requests). */
const kept = new LuaTable<lease.Store, boolean>();

/**
 * A guard's factory: a worker that dies leaves its requests' leases to their
 * ttl, as a client's abort does (nginx cut the upstream connections, the
 * application behind them goes on); its waiters' tickets are dropped.
 */
export function keep(store: lease.Store): void {
  kept.set(store, true);
}

/**
 * Period of the exit watch: it is there to be fired early. A repeating timer,
 * re-armed by nginx itself: a re-arm from Lua fails when the worker's timers
 * are at lua_max_pending_timers, and the watch would be gone for good.
 */
const WATCH = 86400;
let watching = false;

/** The exit watch's timer: fired early (premature) as the worker begins a graceful exit. */
function exiting(this: void, premature: boolean): void {
  if (!premature) return;
  const mark = EXITED + lua_tostring(worker_pid());
  // safe_set: a full dict drops the mark (its leases are then released as a crash's), never a record.
  for (const [d] of lua_pairs(dicts)) d.safe_set(mark, true);
}


/** Is there no process with this pid (kill(pid, 0) says ESRCH)? */
function dead(pid: number): boolean {
  const libc = ffi.C as unknown as { kill(this: void, pid: number, sig: number): number };
  return libc.kill(pid, 0) !== 0 && (ffi as unknown as { errno(this: void): number }).errno() === ESRCH;
}

interface Item {
  readonly rec: string;
  readonly target: backend.Target;
}

/** A give-back Redis did not take (down, paused, failing over): tried again until the records run out. */
interface Retry {
  readonly dict: NgxSharedDict;
  readonly f: Factory;
  readonly s: scripts.Script;
  readonly items: Item[];
}

/** Seconds before the first retry of a give-back, doubling up to RETRY_MAX while Redis does not take it. */
const RETRY_FIRST = 0.5;
const RETRY_MAX = 4;

/**
 * Give back, in one batch, what dead workers of factory f left: leases (its
 * release script) or tickets (its drop). Returns the items Redis did not take;
 * `first`: the first try, which says why (the retries say nothing until they succeed).
 */
function giveBack(dict: NgxSharedDict, f: Factory, s: scripts.Script, items: Item[], first: boolean): Item[] {
  const targets: backend.Target[] = [];
  for (const [_, it] of lua_ipairs(items)) targets.push(it.target);
  const out = backend.batch(f.store.redis, s, targets);
  let released = 0;
  // What Redis would not take: one line for the batch, not one per key.
  const failed = quiet_tally();
  const left: Item[] = [];
  let why: string | undefined;
  for (const i of $range(1, items.length)) {
    const it = items[i - 1]!;
    if (out.replies.get(i) !== undefined) {
      const expires = ledger.forget(dict, it.rec, it.target.token);
      // A lease's record leaves the held gauge; a waiter's ticket was never in it.
      if (expires !== undefined && s !== f.kind.drop) meter.forgotten(f.store.meter, expires);
      if (out.replies.get(i) !== 0) released++;
    } else {
      quiet_add(failed, it.target.rkey);
      left.push(it);
      why = why ?? out.errors.get(i);
    }
  }
  if (failed.count > 0 && first) {
    ngx_log(WARN, "dlock: recovery: ", s === f.kind.drop ? "dropping the tickets for " : "releasing ", failed.count,
      " key(s) of dead worker(s) failed (", quiet_named(failed), "): ", check.reason(why),
      " (tried again until Redis takes it or their ttl runs out)");
  }
  if (released > 0) {
    ngx_log(NOTICE, "dlock: recovery: ", s === f.kind.drop ? "dropped the tickets (or passed on the keys) of " : "released ",
      released, s === f.kind.drop ? " waiter(s)" : " lease(s)", " of dead worker(s) on ", f.store.redis.endpoint);
  }
  return left;
}

/**
 * Another try at what Redis did not take, for the items still recorded (a
 * record leaves the dict when its lease's ttl is over: Redis has let it go by
 * then). A worker exiting tries once more, and leaves the rest to their ttl.
 */
function retry(this: void, premature: boolean, r: Retry, delay: number): void {
  const still: Item[] = [];
  for (const [_, it] of lua_ipairs(r.items)) {
    if (ledger.holder(r.dict, it.rec)[0] !== undefined) still.push(it);
  }
  if (still.length === 0) return;
  const left = giveBack(r.dict, r.f, r.s, still, false);
  if (premature || left.length === 0) return;
  const next = math_min(delay * 2, RETRY_MAX);
  const [ok, err] = timer_at(next, retry, { dict: r.dict, f: r.f, s: r.s, items: left }, next);
  if (!ok) ngx_log(WARN, "dlock: recovery: cannot retry giving back ", left.length, " key(s) of dead worker(s): ", err);
}

/** What Redis did not take at the first try, tried again soon. */
function later(dict: NgxSharedDict, f: Factory, s: scripts.Script, items: Item[]): void {
  if (items.length === 0) return;
  const [ok, err] = timer_at(RETRY_FIRST, retry, { dict, f, s, items }, RETRY_FIRST);
  if (!ok) ngx_log(WARN, "dlock: recovery: cannot retry giving back ", items.length, " key(s) of dead worker(s): ", err);
}

function add(todo: LuaTable<Factory, Item[]>, f: Factory, r: ledger.Record): void {
  let t = todo.get(f);
  if (t === undefined) {
    t = [];
    todo.set(f, t);
  }
  t.push({ rec: r.rec, target: { rkey: r.rkey, token: r.token } });
}

/** Could a factory of store s have taken record r (its key and server)? */
function keyOf(s: lease.Store, r: ledger.Record): boolean {
  const p = s.prefix;
  return (p + r.key === r.rkey || lockKey(p, r.key, p + r.key, s.redis.slotted)[0] === r.rkey) &&
    (r.space === "" || r.space === s.redis.keyspace);
}

/** Could f have taken record r (its key, kind and server)? Owner-checked: a factory that never had it just hears "not ours". */
function mayOwn(f: Factory, r: ledger.Record): boolean {
  return f.kind.shared === r.shared && keyOf(f.store, r);
}

/** Could a guard's factory (kept), of this sweep or an earlier one, have taken r? */
function keptOne(r: ledger.Record): boolean {
  for (const [s] of lua_pairs(kept)) {
    if (keyOf(s, r)) return true;
  }
  return false;
}

/** The leases (and waiters' tickets) of dead workers recorded in the dicts of these factories, given back. */
function sweep(this: void, premature: boolean, factories: Factory[]): void {
  if (premature) return;
  const byDict = new LuaTable<NgxSharedDict, Factory[]>();
  for (const [_, f] of lua_ipairs(factories)) {
    let list = byDict.get(f.store.dict);
    if (list === undefined) {
      list = [];
      byDict.set(f.store.dict, list);
    }
    list.push(f);
  }
  for (const [dict, list] of lua_pairs(byDict)) {
    const [records, exits] = ledger.records(dict, EXITED);
    const deadPids = new LuaTable<number, boolean>();
    const recorded = new LuaTable<number, boolean>();
    // Per factory (that is, per Redis and script), the leases to release and the tickets to drop.
    const leases = new LuaTable<Factory, Item[]>();
    const tickets = new LuaTable<Factory, Item[]>();
    for (const [_, r] of lua_ipairs(records)) {
      let isDead = deadPids.get(r.pid);
      if (isDead === undefined) {
        // Gone after a graceful exit (its mark): what it left, it left on purpose.
        isDead = r.pid !== worker_pid() && dict.get(EXITED + lua_tostring(r.pid))[0] === undefined && dead(r.pid);
        deadPids.set(r.pid, isDead);
      }
      recorded.set(r.pid, true);
      // A lease a guard's factory may have taken is left to its ttl, whatever else shares its keys.
      if (isDead && (r.waiting || !keptOne(r))) {
        for (const [_, f] of lua_ipairs(list)) {
          if (mayOwn(f, r)) {
            if (!r.waiting) add(leases, f, r);
            else if (f.kind.drop !== undefined) add(tickets, f, r);
          }
        }
      }
    }
    for (const [_, k] of lua_ipairs(exits)) {
      const pid = lua_tonumber(str_sub(k, EXITED.length + 1));
      if (pid !== undefined && !recorded.has(pid) && pid !== worker_pid() && dead(pid)) dict.delete(k);
    }
    for (const [f, items] of lua_pairs(leases)) later(dict, f, f.kind.release, giveBack(dict, f, f.kind.release, items, true));
    for (const [f, items] of lua_pairs(tickets)) later(dict, f, f.kind.drop!, giveBack(dict, f, f.kind.drop!, items, true));
  }
}

/**
 * Look for leases of dead workers, once per worker and factory: from
 * init_worker, and at an acquire after a factory was made. Cheap when there
 * is nothing new. Returns an error when the timer cannot be started.
 */
export function start(): string | undefined {
  // The exit watch: from init_worker only, in the worker's own VM (a request's
  // VM under lua_code_cache off must end with its last timer).
  if (!watching && ngx_get_phase() === "init_worker") watching = timer_every(WATCH, exiting)[0] === true;
  if (pending.length === 0) return undefined;
  // No timers before the workers exist (ngx.timer.at raises "no request"
  // there): the factories stay pending, for each worker to sweep once it runs.
  if (ngx_get_phase() === "init") {
    return "dlock: init_worker is not available in the init phase (no timers): call it from init_worker_by_lua";
  }
  const batch = pending;
  pending = [];
  // A pid of ours that an exited worker had before (pids come round again): our crash is a crash.
  const mine = EXITED + lua_tostring(worker_pid());
  for (const [_, f] of lua_ipairs(batch)) f.store.dict.delete(mine);
  const [called, ok, err] = lua_pcall(timer_at, 0, sweep, batch);
  if (!called || !ok) {
    pending = batch;
    // pcall failed: its error is in ok's place; timer_at failed: in err's.
    let why: unknown = err;
    if (!called) why = ok;
    return "dlock: cannot start the recovery sweep: " + lua_tostring(why);
  }
  return undefined;
}
