// The slot map of a Redis Cluster, per worker: which master serves each of
// the 16384 slots (CLUSTER SLOTS), read from the masters known, then the seed
// nodes; a key's slot (CRC16 of its hash tag). cluster.ts routes by it, and
// patches it on MOVED. Each master is one configuration (its pools and its
// auto-pipeline) for as long as the worker lives.

import type * as redis from "./client";
import * as derived from "./derived";
import * as connection from "./connection";
import * as hints from "./hints";
import * as scripts from "./scripts";
import * as schema from "../core/schema";
import * as clock from "../core/clock";
import * as question from "../core/question";

const bitop = require("bit") as BitModule;
const band = bitop.band;
const bxor = bitop.bxor;
const lshift = bitop.lshift;
const rshift = bitop.rshift;
const byte = string.byte;
const hashed = scripts.hashed;
const clock_now = clock.now;
const underway = question.underway;
const lua_type = type;
const lua_tostring = tostring;
const ngx_null = ngx.null;
const tbl_concat = table.concat;
const connect = connection.connect;
const done = connection.done;
const nodeConf = derived.node;
const literal = schema.literal;

const SLOTS = 16384;
/** Shared dict keys (all workers): redirects followed, when a worker last read the slot map. */
export const REDIRECTS = "c:redis:redirects:";
export const MAP_AT = "t:redis:slot_map:";
/** Seconds between two reads of the slot map prompted by errors. */
const REFRESH_GAP = 0.1;

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

export interface Cluster {
  /** slot → the master serving it ("host:port"). */
  slots: LuaTable<number, string>;
  /** "host:port" → where it is. */
  addrs: LuaTable<string, Addr>;
  /** The masters of the last map read, for status pages. */
  masters: string[];
  /** When the map was last read (clock_now()); 0: never. */
  at: number;
  /** Read the map again before the next call. */
  stale: boolean;
  /** When a read of the map was last tried. */
  tried: number;
  /** The read of the map on its way, if any (core/question.ts). */
  refreshing: question.Question | undefined;
  redirects: number;
  refreshes: number;
  lastError: string | undefined;
}

interface Addr {
  readonly host: string;
  readonly port: number;
}

/** Per worker, per cluster (by pool name): one map, whichever factory read it. */
const clusters = new LuaTable<string, Cluster>();

export function state(conf: redis.RedisConf): Cluster {
  let c = clusters.get(conf.pool);
  if (c === undefined) {
    c = {
      slots: new LuaTable(), addrs: new LuaTable(), masters: [], at: 0, stale: true, tried: 0,
      refreshing: undefined, redirects: 0, refreshes: 0, lastError: undefined,
    };
    clusters.set(conf.pool, c);
  }
  return c;
}

/**
 * Per configuration (a factory's), its own configuration of each master:
 * with the factory's timeouts and replicas, and an auto-pipeline of its own,
 * as a single server's configuration has. Weak keys: a factory dropped takes
 * them along.
 */
const views = setmetatable(new LuaTable<redis.RedisConf, LuaTable<string, redis.RedisConf>>(), { __mode: "k" });

/** conf's configuration of the master at endpoint ep ("host:port", an address the map holds). */
function nodeAt(conf: redis.RedisConf, c: Cluster, ep: string): redis.RedisConf {
  let view = views.get(conf);
  if (view === undefined) {
    view = new LuaTable();
    views.set(conf, view);
  }
  let n = view.get(ep);
  if (n === undefined) {
    const a = c.addrs.get(ep);
    n = nodeConf(conf, a.host, a.port, hints.BY_CLUSTER);
    view.set(ep, n);
  }
  return n;
}

/** conf's configuration of the master at host:port (an IPv6 address bare, as CLUSTER SLOTS and MOVED give it, or in brackets). */
function nodeOf(conf: redis.RedisConf, c: Cluster, bare: string, port: number): redis.RedisConf {
  const host = literal(bare);
  const ep = host + ":" + lua_tostring(port);
  if (!c.addrs.has(ep)) c.addrs.set(ep, { host, port });
  return nodeAt(conf, c, ep);
}

