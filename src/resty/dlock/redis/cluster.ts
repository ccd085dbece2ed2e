// Redis Cluster: each key goes to the master of its slot (slotmap.ts), on
// that master's auto-pipeline: concurrent calls of a worker to one master
// share round trips, as on a single server. MOVED (the slot lives elsewhere
// now) patches the map, retries there and has the whole map read again on
// the next call; ASK (the slot is being migrated and this key is already on
// the target) retries on the target with ASKING, leaving the map alone. Both
// are bounded by redis.cluster.max_redirects. Connection errors and
// CLUSTERDOWN (a master died, its replica not promoted yet) have the map read
// again too, at most every REFRESH_GAP seconds, so a failover is followed
// without a reload.

import type { Backend, CallResult, Fault, Job, Outcome, Refusal, Target } from "./backend";
import type * as redis from "./client";
import * as argList from "./args";
import * as map from "./slotmap";
import * as pipeline from "./pipeline";
import * as roundtrip from "./roundtrip";
import * as perTarget from "./targets";
import * as scripts from "./scripts";
import * as clock from "../core/clock";
import * as dictcount from "../core/dictcount";

const pipelined = pipeline.call;
const posted = pipeline.post;
const alone = roundtrip.one;
const migrating = roundtrip.migrating;
const many = perTarget.many;
const forTarget = scripts.forTarget;
const tagged = scripts.tagged;
const state = map.state;
const route = map.route;
const slot = map.slot;
const nodeOf = map.nodeOf;
const nodeAt = map.nodeAt;
const known = map.known;
const clock_now = clock.now;
const clock_sleep = clock.sleep;
const lua_tostring = tostring;
const lua_type = type;
const lua_tonumber = tonumber;
const lua_unpack = unpack;
const lua_select = select;
const forward = argList.forward;
const listOf = argList.listOf;
const withoutKeys = argList.withoutKeys;
type Arg = argList.Arg;
const str_match = string.match;
const str_gsub = string.gsub;
const str_format = string.format;
const math_floor = math.floor;

/** Seconds between tries of a script Redis answered TRYAGAIN (its slot is migrating). */
const TRYAGAIN_PAUSE = 0.02;

/**
 * Might this failure mean the map is wrong (a dead master, a lost slot)? Any
 * fault may: reading the map again costs one round trip per REFRESH_GAP.
 */
function suspicious(fault: Fault | undefined): boolean {
  return fault !== undefined && fault !== "replicas";
}

/** Did the node answer (an error reply such as "ERR ..." or "WRONGTYPE ..."), rather than not being reached? */
function replied(node: redis.RedisConf, err: string | undefined): boolean {
  const [code] = str_match(lua_tostring(err), "^dlock: redis " + str_gsub(node.endpoint, "%p", "%%%0")[0] + ": (%u%u+) ");
  return code !== undefined && code !== "TLS";
}

/** After a call that failed: follow MOVED and ASK, wait out TRYAGAIN, and say what a failure means. */
function follow(conf: redis.RedisConf, c: map.Cluster, sl: number, first: redis.RedisConf, s: scripts.Script, rkey: string,
  args: (string | number)[], res0: RedisValue | undefined, err0: string | undefined, fault0: Fault): CallResult {
  let node = first;
  let asking = false;
  let script = s;
  let rest = args;
  let res = res0;
  let err = err0;
  let fault: Fault | undefined = fault0;
  for (const i of $range(0, conf.max_redirects)) {
    if (i > 0) {
      if (asking) {
        [res, err, fault] = alone(node, true, script, rkey, ...lua_unpack(rest));
      } else {
        [res, err, fault] = pipelined(node, script, rkey, ...lua_unpack(rest));
      }
    }
    const tryagain = migrating(fault, err);
    if (tryagain && script.alone !== undefined) {
      // The slot migrates and the lock key and its waiters' queue are not on one
      // node: the form without the queues (the last keys; they wait till after).
      rest = withoutKeys(rest, script.alone.keys, script.keys - 1);
      script = script.alone;
    } else if (tryagain && i < conf.max_redirects) {
      // A multi-key script (the fenced acquire) while its slot migrates: the
      // keys are split between the nodes for a moment. Ask the same node again.
      clock_sleep(TRYAGAIN_PAUSE);
    } else if (fault !== "redirect") {
      if (suspicious(fault)) c.stale = true;
      if (fault === "failed" && !replied(node, err)) {
        // The master could not be reached: most likely dead and about to be
        // replaced by its replica. Nothing was sent; a waiting acquire tries again.
        return $multi(res, err, "transient");
      }
      return $multi(res, err, fault);
    } else {
      const [kind, _slot, host, port] = str_match(lua_tostring(err), "(%u+) (%d+) (%S*):(%d+)$");
      if (kind === undefined) {
        return $multi(undefined, err, "failed");
      }
      c.redirects = c.redirects + 1;
      if (conf.dict !== undefined) dictcount.count(conf.dict, map.REDIRECTS + conf.endpoint, 1);
      // No host (cluster-preferred-endpoint-type unknown-endpoint): the one that answered.
      node = nodeOf(conf, c, host === "" ? node.host : host!, lua_tonumber(port)!);
      asking = kind === "ASK";
      if (!asking) {
        c.slots.set(sl, node.endpoint);
        c.stale = true;
      }
    }
  }
  // A slot on the move (ASK, TRYAGAIN, MOVED in turn) is "not now": a waiting acquire tries again.
  return $multi(undefined, str_format("dlock: redis %s: key %s redirected more than %d times (redis.cluster.max_redirects)",
    conf.endpoint, rkey, conf.max_redirects), "transient");
}

