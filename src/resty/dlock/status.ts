// resty.dlock.status: what this nginx instance holds and what its guards did.
//
//   location = /dlock/status  { content_by_lua_block { require("resty.dlock.status").serve() } }
//   location = /dlock/metrics { content_by_lua_block { require("resty.dlock.status").metrics() } }
//
// serve() answers JSON (GET /dlock/status?limit=N lists up to N leases, at most MAX_LIMIT):
//   { "held": [ {dict, key, pid, ttl, expires_at} ],   up to `limit` leases, never tokens
//     "held_listed": 3, "held_limit": 100, "held_truncated": false,
//     "dicts": { "dlock": { "unrecorded_leases": 0 } },
//     "redis": { "127.0.0.1:6379": { "checked": true, "maxmemory_policy": "allkeys-lru", "maxmemory": 10485760,
//                                    "policy_evicts": true, "can_evict_locks": true, "checked_at": 1764000000.5,
//                                    "advice": "..." } },
//     "guards": { "<name>": { mode, breaker, in_flight, <events> } } }
// metrics() answers the counters in the Prometheus text format. A scrape reads a
// fixed number of dict keys per guard, dict and Redis endpoint: it never walks the
// held leases, which a busy gateway has tens of thousands of.
// Both read the shared dicts of the guards (and any dict named in `dicts`).

import * as check from "./check";
import * as eviction from "./eviction";
import * as gateway from "./gateway";
import * as ledger from "./ledger";
import * as backend from "./backend";
import * as redis from "./redis";
import * as sentinel from "./sentinel";
import * as stats from "./stats";

export { VERSION as _VERSION } from "./version";

/** Leases serve() and report() list unless asked for another number. */
export const DEFAULT_LIMIT = 100;
/** The most a request may ask for: listing walks the dict, a bound keeps the page cheap. */
export const MAX_LIMIT = 10000;

const cjson = require("cjson.safe") as CjsonSafeModule;

const REPORT_OPTIONS = check.set("dicts", "limit");
const METRICS_OPTIONS = check.set("dicts");
const ADVICE = "set maxmemory-policy noeviction, or give locks a Redis of their own";

/** Dict names to report: those of the guards, plus o.dicts (default { "dlock" } when there are no guards). */
function dictNames(o: LuaTable<string, unknown>): LuaMultiReturn<[string[] | undefined, string | undefined]> {
  const names: string[] = [];
  const seen = new LuaSet<string>();
  const add = (n: string): void => {
    if (!seen.has(n)) {
      seen.add(n);
      names.push(n);
    }
  };
  const extra = o.get("dicts");
  if (extra !== undefined) {
    if (type(extra) !== "table") return check.fail("dicts must be a list of lua_shared_dict names", extra);
    for (const n of extra as unknown[]) {
      if (type(n) !== "string" || ngx.shared.get(n as string) === undefined) {
        return check.fail("dicts must name lua_shared_dicts", n);
      }
      add(n as string);
    }
  }
  for (const g of gateway.guards()) {
    for (const [name, d] of pairs(ngx.shared)) {
      if (d === g.dict) add(name);
    }
  }
  if (names.length === 0 && ngx.shared.get("dlock") !== undefined) add("dlock");
  return $multi(names, undefined);
}

function checkLimit(v: unknown): LuaMultiReturn<[number | undefined, string | undefined]> {
  return check.integer("limit", v, 0, MAX_LIMIT, "an integer from 0 to " + MAX_LIMIT);
}

interface HeldView {
  dict: string;
  key: string;
  pid: number;
  ttl: number;
  expires_at: number;
}

interface Report {
  dicts: string[];
  /** At most `held_limit` leases. */
  held: HeldView[];
  held_listed: number;
  held_limit: number;
  /** More leases are held than listed (or may be: the search stopped before the end of a dict). */
  held_truncated: boolean;
  /** Per dict: leases this nginx could not record (the dict was full). */
  unrecorded: LuaTable<string, number>;
  /** Per dict: writes fewer replicas than redis.replicas acknowledged in time. */
  shortfalls: LuaTable<string, number>;
  /** Per Redis endpoint: can it evict lock keys. */
  redis: LuaTable<string, LuaTable<string, unknown>>;
  /** Per Redis endpoint: how it is reached (kind, TLS, replicas, the Sentinel master). */
  topology: LuaTable<string, LuaTable<string, unknown>>;
  guards: LuaTable<string, LuaTable<string, unknown>>;
}

