// resty.dlock.status: what this nginx instance holds and what its guards and factories did.
//
//   location = /dlock/status  { content_by_lua_block { require("resty.dlock.status").serve() } }
//   location = /dlock/metrics { content_by_lua_block { require("resty.dlock.status").metrics() } }
//
// serve() answers JSON (GET /dlock/status?limit=N lists up to N leases, at most MAX_LIMIT):
//   { "held": [ {dict, key, pid, ttl, expires_at} ],   up to `limit` leases, never tokens
//     "held_listed": 3, "held_limit": 100, "held_truncated": false,
//     "held_total": 3,                                    every lease held now (counted, not listed)
//     "dicts": { "dlock": { "unrecorded_leases": 0 } },
//     "redis": { "127.0.0.1:6379": { "checked": true, "maxmemory_policy": "allkeys-lru", "maxmemory": 10485760,
//                                    "policy_evicts": true, "can_evict_locks": true, "checked_at": 1764000000.5,
//                                    "advice": "..." } },
//     "guards": { "<name>": { mode, breaker, in_flight, <events> } },
//     "factories": { "<name>": { held, acquired, busy, timeout, error, lost } } }
// metrics() answers the same counters, the histograms of acquire wait and lease
// hold time too, in the Prometheus text format (status/exposition.ts).
// Both read the shared dicts of the guards and factories (and any dict named in `dicts`).

import * as version from "./version";
export const _VERSION = version.VERSION;
import * as json from "./status/json";
import * as exposition from "./status/exposition";
export const DEFAULT_LIMIT = json.DEFAULT_LIMIT;
export const MAX_LIMIT = json.MAX_LIMIT;
export const report = json.report;
export const serve = json.serve;
export const metrics_text = exposition.metrics_text;
export const metrics = exposition.metrics;
