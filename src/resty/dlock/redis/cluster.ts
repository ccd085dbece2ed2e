// Redis Cluster: each key goes to the master of its slot, from a per-worker
// slot map (CLUSTER SLOTS). MOVED (the slot lives elsewhere now) patches the
// map, retries there and has the whole map read again on the next call; ASK
// (the slot is being migrated and this key is already on the target) retries
// on the target with ASKING, leaving the map alone. Both are bounded by
// redis.cluster.max_redirects. Connection errors and CLUSTERDOWN (a master
// died, its replica not promoted yet) have the map read again too, at most
// every REFRESH_GAP seconds, so a failover is followed without a reload.

import type { CallResult, Fault, Outcome, Target } from "./backend";
import * as redis from "./client";
import * as scripts from "./scripts";
import * as single from "./single";

const bit = require("bit") as BitModule;
const band = bit.band;
const bxor = bit.bxor;
const lshift = bit.lshift;
const rshift = bit.rshift;
const byte = string.byte;
const hashed = scripts.hashed;
const find = string.find;

const SLOTS = 16384;
/** Shared dict keys (all workers): redirects followed, when a worker last read the slot map. */
export const REDIRECTS = "c:redis:redirects:";
export const MAP_AT = "t:redis:slot_map:";
/** Seconds between two reads of the slot map prompted by errors. */
const REFRESH_GAP = 0.1;
/** Seconds between tries of a script Redis answered TRYAGAIN (its slot is migrating). */
const TRYAGAIN_PAUSE = 0.02;

// CRC16-CCITT (XMODEM): what Redis Cluster hashes keys with. Table-driven.
const CRC = new LuaTable<number, number>();
for (const i of $range(0, 255)) {
  let c = lshift(i, 8);
  for (const _ of $range(1, 8)) {
    c = band(c, 0x8000) !== 0 ? band(bxor(lshift(c, 1), 0x1021), 0xffff) : band(lshift(c, 1), 0xffff);
  }
  CRC.set(i, c);
}

/** The cluster slot of a key, as Redis computes it (CLUSTER KEYSLOT). */
export function slot(key: string): number {
  const h = hashed(key);
  let crc = 0;
  for (const i of $range(1, h.length)) {
    crc = bxor(band(lshift(crc, 8), 0xffff), CRC.get(bxor(rshift(crc, 8), byte(h, i))));
  }
  return band(crc, SLOTS - 1);
}

interface Cluster {
  /** slot → the master serving it (a standalone configuration of that node). */
  slots: LuaTable<number, redis.RedisConf>;
  /** "host:port" → its configuration, so each node keeps one set of pools. */
  nodes: LuaTable<string, redis.RedisConf>;
  /** The masters of the last map read, for status pages. */
  masters: string[];
  /** When the map was last read (ngx.now()); 0: never. */
  at: number;
  /** Read the map again before the next call. */
  stale: boolean;
  /** When a read of the map was last tried. */
  tried: number;
  refreshing: boolean;
  redirects: number;
  refreshes: number;
  lastError: string | undefined;
}

/** Per worker, per cluster configuration (by pool name). */
const clusters = new LuaTable<string, Cluster>();

function state(conf: redis.RedisConf): Cluster {
  let c = clusters.get(conf.pool);
  if (c === undefined) {
    c = {
      slots: new LuaTable(), nodes: new LuaTable(), masters: [], at: 0, stale: true, tried: 0,
      refreshing: false, redirects: 0, refreshes: 0, lastError: undefined,
    };
    clusters.set(conf.pool, c);
  }
  return c;
}

function nodeOf(conf: redis.RedisConf, c: Cluster, host: string, port: number): redis.RedisConf {
  const name = host + ":" + port;
  let n = c.nodes.get(name);
  if (n === undefined) {
    n = redis.node(conf, host, port);
    c.nodes.set(name, n);
  }
  return n;
}

