// One Redis server (standalone, unix socket, or the master Sentinel names):
// a call rides the server's auto-pipeline (pipeline.ts), a batch is one
// round trip (roundtrip.ts, targets.ts). The Cluster and Redlock backends talk to each of
// their servers the same way.

import type { Backend, Refusal } from "./backend";
import type * as redis from "./client";
import * as pipeline from "./pipeline";
import * as perTarget from "./targets";

function trusted(this: void, ttl: number): number {
  return ttl;
}

/** The fence counter next to the lock key, where earlier versions kept it: fences never go back. */
function fenceKey(this: void, rkey: string): string {
  return rkey + ":fence";
}

function nothingShared(this: void): LuaMultiReturn<[undefined, undefined]> {
  return $multi(undefined, undefined);
}

function nothingMore(this: void): undefined {
  return undefined;
}

function itself(this: void, conf: redis.RedisConf): redis.RedisConf[] {
  return [conf];
}

export const backend: Backend = {
  call: pipeline.call,
  post: pipeline.post,
  batch: perTarget.many,
  validity: trusted,
  queues: true,
  confirmsOwner: true,
  refuses: new LuaTable<Refusal, string>(),
  fenceKey,
  shared: nothingShared,
  describe: nothingMore,
  servers: itself,
};
