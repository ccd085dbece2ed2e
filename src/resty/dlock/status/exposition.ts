// GET /dlock/metrics: the Prometheus text format (version 0.0.4). A scrape reads
// a fixed number of dict keys per guard, factory, dict and Redis endpoint; it
// never walks the held leases.

import * as backend from "../redis/backend";
import * as check from "../core/check";
import * as meter from "../core/meter";
import * as redis from "../redis/client";
import * as stats from "../gateway/stats";
import * as common from "./common";

const lua_pairs = pairs;
const lua_ipairs = ipairs;
const ngx_header = ngx.header;
const ngx_say = ngx.say;
const ngx_ = ngx;
const str_gsub = string.gsub;
const str_format = string.format;
const table_concat = table.concat;
const lua_tostring = tostring;

const METRICS_OPTIONS = check.set("dicts");

function label(s: string): string {
  const [escaped] = str_gsub(s, "[\\\"\n]", (c: string) => (c === "\n" ? "\\n" : "\\" + c));
  return escaped;
}

function header(lines: string[], name: string, kind: string, help: string): void {
  lines.push("# HELP " + name + " " + help);
  lines.push("# TYPE " + name + " " + kind);
}

/** A histogram's series: cumulative buckets (stored apart), then _sum and _count. */
function histogram(lines: string[], name: string, labels: string, bounds: number[], counts: number[], sum: number): void {
  let total = 0;
  for (const i of $range(1, counts.length)) {
    total += counts[i - 1]!;
    const le = i <= bounds.length ? lua_tostring(bounds[i - 1]) : "+Inf";
    lines.push(name + "_bucket{" + labels + ",le=\"" + le + "\"} " + lua_tostring(total));
  }
  lines.push(name + "_sum{" + labels + "} " + str_format("%.6f", sum));
  lines.push(name + "_count{" + labels + "} " + lua_tostring(total));
}

/** The core API per factory name (guards' factories carry the guard's name). */
function factoryLines(lines: string[], r: common.Report): void {
  header(lines, "dlock_acquires_total", "counter",
    "Acquire calls of locks and semaphores by outcome (acquired, busy, timeout, error) since this nginx started.");
  for (const [_, name] of lua_ipairs(r.factoryNames)) {
    const f = r.factories.get(name);
    const l = "dlock_acquires_total{factory=\"" + label(name) + "\",outcome=\"";
    lines.push(l + "acquired\"} " + lua_tostring(f.acquired));
    lines.push(l + "busy\"} " + lua_tostring(f.busy));
    lines.push(l + "timeout\"} " + lua_tostring(f.timeout));
    lines.push(l + "error\"} " + lua_tostring(f.error));
  }
  header(lines, "dlock_leases_lost_total", "counter",
    "Leases found gone before their holder released them (renewal failed, or the release found the key not ours).");
  for (const [_, name] of lua_ipairs(r.factoryNames)) {
    lines.push("dlock_leases_lost_total{factory=\"" + label(name) + "\"} " + lua_tostring(r.factories.get(name).lost));
  }
  header(lines, "dlock_held_leases", "gauge", "Leases this nginx holds now (all workers).");
  for (const [_, name] of lua_ipairs(r.factoryNames)) {
    lines.push("dlock_held_leases{factory=\"" + label(name) + "\"} " + lua_tostring(r.factories.get(name).held));
  }
  header(lines, "dlock_acquire_wait_seconds", "histogram", "Time from an acquire call to its lease, for acquires that got one.");
  for (const [_, name] of lua_ipairs(r.factoryNames)) {
    const f = r.factories.get(name);
    histogram(lines, "dlock_acquire_wait_seconds", "factory=\"" + label(name) + "\"", meter.WAIT_BOUNDS, f.wait, f.waitSum);
  }
  header(lines, "dlock_lease_hold_seconds", "histogram", "Time from taking a lease to its confirmed release.");
  for (const [_, name] of lua_ipairs(r.factoryNames)) {
    const f = r.factories.get(name);
    histogram(lines, "dlock_lease_hold_seconds", "factory=\"" + label(name) + "\"", meter.HOLD_BOUNDS, f.hold, f.holdSum);
  }
}

/** Per Redis endpoint: how it is reached; Cluster redirects and slot map age; Redlock failures per master. */
function topologyLines(lines: string[]): void {
  const info: string[] = [];
  header(info, "dlock_redis_topology_info", "gauge", "How each Redis endpoint is reached (always 1).");
  const redirects: string[] = [];
  header(redirects, "dlock_redis_cluster_redirects_total", "counter", "MOVED and ASK redirections followed (all workers).");
  const ages: string[] = [];
  header(ages, "dlock_redis_cluster_slot_map_age_seconds", "gauge", "Seconds since a worker last read the cluster's slot map.");
  const failures: string[] = [];
  header(failures, "dlock_redis_redlock_node_failures_total", "counter", "Calls to a Redlock master that failed (all workers).");
  for (const [ep, conf] of lua_pairs(redis.endpoints())) {
    const e = label(ep);
    info.push("dlock_redis_topology_info{endpoint=\"" + e + "\",kind=\"" + conf.topology + "\",tls=\"" +
      (conf.ssl ? "on" : "off") + "\"} 1");
    const [kind, counts] = backend.shared(conf);
    if (kind === "cluster") {
      redirects.push("dlock_redis_cluster_redirects_total{endpoint=\"" + e + "\"} " + lua_tostring(counts.get("redirects")));
      const age = counts.get("slot_map_age");
      if (age !== undefined) {
        ages.push("dlock_redis_cluster_slot_map_age_seconds{endpoint=\"" + e + "\"} " + str_format("%.3f", age));
      }
    } else if (kind === "redlock") {
      for (const [node, n] of lua_pairs(counts)) {
        failures.push("dlock_redis_redlock_node_failures_total{endpoint=\"" + e + "\",node=\"" + label(node) + "\"} " + lua_tostring(n));
      }
    }
  }
  for (const [_, group] of lua_ipairs([info, redirects, ages, failures])) {
    for (const [_, l] of lua_ipairs(group)) lines.push(l);
  }
}

