// The node the wake-up subscriber (subscriber.ts) connects to. Under Cluster
// and Redlock any node will do, and none is always up: it moves on to the
// next when one cannot be reached, rather than leave the waiters polling.

import type * as redis from "./client";
import type * as subs from "../core/subscriptions";
import * as connection from "./connection";
import * as derived from "./derived";
import * as map from "./slotmap";

const connect_to = connection.connect;
const apart = derived.apart;
const cluster_state = map.state;
const nodeAt = map.nodeAt;

/**
 * Where the subscription may go: the endpoint; under Cluster any node (a
 * PUBLISH reaches them all), the masters of the slot map, then the seeds;
 * under Redlock any of its masters (a release publishes on each).
 */
function places(conf: redis.RedisConf): redis.RedisConf[] {
  if (conf.nodes === undefined) return [conf];
  const out: redis.RedisConf[] = [];
  if (conf.topology === "cluster") {
    const c = cluster_state(conf);
    for (const i of $range(1, c.masters.length)) out.push(nodeAt(conf, c, c.masters[i - 1]!));
  }
  for (const i of $range(1, conf.nodes.length)) out.push(conf.nodes[i - 1]!);
  return out;
}

/** A connection to the first place that takes one, starting at the one that served last (s.node). */
export function connect(s: subs.Subscriber): LuaMultiReturn<[RestyRedis | undefined, string | undefined]> {
  const list = places(s.conf);
  let start = 1;
  for (const i of $range(1, list.length)) {
    if (list[i - 1]!.endpoint === s.node) start = i;
  }
  const tried = new LuaTable<string, boolean>();
  let err: string | undefined;
  for (const k of $range(0, list.length - 1)) {
    const n = list[(start - 1 + k) % list.length]!;
    if (!tried.has(n.endpoint)) {
      tried.set(n.endpoint, true);
      const [red, cerr] = connect_to(apart(n, "wakeups"));
      if (red !== undefined) {
        s.node = n.endpoint;
        return $multi(red, undefined);
      }
      err = cerr;
    }
  }
  return $multi(undefined, err);
}

