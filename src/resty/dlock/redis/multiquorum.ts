// acquire_all under redis.redlock: the set's script (multiscripts.ts, keys
// alone: Redlock locks do not queue) runs on every master at once, each master
// taking every key or none, and the outcome is the majority's, as quorum.ts
// decides a single key's: taken when a majority took the whole set within the
// validity time (ttl minus the time it took minus the drift allowance), else
// given back, owner-checked, on every master that took it. Sound for the
// reason a single key is: whoever takes one of the keys after us needs it on
// a majority, and any majority meets ours on a master where the key is ours
// until it expires. Goes through backend.call and backend.batch on each
// master's own (standalone) configuration, nothing else of the transport.

import * as backend from "./backend";
import type * as redis from "./client";
import * as scripts from "./scripts";
// Each master is one server: its calls ride its own pipeline, as any single server's do.
import * as single from "./single";
import * as clock from "../core/clock";

type CallResult = backend.CallResult;
type Fault = backend.Fault;

const clock_now = clock.now;
const ngx_update_time = ngx.update_time;
const thread_spawn = ngx.thread.spawn;
const thread_wait = ngx.thread.wait;
const math_floor = math.floor;
const str_format = string.format;
const table_sort = table.sort;
const table_concat = table.concat;
const lua_type = type;
const lua_tostring = tostring;
const lua_unpack = unpack as (this: void, t: (string | number)[]) => LuaMultiReturn<(string | number)[]>;

function nowMs(): number {
  ngx_update_time();
  return clock_now() * 1000;
}

function callOn(this: void, node: redis.RedisConf, s: scripts.Script, rkey: string, args: (string | number)[]): CallResult {
  return single.backend.call(node, s, rkey, ...lua_unpack(args));
}

/**
 * Run the set's acquire script s (rkey its first key, args the rest) on every
 * master of conf and decide: "OK" when a majority took every key in time;
 * { i, pttl } (busy: the first busy key's index as the masters said, and when
 * enough holders expire that the masters that answered could make a majority)
 * when a master that answered refused and no majority took the set; else an
 * error: "lost" when a master that did not answer, or could not give the keys
 * back, may hold them (the caller has them cleaned up everywhere), "transient"
 * otherwise. A busy answer says "lost" as its fault for the same reasons.
 */
export function call(conf: redis.RedisConf, s: scripts.Script, rkey: string, args: (string | number)[], rkeys: string[],
  tok: string, ttl: number): CallResult {
  const nodes = conf.nodes!;
  const n = nodes.length;
  const need = math_floor(n / 2) + 1;
  const started = nowMs();
  const threads = new LuaTable<number, NgxThread>();
  for (const j of $range(2, n)) threads.set(j, thread_spawn(callOn, nodes[j - 1]!, s, rkey, args));
  const replies = new LuaTable<number, RedisValue>();
  const faults = new LuaTable<number, Fault>();
  const errors: string[] = [];
  for (const j of $range(1, n)) {
    let r: RedisValue | undefined;
    let e: string | undefined;
    let f: Fault | undefined;
    if (j === 1) {
      [r, e, f] = callOn(nodes[0]!, s, rkey, args);
    } else {
      const [ok, r2, e2, f2] = thread_wait(threads.get(j));
      if (ok) {
        [r, e, f] = [r2 as RedisValue | undefined, e2 as string | undefined, f2 as Fault | undefined];
      } else {
        [r, e, f] = [undefined, "dlock: redis " + nodes[j - 1]!.endpoint + ": " + lua_tostring(r2), "failed"];
      }
    }
    if (r !== undefined) replies.set(j, r);
    else {
      faults.set(j, f ?? "failed");
      errors.push(e ?? "dlock: redis " + nodes[j - 1]!.endpoint + ": no reply");
    }
  }
  let took = 0;
  for (const j of $range(1, n)) if (replies.get(j) === "OK") took++;
  const elapsed = nowMs() - started;
  const drift = ttl - backend.validity(conf, ttl);
  if (took >= need && elapsed + drift < ttl) return $multi("OK", undefined, undefined);

  // Not ours: give back what masters took, owner-checked.
  let undone = true;
  let unknown = false;
  const targets: backend.Target[] = [];
  for (const i of $range(1, rkeys.length)) targets[i - 1] = { rkey: rkeys[i - 1]!, token: tok };
  for (const j of $range(1, n)) {
    if (replies.get(j) === "OK") {
      const out = single.backend.batch(nodes[j - 1]!, scripts.RELEASE, targets);
      for (const i of $range(1, targets.length)) if (out.replies.get(i) === undefined) undone = false;
    } else if (faults.get(j) === "lost") {
      unknown = true;
    }
  }
  const pttls: number[] = [];
  let first: number | undefined;
  for (const j of $range(1, n)) {
    const r = replies.get(j);
    if (lua_type(r) === "table") {
      const t = r as LuaTable<number, number>;
      if (first === undefined) first = t.get(1);
      pttls.push(t.get(2));
    }
  }
  const errs = errors.length > 0 ? " (" + table_concat(errors, "; ") + ")" : "";
  if (pttls.length > 0 && took < need) {
    // Someone else holds a key of the set where masters answered, and no
    // majority said yes: busy, whatever the silent masters did (keys one of
    // them took for us are a minority's, never a lease; fault "lost": the
    // caller has them cleaned up). Told "lost", a waiting acquire_all ended at
    // once while one master was paused.
    table_sort(pttls);
    let expire = need - took;
    if (expire > pttls.length) expire = pttls.length;
    const busy = new LuaTable<number, number>();
    busy.set(1, first!);
    busy.set(2, pttls[expire - 1]!);
    return $multi(busy as unknown as RedisValue, undefined, !undone || unknown ? "lost" : undefined);
  }
  if (!undone || unknown) {
    return $multi(undefined, str_format("dlock: redis %s: took the keys on %d of %d masters, and some may still hold them%s",
      conf.endpoint, took, n, errs), "lost");
  }
  if (took >= need) {
    return $multi(undefined, str_format("dlock: redis %s: took the keys on a majority, but only after %d ms of a %d ms ttl",
      conf.endpoint, elapsed, ttl), "transient");
  }
  return $multi(undefined, str_format("dlock: redis %s: took the keys on %d of %d masters, a majority is %d%s",
    conf.endpoint, took, n, need, errs), "transient");
}
