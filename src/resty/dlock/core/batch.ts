// Many leases in one round trip per Redis endpoint: how a busy gateway's
// queued releases keep up, and how the watchdog and the gateway renew
// the leases they keep alive.

import * as backend from "../redis/backend";
import type * as lease from "./lease";
import type * as scripts from "../redis/scripts";
import * as settle from "./settle";
import * as clock from "./clock";

type Lease = lease.Lease;

const clock_now = clock.now;
const lua_pairs = pairs;

/**
 * Leases of the list grouped for pipelining: one group per Redis endpoint and
 * script (locks and permits run different scripts), each with the indexes of
 * its leases in the list.
 */
function byEndpoint(list: Lease[], script: (this: void, l: Lease) => scripts.Script): LuaTable<string, number[]> {
  const groups = new LuaTable<string, number[]>();
  for (const i of $range(1, list.length)) {
    const l = list[i - 1]!;
    if (!l._released) {
      const g = l._store.redis.pool + " " + script(l).sha;
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

function releaseScript(this: void, l: Lease): scripts.Script {
  return l._kind.release;
}

function extendScript(this: void, l: Lease): scripts.Script {
  return l._kind.extend;
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
 * last error.
 */
export function releaseAll(list: Lease[]): LuaMultiReturn<[number, string | undefined]> {
  let failed = 0;
  let lastErr: string | undefined;
  for (const [_, idx] of lua_pairs(byEndpoint(list, releaseScript))) {
    const first = list[idx[0]! - 1]!;
    const out = backend.batch(first._store.redis, first._kind.release, targetsOf(list, idx));
    for (const j of $range(1, idx.length)) {
      const l = list[idx[j - 1]! - 1]!;
      const reply = out.replies.get(j);
      if (reply === undefined) {
        settle.unconfirmed(l, out.faults.get(j), true);
        failed++;
        lastErr = out.errors.get(j);
        settle.orphan(l);
      } else {
        settle.released(l, reply);
      }
    }
  }
  return $multi(failed, lastErr);
}

/**
 * Extend many leases, each to its own ttl, in one round trip per Redis
 * endpoint: how a gateway renews the leases of its in-flight requests. Results
 * are aligned with the list: true, "not_owner" (the lease ran out; it is over,
 * as after extend()), or an error message ("dlock: redis ...").
 */
export function extendAll(list: Lease[]): (true | string)[] {
  const results: (true | string)[] = [];
  for (const i of $range(1, list.length)) results[i - 1] = "not_owner";
  const sent = clock_now() * 1000;
  for (const [_, idx] of lua_pairs(byEndpoint(list, extendScript))) {
    const ms: number[] = [];
    for (const j of $range(1, idx.length)) ms[j - 1] = list[idx[j - 1]! - 1]!.ttl;
    const first = list[idx[0]! - 1]!;
    const out = backend.batch(first._store.redis, first._kind.extend, targetsOf(list, idx), ms);
    for (const j of $range(1, idx.length)) {
      const i = idx[j - 1]!;
      const l = list[i - 1]!;
      const reply = out.replies.get(j);
      if (reply === undefined) {
        settle.unconfirmed(l, out.faults.get(j), false);
        results[i - 1] = out.errors.get(j)!;
      } else {
        const [ok, err] = settle.extended(l, reply, l.ttl, sent);
        results[i - 1] = ok || err!;
      }
    }
  }
  return results;
}