/**
 * Run s for rkey on the master of its slot; what went wrong is looked at in
 * follow(). Its arguments come as locals, read by call() before slot()'s loop:
 * the trace LuaJIT starts where that loop exits comes back here, and would
 * compile no `...` (args.ts). More than six come as a list.
 */
function routed(conf: redis.RedisConf, s: scripts.Script, rkey: string, list: (string | number)[] | undefined, n: number,
  a1?: Arg, a2?: Arg, a3?: Arg, a4?: Arg, a5?: Arg, a6?: Arg): CallResult {
  const c = state(conf);
  const sl = slot(rkey);
  const [node, rerr] = route(conf, c, sl);
  if (node === undefined) return $multi(undefined, rerr, "failed");
  let res: RedisValue | undefined;
  let err: string | undefined;
  let fault: Fault | undefined;
  if (list === undefined) [res, err, fault] = forward(pipelined, node, s, rkey, n, a1, a2, a3, a4, a5, a6);
  else [res, err, fault] = pipelined(node, s, rkey, ...lua_unpack(list));
  if (fault === undefined) return $multi(res, err, fault);
  return follow(conf, c, sl, node, s, rkey, list ?? listOf(n, a1, a2, a3, a4, a5, a6), res, err, fault);
}

function call(this: void, conf: redis.RedisConf, s: scripts.Script, rkey: string, ...args: (string | number)[]): CallResult {
  const n = lua_select("#", ...args);
  if (n > 6) return routed(conf, s, rkey, [...args], n);
  const [a1, a2, a3, a4, a5, a6] = lua_select(1, ...args);
  return routed(conf, s, rkey, undefined, n, a1, a2, a3, a4, a5, a6);
}

/** Put s for rkey into the next pipeline to its slot's master (pipeline.post); nil while the slot map is being read. */
function postRouted(conf: redis.RedisConf, s: scripts.Script, rkey: string, list: (string | number)[] | undefined, n: number,
  a1?: Arg, a2?: Arg, a3?: Arg, a4?: Arg, a5?: Arg, a6?: Arg): Job | undefined {
  const node = known(conf, state(conf), slot(rkey));
  if (node === undefined) return undefined;
  if (list !== undefined) return posted(node, s, rkey, ...lua_unpack(list));
  return forward(posted, node, s, rkey, n, a1, a2, a3, a4, a5, a6);
}

function post(this: void, conf: redis.RedisConf, s: scripts.Script, rkey: string, ...args: (string | number)[]): Job | undefined {
  const n = lua_select("#", ...args);
  if (n > 6) return postRouted(conf, s, rkey, [...args], n);
  const [a1, a2, a3, a4, a5, a6] = lua_select(1, ...args);
  return postRouted(conf, s, rkey, undefined, n, a1, a2, a3, a4, a5, a6);
}

/**
 * One pipeline per master for the targets whose slots it serves; a target
 * sent elsewhere (MOVED, ASK) or answered TRYAGAIN is retried alone through call().
 */
