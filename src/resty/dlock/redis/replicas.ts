// redis.replicas: one WAIT after the writes of a batch (roundtrip.ts), and
// what a write is when fewer replicas than asked have it: given back by its
// caller (fault "replicas"). Replication is asynchronous: a lock on a master
// that fails over before a replica has it is lost, and a second holder gets in.

import type * as redis from "./client";
import type * as command from "./command";
import type * as scripts from "./scripts";
import * as connection from "./connection";
import * as dictcount from "../core/dictcount";

const lua_tostring = tostring;
const lua_type = type;
const str_format = string.format;
const done = connection.done;

/** Dict key counting writes that fewer replicas than asked acknowledged in time. */
export const SHORTFALLS = "c:redis:replica_shortfalls";

/**
 * WAIT for conf.replicas replicas to acknowledge this connection's writes: nil
 * when enough did; else the error (the connection is handed back, or closed).
 */
export function waited(red: RestyRedis, conf: redis.RedisConf, s: scripts.Script): string | undefined {
  connection.readLonger(red, conf, conf.replicas_timeout);
  const [n, err] = red.wait(conf.replicas, conf.replicas_timeout);
  done(red, conf, n !== undefined);
  if (lua_type(n) === "number" && (n as number) >= conf.replicas) {
    return undefined;
  }
  if (conf.dict !== undefined) {
    dictcount.count(conf.dict, SHORTFALLS, 1);
  }
  if (lua_type(n) === "number") {
    return str_format("dlock: redis %s: only %d of %d replica(s) acknowledged the %s within %d ms",
      conf.endpoint, n, conf.replicas, s.name, conf.replicas_timeout);
  }
  return "dlock: redis " + conf.endpoint + ": WAIT for replicas after the " + s.name + " failed: " + lua_tostring(err);
}

/** Writes that may not be on enough replicas: their callers give them back. */
export function unconfirmed(wrote: command.Job[], err: string): void {
  for (const i of $range(1, wrote.length)) {
    const j = wrote[i - 1]!;
    j.res = undefined;
    j.err = err;
    j.fault = "replicas";
  }
}