/** Append at most `max` leases of one dict to `out` (tokens left out); true when it holds more. */
function listHeld(name: string, dict: NgxSharedDict, max: number, out: HeldView[]): boolean {
  if (max === 0) {
    // Nothing to list, but say whether anything is held.
    const [one] = ledger.list(dict, 1);
    return one.length > 0;
  }
  const [found, more] = ledger.list(dict, max);
  for (const l of found) {
    out.push({ dict: name, key: l.key, pid: l.pid, ttl: l.ttl, expires_at: l.expires_at });
  }
  return more;
}

function evictionView(e: eviction.Eviction): LuaTable<string, unknown> {
  const v = new LuaTable<string, unknown>();
  v.set("checked", e.checked);
  v.set("checked_at", e.checkedAt);
  if (!e.checked) {
    v.set("reason", e.why);
    return v;
  }
  v.set("maxmemory_policy", e.policy);
  v.set("maxmemory", e.maxmemory);
  v.set("policy_evicts", e.policyEvicts);
  v.set("can_evict_locks", e.canEvict);
  if (e.policyEvicts) v.set("advice", ADVICE);
  return v;
}

/** What serve() and metrics() both show: guards, unrecorded leases per dict, Redis eviction. No held leases. */
function counters(names: string[]): Report {
  const dicts: NgxSharedDict[] = [];
  const unrecorded = new LuaTable<string, number>();
  const shortfalls = new LuaTable<string, number>();
  for (const name of names) {
    const d = ngx.shared.get(name)!;
    dicts.push(d);
    unrecorded.set(name, ledger.unrecorded(d));
    const [n] = d.get(backend.SHORTFALLS);
    shortfalls.set(name, type(n) === "number" ? (n as number) : 0);
  }
  const ev = new LuaTable<string, LuaTable<string, unknown>>();
  for (const [ep, e] of eviction.evictions(dicts)) {
    ev.set(ep, evictionView(e));
  }
  // How each endpoint is reached: this worker's view (a Sentinel master is this worker's latest answer).
  const topology = new LuaTable<string, LuaTable<string, unknown>>();
  for (const [ep, conf] of redis.endpoints()) {
    const v = new LuaTable<string, unknown>();
    topology.set(ep, v);
    v.set("kind", conf.topology);
    v.set("tls", conf.ssl);
    v.set("tls_verify", conf.ssl_verify);
    v.set("replicas", conf.replicas);
    if (conf.sentinel !== undefined) {
      const m = sentinel.last(conf.pool);
      v.set("master", m === undefined ? "unknown" : m.host + ":" + m.port);
    }
    const more = backend.describe(conf);
    if (more !== undefined) {
      for (const [k, x] of more) v.set(k, x);
    }
    const [kind, counts] = backend.shared(conf);
    if (kind === "cluster") {
      // All workers' redirects, not only this one's.
      v.set("redirects", counts.get("redirects"));
    }
  }
  const guards = new LuaTable<string, LuaTable<string, unknown>>();
  for (const g of gateway.guards()) {
    const row = new LuaTable<string, unknown>();
    row.set("mode", g.mode);
    row.set("breaker", stats.breakerState(g.dict, g.name));
    row.set("in_flight", stats.gauge(g.dict, g.name, "in_flight"));
    for (const e of stats.EVENTS) {
      row.set(e, stats.count(g.dict, g.name, e));
    }
    guards.set(g.name, row);
  }
  return {
    dicts: names, held: [], held_listed: 0, held_limit: 0, held_truncated: false,
    unrecorded, shortfalls, redis: ev, topology, guards,
  };
}

/**
 * The numbers serve() shows, with at most opts.limit (default 100) held leases.
 * Tokens are left out: they are capabilities.
 */
export function report(opts?: unknown): LuaMultiReturn<[Report | undefined, string | undefined]> {
  const [o, oerr] = check.options("status options", opts, REPORT_OPTIONS);
  if (o === undefined) return $multi(undefined, oerr);
  let limit = DEFAULT_LIMIT;
  if (o.get("limit") !== undefined) {
    const [n, err] = checkLimit(o.get("limit"));
    if (n === undefined) return $multi(undefined, err);
    limit = n;
  }
  const [names, err] = dictNames(o);
  if (names === undefined) return $multi(undefined, err);
  const r = counters(names);
  let truncated = false;
  for (const name of names) {
    if (listHeld(name, ngx.shared.get(name)!, limit - r.held.length, r.held)) {
      truncated = true;
    }
  }
  r.held_listed = r.held.length;
  r.held_limit = limit;
  r.held_truncated = truncated;
  return $multi(r, undefined);
}