/** CLUSTER SLOTS from one node: the map, or an error. */
function readMap(conf: redis.RedisConf, c: Cluster, from: redis.RedisConf): string | undefined {
  const [red, cerr] = connect(from);
  if (red === undefined) return cerr;
  const [ranges, err] = red.cluster("slots");
  done(red, from, ranges !== undefined);
  if (lua_type(ranges) !== "table") {
    return "dlock: redis " + from.endpoint + ": CLUSTER SLOTS failed: " + lua_tostring(err);
  }
  const slots = new LuaTable<number, string>();
  const masters: string[] = [];
  const seen = new LuaTable<string, boolean>();
  const list = ranges as unknown as LuaTable<number, unknown>[];
  for (const i of $range(1, list.length)) {
    const r = list[i - 1]!;
    const first = r.get(1) as number;
    const last = r.get(2) as number;
    const m = r.get(3) as LuaTable<number, unknown>;
    const named = m.get(1);
    let host = named === ngx_null ? "" : lua_tostring(named);
    // A node that does not know its own address says "" (or, with
    // cluster-preferred-endpoint-type unknown-endpoint, null): it is the one we asked.
    if (host === "" || host === "?") host = from.host;
    const n = nodeOf(conf, c, host, m.get(2) as number);
    for (const s of $range(first, last)) {
      slots.set(s, n.endpoint);
    }
    if (!seen.has(n.endpoint)) {
      seen.set(n.endpoint, true);
      masters.push(n.endpoint);
    }
  }
  c.slots = slots;
  c.masters = masters;
  c.at = clock_now();
  c.stale = false;
  c.refreshes = c.refreshes + 1;
  if (conf.dict !== undefined) conf.dict.safe_set(MAP_AT + conf.endpoint, c.at);
  return undefined;
}

/** Read the slot map again: from the masters known, then the seed nodes. nil, or why no node gave it. */
function readAny(this: void, conf: redis.RedisConf, c: Cluster): LuaMultiReturn<[true | undefined, string | undefined]> {
  const errors: string[] = [];
  const asked = new LuaTable<string, boolean>();
  const candidates: redis.RedisConf[] = [];
  for (const i of $range(1, c.masters.length)) {
    candidates.push(nodeAt(conf, c, c.masters[i - 1]!));
  }
  const seeds = conf.nodes!;
  for (const i of $range(1, seeds.length)) candidates.push(seeds[i - 1]!);
  for (const i of $range(1, candidates.length)) {
    const n = candidates[i - 1]!;
    if (!asked.has(n.endpoint)) {
      asked.set(n.endpoint, true);
      const err = readMap(conf, c, n);
      if (err === undefined) return $multi(true, undefined);
      errors.push(err);
    }
  }
  if (errors.length === 0) errors.push("no node to ask");
  c.lastError = tbl_concat(errors, "; ");
  return $multi(undefined, "dlock: redis " + conf.endpoint + ": no node gave the slot map (" + c.lastError + ")");
}

/** The question's timer reads the map with these. */
function readFor(this: void, r: { readonly conf: redis.RedisConf; readonly c: Cluster }): LuaMultiReturn<[true | undefined, string | undefined]> {
  return readAny(r.conf, r.c);
}

/**
 * Read the slot map again, once per worker at a time: in a timer
 * (core/question.ts), so that a caller that goes away in the middle does not
 * leave the map unread for good. The caller that starts the read, and any
 * caller with no map yet, waits for it; the others go on with the map they
 * have (a MOVED puts any of them right).
 */
function refresh(conf: redis.RedisConf, c: Cluster): string | undefined {
  let q = c.refreshing;
  if (underway(q)) {
    if (c.at !== 0) return undefined;
  } else {
    c.tried = clock_now();
    // Each node: a connect, a handshake, AUTH and CLUSTER SLOTS; and a second to start.
    const longest = (c.masters.length + conf.nodes!.length) * (conf.connect_timeout + 3 * conf.read_timeout) / 1000 + 1;
    q = question.start(longest, readFor as question.Asker, { conf, c });
    if (q === undefined) {
      const [_read, inPlace] = readAny(conf, c);
      return inPlace;
    }
    c.refreshing = q;
  }
  const [_read, err] = question.answer(q!, "redis " + conf.endpoint + ": reading the slot map");
  return err;
}

/** The master of slot s by the map as it is, without reading it again: nil while it is stale or no master serves s. */
export function known(conf: redis.RedisConf, c: Cluster, s: number): redis.RedisConf | undefined {
  if (c.stale) return undefined;
  const ep = c.slots.get(s);
  return ep !== undefined ? nodeAt(conf, c, ep) : undefined;
}

/** The master of a slot, reading the map first when it is due. */
export function route(conf: redis.RedisConf, c: Cluster, s: number): LuaMultiReturn<[redis.RedisConf | undefined, string | undefined]> {
  if (c.stale && (c.at === 0 || clock_now() - c.tried >= REFRESH_GAP)) {
    const err = refresh(conf, c);
    if (err !== undefined && c.at === 0) return $multi(undefined, err);
  }
  // A slot no master serves (the map is being read, or the cluster lost it):
  // a seed will answer MOVED or CLUSTERDOWN.
  const ep = c.slots.get(s);
  return $multi(ep !== undefined ? nodeAt(conf, c, ep) : conf.nodes![0]!, undefined);
}

// Exported by name: this module's own uses of them are locals, not lookups in its exports table.
export { nodeAt, nodeOf };