function batch(this: void, conf: redis.RedisConf, s: scripts.Script, targets: Target[], ms?: number[]): Outcome {
  const out: Outcome = { replies: new LuaTable(), errors: new LuaTable(), faults: new LuaTable() };
  const c = state(conf);
  const groups = new LuaTable<string, { node: redis.RedisConf; idx: number[] }>();
  const order: string[] = [];
  for (const i of $range(1, targets.length)) {
    const [node, rerr] = route(conf, c, slot(targets[i - 1]!.rkey));
    if (node === undefined) {
      out.errors.set(i, rerr!);
      out.faults.set(i, "failed");
    } else {
      let g = groups.get(node.endpoint);
      if (g === undefined) {
        g = { node, idx: [] };
        groups.set(node.endpoint, g);
        order.push(node.endpoint);
      }
      g.idx[g.idx.length] = i;
    }
  }
  for (const k of $range(1, order.length)) {
    const g = groups.get(order[k - 1]!);
    const sub: Target[] = [];
    let subMs: number[] | undefined;
    if (ms !== undefined) subMs = [];
    for (const j of $range(1, g.idx.length)) {
      const i = g.idx[j - 1]!;
      sub.push(targets[i - 1]!);
      if (subMs !== undefined) subMs.push(ms![i - 1]!);
    }
    const o = many(g.node, s, sub, subMs);
    for (const j of $range(1, g.idx.length)) {
      const i = g.idx[j - 1]!;
      const fault = o.faults.get(j);
      // A slot migrating answers TRYAGAIN to a script whose keys it holds in
      // part: call() tries the form without the queue, as for a redirect.
      if (fault === "redirect" || migrating(fault, o.errors.get(j))) {
        const t = targets[i - 1]!;
        let m: number | undefined;
        if (subMs !== undefined) m = subMs[j - 1];
        const [res, err, f] = forTarget(call, conf, s, t.rkey, t.token, m);
        if (res !== undefined) out.replies.set(i, res);
        else {
          out.errors.set(i, err!);
          out.faults.set(i, f!);
        }
      } else if (fault !== undefined) {
        if (suspicious(fault)) c.stale = true;
        out.errors.set(i, o.errors.get(j));
        out.faults.set(i, fault);
      } else {
        out.replies.set(i, o.replies.get(j));
      }
    }
  }
  return out;
}

function trusted(this: void, ttl: number): number {
  return ttl;
}

/**
 * The acquire script touches the lock key and its fence counter, so they
 * must share a slot: a hash tag of the whole lock key, unless it has one
 * already (then the suffix keeps it).
 */
function fenceKey(this: void, rkey: string): string {
  return tagged(rkey) ? rkey + ":fence" : "{" + rkey + "}:fence";
}

/** Redirects followed and the age of the newest slot map read, over every worker. */
function shared(this: void, conf: redis.RedisConf, d: NgxSharedDict): LuaMultiReturn<[string, LuaTable<string, number>]> {
  const t = new LuaTable<string, number>();
  const [n] = d.get(map.REDIRECTS + conf.endpoint);
  t.set("redirects", lua_type(n) === "number" ? n as number : 0);
  const [at] = d.get(map.MAP_AT + conf.endpoint);
  if (lua_type(at) === "number") t.set("slot_map_age", clock_now() - (at as number));
  return $multi("cluster", t);
}

/** For status pages: the masters, the map's age, redirects followed (this worker). */
function describe(this: void, conf: redis.RedisConf): LuaTable<string, unknown> {
  const c = state(conf);
  const t = new LuaTable<string, unknown>();
  t.set("masters", c.masters);
  t.set("slot_map_age", c.at > 0 ? math_floor((clock_now() - c.at) * 1000) / 1000 : undefined);
  t.set("slot_map_reads", c.refreshes);
  t.set("redirects", c.redirects);
  t.set("last_error", c.lastError);
  return t;
}

/** The masters of the last map read. */
function servers(this: void, conf: redis.RedisConf): redis.RedisConf[] {
  const c = state(conf);
  const out: redis.RedisConf[] = [];
  for (const i of $range(1, c.masters.length)) out.push(nodeAt(conf, c, c.masters[i - 1]!));
  return out;
}

export const backend: Backend = {
  call, post, batch, validity: trusted, queues: true, confirmsOwner: true, refuses: new LuaTable<Refusal, string>(), fenceKey, shared, describe, servers,
};