/** One "name":value member of a JSON object (names are ours: plain identifiers). */
function member(name: string, value: unknown): string | undefined {
  const [v] = cjson.encode(value);
  if (v === undefined) return undefined;
  return "\"" + name + "\":" + v;
}

/** The report as a JSON object, its members in a fixed order. */
function encode(r: Report): LuaMultiReturn<[string | undefined, string | undefined]> {
  const dicts = new LuaTable<string, LuaTable<string, number>>();
  for (const name of r.dicts) {
    const d = new LuaTable<string, number>();
    d.set("unrecorded_leases", r.unrecorded.get(name));
    d.set("replica_shortfalls", r.shortfalls.get(name));
    dicts.set(name, d);
  }
  // Written by hand when empty: Debian's lua-cjson has no empty_array, and an
  // empty table would become {} (or the member would be dropped). "held" is always a list.
  const parts: string[] = [r.held.length > 0 ? member("held", r.held) ?? "" : "\"held\":[]"];
  const rest: [string, unknown][] = [
    ["held_listed", r.held_listed],
    ["held_limit", r.held_limit],
    ["held_truncated", r.held_truncated],
    ["dicts", dicts],
    ["redis", r.redis],
    ["topology", r.topology],
    ["guards", r.guards],
  ];
  for (const [name, value] of rest) {
    parts.push(member(name, value) ?? "");
  }
  for (const p of parts) {
    if (p === "") return $multi(undefined, "dlock: status: cannot encode the report as JSON");
  }
  return $multi("{" + table.concat(parts, ",") + "}", undefined);
}

function fail(status: number, err: string): void {
  ngx.status = status;
  ngx.header.set("Content-Type", "application/json");
  ngx.say(cjson.encode({ error: err })[0] ?? "{}");
}

/** content_by_lua: the report as JSON; ?limit=N lists up to N held leases (instead of opts.limit or 100). */
export function serve(opts?: unknown): void {
  let o = opts;
  const arg = ngx.var.get("arg_limit");
  if (arg !== undefined) {
    const [n, lerr] = checkLimit(tonumber(arg) ?? arg);
    if (n === undefined) {
      fail(400, lerr!);
      return;
    }
    if (opts === undefined || type(opts) === "table") {
      // A copy: opts is the caller's table, shared by every request.
      const copy = new LuaTable<AnyNotNil, unknown>();
      if (opts !== undefined) {
        for (const [k, v] of pairs(opts as LuaTable<AnyNotNil, unknown>)) copy.set(k, v);
      }
      copy.set("limit", n);
      o = copy;
    }
  }
  const [r, err] = report(o);
  if (r === undefined) {
    fail(500, err!);
    return;
  }
  const [body, jerr] = encode(r);
  if (body === undefined) {
    fail(500, jerr!);
    return;
  }
  ngx.header.set("Content-Type", "application/json");
  ngx.say(body);
}

function label(s: string): string {
  const [escaped] = string.gsub(s, "[\\\"\n]", (c: string) => (c === "\n" ? "\\n" : "\\" + c));
  return escaped;
}

/**
 * The metrics in the Prometheus text format (version 0.0.4), or nil and an error.
 * Reads a fixed number of dict keys per guard, dict and Redis endpoint; never the leases.
 */
