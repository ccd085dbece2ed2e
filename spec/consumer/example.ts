// A module of a TypeScriptToLua project that installed the lua-resty-dlock npm
// package: spec/packaging_spec.lua compiles it against the packed declarations
// and runs the Lua in nginx.
import * as dlock from "resty.dlock";
import * as semaphore from "resty.dlock.semaphore";
import * as rate from "resty.dlock.rate";
import type * as gateway from "resty.dlock.gateway";

/** Take key, find a second acquire refused, release, then one request of 10 a minute: "<version> busy true true 2 0 9". */
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
  const [lim, lerr] = rate.new({ dict: "dlock", name: "consumer", rate: 10, period: 60000, redis: { port } });
  if (lim === undefined) return "rate.new failed: " + lerr;
  const [delay, remaining] = lim.incoming(key, true);
  return dlock._VERSION + " " + busy + " " + tostring(valid) + " " + tostring(released ?? rerr) + " " + sem?.permits +
    " " + tostring(delay) + " " + tostring(remaining);
}

// Guard options as nginx.conf's init_by_lua writes them.
export const orders: gateway.Options = {
  name: "orders", mode: "dedup", key: "$http_idempotency_key", hold: 2000, on_error: "allow",
};
export const api: gateway.Options = {
  name: "api", mode: "rate", key: "$http_x_api_key", limits: [{ rate: 10, period: 1000 }, { rate: 1000, period: 3600000 }],
  on_error: "local", fleet: 4,
};
