// A module of a TypeScriptToLua project that installed the lua-resty-dlock npm
// package: spec/packaging_spec.lua compiles it against the packed declarations
// and runs the Lua in nginx.
import * as dlock from "resty.dlock";
import * as semaphore from "resty.dlock.semaphore";
import type * as gateway from "resty.dlock.gateway";

/** Take key, find a second acquire refused, release: "<version> busy true true 2". */
export function run(this: void, port: number, key: string): string {
  const [locks, err] = dlock.new({ dict: "dlock", redis: { host: "127.0.0.1", port } });
  if (locks === undefined) return "new failed: " + err;
  const [lease, aerr] = locks.acquire(key, { ttl: 5000, wait: 0 });
  if (lease === undefined) return "acquire failed: " + aerr;
  const [, busy] = locks.acquire(key);
  const valid = lease.valid();
  const [released, rerr] = lease.release();
  ngx.log(ngx.INFO, "example: released ", key);
  const [sem] = semaphore.new({ dict: "dlock", permits: 2, redis: { port } });
  return dlock._VERSION + " " + busy + " " + tostring(valid) + " " + tostring(released ?? rerr) + " " + sem?.permits;
}

// Guard options as nginx.conf's init_by_lua writes them.
export const orders: gateway.Options = {
  name: "orders", mode: "dedup", key: "$http_idempotency_key", hold: 2000, on_error: "allow",
};