/** CLUSTER SLOTS from one node: the map, or an error. */
function readMap(conf: redis.RedisConf, c: Cluster, from: redis.RedisConf): string | undefined {
  const [red, cerr] = redis.connect(from);
  if (red === undefined) return cerr;
  const [ranges, err] = red.cluster("slots");
  redis.done(red, from, ranges !== undefined);
  if (type(ranges) !== "table") {
    return "dlock: redis " + from.endpoint + ": CLUSTER SLOTS failed: " + tostring(err);
  }
  const slots = new LuaTable<number, redis.RedisConf>();
  const masters: string[] = [];
  const seen = new LuaTable<string, boolean>();
  for (const r of ranges as unknown as LuaTable<number, unknown>[]) {
    const first = r.get(1) as number;
    const last = r.get(2) as number;
    const m = r.get(3) as LuaTable<number, unknown>;
    let host = tostring(m.get(1));
    // A node that does not know its own address says "": it is the one we asked.
    if (host === "" || host === "?") host = from.host;
    const n = nodeOf(conf, c, host, m.get(2) as number);
    for (const s of $range(first, last)) {
      slots.set(s, n);
    }
    if (!seen.has(n.endpoint)) {
      seen.set(n.endpoint, true);
      masters.push(n.endpoint);
    }
  }
  c.slots = slots;
  c.masters = masters;
  c.at = ngx.now();
  c.stale = false;
  c.refreshes = c.refreshes + 1;
  if (conf.dict !== undefined) conf.dict.set(MAP_AT + conf.endpoint, c.at);
  return undefined;
}

/**
 * Read the slot map again: from the masters known, then the seed nodes. One
 * coroutine per worker at a time; the others go on with the map they have
 * (a MOVED puts any of them right).
 */
function refresh(conf: redis.RedisConf, c: Cluster): string | undefined {
  if (c.refreshing) return undefined;
  c.refreshing = true;
  c.tried = ngx.now();
  const errors: string[] = [];
  const asked = new LuaTable<string, boolean>();
  const candidates: redis.RedisConf[] = [];
  for (const ep of c.masters) {
    const n = c.nodes.get(ep);
    if (n !== undefined) candidates.push(n);
  }
  for (const n of conf.nodes!) candidates.push(n);
  let err: string | undefined = "no node to ask";
  for (const n of candidates) {
    if (!asked.has(n.endpoint)) {
      asked.set(n.endpoint, true);
      err = readMap(conf, c, n);
      if (err === undefined) break;
      errors.push(err);
    }
  }
  c.refreshing = false;
  if (err !== undefined) {
    c.lastError = table.concat(errors, "; ");
    return "dlock: redis " + conf.endpoint + ": no node gave the slot map (" + c.lastError + ")";
  }
  return undefined;
}

/** The master of a slot, reading the map first when it is due. */
function route(conf: redis.RedisConf, c: Cluster, s: number): LuaMultiReturn<[redis.RedisConf | undefined, string | undefined]> {
  if (c.stale && (c.at === 0 || ngx.now() - c.tried >= REFRESH_GAP)) {
    const err = refresh(conf, c);
    if (err !== undefined && c.at === 0) return $multi(undefined, err);
  }
  // A slot no master serves (the map is being read, or the cluster lost it):
  // a seed will answer MOVED or CLUSTERDOWN.
  return $multi(c.slots.get(s) ?? conf.nodes![0]!, undefined);
}

/**
 * Might this failure mean the map is wrong (a dead master, a lost slot)? Any
 * fault may: reading the map again costs one round trip per REFRESH_GAP.
 */
function suspicious(fault: Fault | undefined): boolean {
  return fault !== undefined && fault !== "replicas";
}

/** Did the node answer (an error reply such as "ERR ..." or "WRONGTYPE ..."), rather than not being reached? */
function replied(node: redis.RedisConf, err: string | undefined): boolean {
  const [code] = string.match(tostring(err), "^dlock: redis " + string.gsub(node.endpoint, "%p", "%%%0")[0] + ": (%u%u+) ");
  return code !== undefined && code !== "TLS";
}

/** args (the keys after the first, then the arguments) without the one at position `at`. */
function withoutKey(args: (string | number)[], at: number): (string | number)[] {
  const out: (string | number)[] = [];
  for (const i of $range(1, args.length)) {
    if (i !== at) out.push(args[i - 1]!);
  }
  return out;
}