export function metrics_text(opts?: unknown): LuaMultiReturn<[string | undefined, string | undefined]> {
  const [o, oerr] = check.options("metrics options", opts, METRICS_OPTIONS);
  if (o === undefined) return $multi(undefined, oerr);
  const [names, err] = dictNames(o);
  if (names === undefined) return $multi(undefined, err);
  const r = counters(names);
  const lines: string[] = [
    "# HELP dlock_guard_events_total Gateway guard outcomes since this nginx started.",
    "# TYPE dlock_guard_events_total counter",
  ];
  const breakers: string[] = [
    "# HELP dlock_guard_breaker_open 1 while the guard's Redis circuit breaker is open.",
    "# TYPE dlock_guard_breaker_open gauge",
  ];
  const inFlight: string[] = [
    "# HELP dlock_guard_in_flight Requests the guard let through that have not ended yet.",
    "# TYPE dlock_guard_in_flight gauge",
  ];
  for (const [gname, row] of r.guards) {
    const name = label(gname);
    for (const ev of stats.EVENTS) {
      lines.push("dlock_guard_events_total{guard=\"" + name + "\",mode=\"" + row.get("mode") + "\",event=\"" + ev + "\"} " +
        row.get(ev));
    }
    breakers.push("dlock_guard_breaker_open{guard=\"" + name + "\"} " + (row.get("breaker") === "open" ? 1 : 0));
    inFlight.push("dlock_guard_in_flight{guard=\"" + name + "\"} " + row.get("in_flight"));
  }
  for (const l of breakers) lines.push(l);
  for (const l of inFlight) lines.push(l);
  lines.push("# HELP dlock_unrecorded_leases_total Leases this nginx could not record in the shared dict (it was full).");
  lines.push("# TYPE dlock_unrecorded_leases_total counter");
  for (const name of r.dicts) {
    lines.push("dlock_unrecorded_leases_total{dict=\"" + label(name) + "\"} " + r.unrecorded.get(name));
  }
  lines.push("# HELP dlock_replica_shortfalls_total Writes that fewer replicas than redis.replicas acknowledged in time.");
  lines.push("# TYPE dlock_replica_shortfalls_total counter");
  for (const name of r.dicts) {
    lines.push("dlock_replica_shortfalls_total{dict=\"" + label(name) + "\"} " + r.shortfalls.get(name));
  }
  lines.push("# HELP dlock_redis_can_evict_locks 1 when the Redis has maxmemory set and a policy that evicts keys " +
    "with a ttl (lock keys); endpoints whose settings could not be read are left out.");
  lines.push("# TYPE dlock_redis_can_evict_locks gauge");
  for (const [ep, v] of r.redis) {
    if (v.get("checked") === true) {
      lines.push("dlock_redis_can_evict_locks{endpoint=\"" + label(ep) + "\",policy=\"" + label(v.get("maxmemory_policy") as string) +
        "\"} " + (v.get("can_evict_locks") === true ? 1 : 0));
    }
  }
  topologyLines(lines);
  return $multi(table.concat(lines, "\n"), undefined);
}

/** Per Redis endpoint: how it is reached; Cluster redirects and slot map age; Redlock failures per master. */
function topologyLines(lines: string[]): void {
  const info: string[] = [
    "# HELP dlock_redis_topology_info How each Redis endpoint is reached (always 1).",
    "# TYPE dlock_redis_topology_info gauge",
  ];
  const redirects: string[] = [
    "# HELP dlock_redis_cluster_redirects_total MOVED and ASK redirections followed (all workers).",
    "# TYPE dlock_redis_cluster_redirects_total counter",
  ];
  const ages: string[] = [
    "# HELP dlock_redis_cluster_slot_map_age_seconds Seconds since a worker last read the cluster's slot map.",
    "# TYPE dlock_redis_cluster_slot_map_age_seconds gauge",
  ];
  const failures: string[] = [
    "# HELP dlock_redis_redlock_node_failures_total Calls to a Redlock master that failed (all workers).",
    "# TYPE dlock_redis_redlock_node_failures_total counter",
  ];
  for (const [ep, conf] of redis.endpoints()) {
    const e = label(ep);
    info.push("dlock_redis_topology_info{endpoint=\"" + e + "\",kind=\"" + conf.topology + "\",tls=\"" +
      (conf.ssl ? "on" : "off") + "\"} 1");
    const [kind, counts] = backend.shared(conf);
    if (kind === "cluster") {
      redirects.push("dlock_redis_cluster_redirects_total{endpoint=\"" + e + "\"} " + counts.get("redirects"));
      const age = counts.get("slot_map_age");
      if (age !== undefined) {
        ages.push("dlock_redis_cluster_slot_map_age_seconds{endpoint=\"" + e + "\"} " + string.format("%.3f", age));
      }
    } else if (kind === "redlock") {
      for (const [node, n] of counts) {
        failures.push("dlock_redis_redlock_node_failures_total{endpoint=\"" + e + "\",node=\"" + label(node) + "\"} " + n);
      }
    }
  }
  for (const group of [info, redirects, ages, failures]) {
    for (const l of group) lines.push(l);
  }
}

/** content_by_lua: metrics_text() as the response. */
export function metrics(opts?: unknown): void {
  const [text, err] = metrics_text(opts);
  if (text === undefined) {
    ngx.status = 500;
    ngx.say("# ", err!);
    return;
  }
  ngx.header.set("Content-Type", "text/plain; version=0.0.4");
  ngx.say(text);
}
