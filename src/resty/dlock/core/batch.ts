// Many leases in one round trip per Redis endpoint: how a busy gateway's
// queued releases keep up, and how the watchdog and the gateway renew
// the leases they keep alive.

import * as backend from "../redis/backend";
import type * as lease from "./lease";
import type * as scripts from "../redis/scripts";
import * as settle from "./settle";

type Lease = lease.Lease;

const extendScript = settle.extendScript;
const lua_pairs = pairs;
const lua_ipairs = ipairs;
const lua_next = next;
const lua_pcall = pcall;
const lua_error = error;
const lua_tostring = tostring;
const ngx_log = ngx.log;
const ERR = ngx.ERR;
/** A renewal's result while its answer is not read. */
const RAISED = "dlock: the renewal raised before its answer was read";
const thread_spawn = ngx.thread.spawn;
const thread_wait = ngx.thread.wait;

/**
 * Leases of the list grouped for pipelining: one group per Redis endpoint and
 * script (locks and permits run different scripts), each with the indexes of
 * its leases in the list.
 */
function byEndpoint(list: Lease[], script: (this: void, l: Lease, at: number) => scripts.Script, at: number): LuaTable<string, number[]> {
  const groups = new LuaTable<string, number[]>();
  for (const i of $range(1, list.length)) {
    const l = list[i - 1]!;
    if (!l._released) {
      const g = l._store.redis.pool + " " + script(l, at).sha;
      let idx = groups.get(g);
      if (idx === undefined) {
        idx = [];
        groups.set(g, idx);
      }
      idx.push(i);
    }
  }
  return groups;
}

/** The leases of list by Redis endpoint, in their order; nil when all are of one (the usual case: no table made). */
export function perEndpoint(list: Lease[]): LuaTable<string, Lease[]> | undefined {
  const pool = list[0]!._store.redis.pool;
  let one = true;
  for (const [_, l] of lua_ipairs(list)) {
    if (l._store.redis.pool !== pool) one = false;
  }
  if (one) return undefined;
  const groups = new LuaTable<string, Lease[]>();
  for (const [_, l] of lua_ipairs(list)) {
    const p = l._store.redis.pool;
    let g = groups.get(p);
    if (g === undefined) {
      g = [];
      groups.set(p, g);
    }
    g.push(l);
  }
  return groups;
}

function releaseScript(this: void, l: Lease): scripts.Script {
  return l._kind.release;
}

/** The owner-checked targets (Redis key, token) of the leases of `list` at `idx`. */
function targetsOf(list: Lease[], idx: number[]): backend.Target[] {
  const targets: backend.Target[] = [];
  for (const j of $range(1, idx.length)) {
    const l = list[idx[j - 1]! - 1]!;
    targets[j - 1] = { rkey: l._rkey, token: l.token };
  }
  return targets;
}

/**
 * Release many leases in one round trip per Redis endpoint (a pipeline of the
 * owner-checked release script): how queued releases of a busy gateway keep
 * up. A release Redis did not confirm leaves its lease to a background sweep
 * that retries it until Redis answers or the key expires; the lease ends when
 * the sweep gets an answer. Returns how many were not confirmed now, and the
 * last error. `untimed`: the keys of a set never taken whole, given back (no
 * hold-time samples: nobody held a lease).
 */
/** What a release of several endpoints' groups comes to. */
interface Tally {
  failed: number;
  lastErr: string | undefined;
}

/** One endpoint's group of releaseAll. */
function releaseGroup(this: void, list: Lease[], idx: number[], untimed: boolean, t: Tally): void {
  const first = list[idx[0]! - 1]!;
  const out = backend.batch(first._store.redis, first._kind.release, targetsOf(list, idx));
  for (const j of $range(1, idx.length)) {
    const l = list[idx[j - 1]! - 1]!;
    const reply = out.replies.get(j);
    if (reply === undefined) {
      settle.unconfirmed(l, out.faults.get(j), true);
      t.failed++;
      t.lastErr = out.errors.get(j);
      settle.orphan(l);
    } else {
      settle.released(l, reply, untimed);
    }
  }
}