/** Run s for rkey on the master of its slot, following MOVED and ASK. */
export function call(conf: redis.RedisConf, s: scripts.Script, rkey: string, ...args: (string | number)[]): CallResult {
  const c = state(conf);
  const sl = slot(rkey);
  const [first, rerr] = route(conf, c, sl);
  if (first === undefined) return $multi(undefined, rerr, "failed");
  let node = first;
  let asking = false;
  let script = s;
  let rest = args;
  for (const i of $range(0, conf.max_redirects)) {
    const [res, err, fault] = single.exec(node, asking, script, rkey, ...rest);
    const tryagain = fault === "transient" && find(tostring(err), ": TRYAGAIN", 1, true) !== undefined;
    if (tryagain && script.alone !== undefined) {
      // The slot migrates and the lock key and its waiters' queue are not on
      // one node: the lock key alone (its queue, the last key, waits till after).
      rest = withoutKey(rest, script.keys - 1);
      script = script.alone;
    } else if (tryagain && i < conf.max_redirects) {
      // A multi-key script (the fenced acquire) while its slot migrates: the
      // keys are split between the nodes for a moment. Ask the same node again.
      ngx.sleep(TRYAGAIN_PAUSE);
    } else if (fault !== "redirect") {
      if (suspicious(fault)) c.stale = true;
      if (fault === "failed" && !replied(node, err)) {
        // The master could not be reached: most likely dead and about to be
        // replaced by its replica. Nothing was sent; a waiting acquire tries again.
        return $multi(res, err, "transient");
      }
      return $multi(res, err, fault);
    } else {
      const [kind, , host, port] = string.match(tostring(err), "(%u+) (%d+) (%S+):(%d+)$");
      if (kind === undefined) {
        return $multi(undefined, err, "failed");
      }
      c.redirects = c.redirects + 1;
      if (conf.dict !== undefined) conf.dict.incr(REDIRECTS + conf.endpoint, 1, 0);
      node = nodeOf(conf, c, host!, tonumber(port)!);
      asking = kind === "ASK";
      if (!asking) {
        c.slots.set(sl, node);
        c.stale = true;
      }
    }
  }
  // A slot on the move (ASK, TRYAGAIN, MOVED in turn) is "not now": a waiting acquire tries again.
  return $multi(undefined, string.format("dlock: redis %s: key %s redirected more than %d times (redis.cluster.max_redirects)",
    conf.endpoint, rkey, conf.max_redirects), "transient");
}

/**
 * One pipeline per master for the targets whose slots it serves; a target
 * sent elsewhere (MOVED, ASK) is retried alone through call().
 */
export function batch(conf: redis.RedisConf, s: scripts.Script, targets: Target[], ms?: number[]): Outcome {
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
      g.idx.push(i);
    }
  }
  for (const ep of order) {
    const g = groups.get(ep);
    const sub: Target[] = [];
    let subMs: number[] | undefined;
    if (ms !== undefined) subMs = [];
    for (const i of g.idx) {
      sub.push(targets[i - 1]!);
      if (subMs !== undefined) subMs.push(ms![i - 1]!);
    }
    const o = single.batch(g.node, s, sub, subMs);
    for (const j of $range(1, g.idx.length)) {
      const i = g.idx[j - 1]!;
      const fault = o.faults.get(j);
      if (fault === "redirect") {
        const t = targets[i - 1]!;
        let m: number | undefined;
        if (subMs !== undefined) m = subMs[j - 1];
        const [res, err, f] = scripts.forTarget(call, conf, s, t.rkey, t.token, m);
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

/** For status pages: the masters, the map's age, redirects followed (this worker). */
export function describe(conf: redis.RedisConf): LuaTable<string, unknown> {
  const c = state(conf);
  const t = new LuaTable<string, unknown>();
  t.set("masters", c.masters);
  t.set("slot_map_age", c.at > 0 ? math.floor((ngx.now() - c.at) * 1000) / 1000 : undefined);
  t.set("slot_map_reads", c.refreshes);
  t.set("redirects", c.redirects);
  t.set("last_error", c.lastError);
  return t;
}