/**
 * The metrics in the Prometheus text format (version 0.0.4), or nil and an error.
 * Reads a fixed number of dict keys per guard, factory, dict and Redis endpoint; never the leases.
 */
function metrics_text(opts?: unknown): LuaMultiReturn<[string | undefined, string | undefined]> {
  const [o, oerr] = check.options("metrics options", opts, METRICS_OPTIONS);
  if (o === undefined) return $multi(undefined, oerr);
  const [names, err] = common.dictNames(o);
  if (names === undefined) return $multi(undefined, err);
  const r = common.counters(names);
  const lines: string[] = [];
  header(lines, "dlock_guard_events_total", "counter", "Gateway guard outcomes since this nginx started.");
  const breakers: string[] = [];
  header(breakers, "dlock_guard_breaker_open", "gauge", "1 while the guard's Redis circuit breaker is open.");
  const degraded: string[] = [];
  header(degraded, "dlock_guard_degraded", "gauge",
    "1 while the guard decides on this nginx's share, Redis unreachable (on_error = \"local\").");
  const inFlight: string[] = [];
  header(inFlight, "dlock_guard_in_flight", "gauge", "Requests the guard let through that have not ended yet.");
  for (const [gname, row] of lua_pairs(r.guards)) {
    const name = label(gname);
    for (const [_, ev] of lua_ipairs(stats.EVENTS)) {
      lines.push("dlock_guard_events_total{guard=\"" + name + "\",mode=\"" + lua_tostring(row.get("mode")) + "\",event=\"" + ev + "\"} " +
        lua_tostring(row.get(ev)));
    }
    breakers.push("dlock_guard_breaker_open{guard=\"" + name + "\"} " + (row.get("breaker") === "open" ? "1" : "0"));
    degraded.push("dlock_guard_degraded{guard=\"" + name + "\"} " + (row.get("degraded") === true ? "1" : "0"));
    inFlight.push("dlock_guard_in_flight{guard=\"" + name + "\"} " + lua_tostring(row.get("in_flight")));
  }
  for (const [_, l] of lua_ipairs(breakers)) lines.push(l);
  for (const [_, l] of lua_ipairs(degraded)) lines.push(l);
  for (const [_, l] of lua_ipairs(inFlight)) lines.push(l);
  factoryLines(lines, r);
  header(lines, "dlock_unrecorded_leases_total", "counter", "Leases this nginx could not record in the shared dict (it was full).");
  for (const [_, name] of lua_ipairs(r.dicts)) {
    lines.push("dlock_unrecorded_leases_total{dict=\"" + label(name) + "\"} " + lua_tostring(r.unrecorded.get(name)));
  }
  header(lines, "dlock_replica_shortfalls_total", "counter", "Writes that fewer replicas than redis.replicas acknowledged in time.");
  for (const [_, name] of lua_ipairs(r.dicts)) {
    lines.push("dlock_replica_shortfalls_total{dict=\"" + label(name) + "\"} " + lua_tostring(r.shortfalls.get(name)));
  }
  header(lines, "dlock_redis_can_evict_locks", "gauge", "1 when the Redis has maxmemory set and a policy that evicts keys " +
    "with a ttl (lock keys); endpoints whose settings could not be read are left out.");
  for (const [ep, v] of lua_pairs(r.redis)) {
    if (v.get("checked") === true) {
      lines.push("dlock_redis_can_evict_locks{endpoint=\"" + label(ep) + "\",policy=\"" + label(v.get("maxmemory_policy") as string) +
        "\"} " + (v.get("can_evict_locks") === true ? "1" : "0"));
    }
  }
  topologyLines(lines);
  return $multi(table_concat(lines, "\n"), undefined);
}

/** content_by_lua: metrics_text() as the response. Outside a request: nil, err. */
export function metrics(opts?: unknown): LuaMultiReturn<[true | undefined, string | undefined]> {
  const perr = common.phaseError("metrics");
  if (perr !== undefined) return $multi(undefined, perr);
  const [text, err] = metrics_text(opts);
  if (text === undefined) {
    ngx_.status = 500;
    ngx_say("# ", err!);
    return $multi(true as const, undefined);
  }
  ngx_header.set("Content-Type", "text/plain; version=0.0.4");
  ngx_say(text);
  return $multi(true as const, undefined);
}

// Exported by name: this module's own uses of them are locals, not lookups in its exports table.
export { metrics_text };