/** One endpoint's group of extendAll. */
function extendGroup(this: void, list: Lease[], idx: number[], results: (true | string)[], sent: number): void {
  // Until its answer is read: a raise below must not leave "not_owner" (lost) where nothing was learnt.
  for (const j of $range(1, idx.length)) results[idx[j - 1]! - 1] = RAISED;
  const ms: number[] = [];
  for (const j of $range(1, idx.length)) {
    // At an extend()'s ttl while one is on its way: whichever reaches Redis last, the key gets it.
    const l = list[idx[j - 1]! - 1]!;
    ms[j - 1] = l._extendingMs ?? l.ttl;
  }
  const first = list[idx[0]! - 1]!;
  // The group's script, as byEndpoint chose it at `sent`.
  const out = backend.batch(first._store.redis, extendScript(first, sent), targetsOf(list, idx), ms);
  for (const j of $range(1, idx.length)) {
    const i = idx[j - 1]!;
    const l = list[i - 1]!;
    const reply = out.replies.get(j);
    if (reply === undefined) {
      settle.unconfirmed(l, out.faults.get(j), false);
      results[i - 1] = out.errors.get(j)!;
    } else {
      // At the ttl sent.
      const [ok, err] = settle.extended(l, reply, ms[j - 1]!, sent);
      results[i - 1] = ok || err!;
    }
  }
}

type Group<A, B, C> = (this: void, list: Lease[], idx: number[], a: A, b: B) => C;

/**
 * Run `run` for each endpoint's group; with several, each group after the first
 * in a light thread of its own, all at once: a Redis that does not answer (paused,
 * failing over) holds up none of the others' renewals for its timeout.
 */
function eachGroup<A, B>(groups: LuaTable<string, number[]>, list: Lease[], run: Group<A, B, void>, a: A, b: B): void {
  const [k1, first] = lua_next(groups);
  if (k1 === undefined) return;
  if (lua_next(groups, k1)[0] === undefined) {
    run(list, first, a, b);
    return;
  }
  const threads: NgxThread[] = [];
  for (const [k, idx] of lua_pairs(groups)) {
    if (k !== k1) {
      const [ok, co] = lua_pcall(thread_spawn, run, list, idx, a, b);
      // No light threads here (a phase without them): in turn, then.
      if (!ok) run(list, idx, a, b);
      else threads.push(co as NgxThread);
    }
  }
  run(list, first, a, b);
  for (const i of $range(1, threads.length)) {
    const [ok, err] = thread_wait(threads[i - 1]!);
    if (!ok) ngx_log(ERR, "dlock: a batch of one Redis endpoint raised: ", lua_tostring(err));
  }
}

export function releaseAll(list: Lease[], untimed = false): LuaMultiReturn<[number, string | undefined]> {
  const t: Tally = { failed: 0, lastErr: undefined };
  eachGroup(byEndpoint(list, releaseScript, 0), list, releaseGroup, untimed, t);
  return $multi(t.failed, t.lastErr);
}

/**
 * Extend many leases, each to its own ttl, in one round trip per Redis
 * endpoint: how a gateway renews the leases of its in-flight requests. Results
 * are aligned with the list: true, "not_owner" (the lease ran out; it is over,
 * as after extend()), or an error message ("dlock: redis ...").
 */
export function extendAll(list: Lease[]): (true | string)[] {
  const results: (true | string)[] = [];
  for (const i of $range(1, list.length)) {
    results[i - 1] = "not_owner";
    // An extend() of one waits for this renewal (lease.ts _renewing).
    list[i - 1]!._renewing = true;
  }
  // Fresh: whether a Redlock lease is still valid picks its script (settle.extendScript).
  const sent = settle.nowMs();
  const [ok, err] = lua_pcall(eachGroup, byEndpoint(list, extendScript, sent), list, extendGroup, results, sent);
  for (const i of $range(1, list.length)) list[i - 1]!._renewing = undefined;
  if (!ok) lua_error(err, 0);
  return results;
}
