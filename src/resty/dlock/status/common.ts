// What the status page (JSON) and the metrics (Prometheus text) both read: the
// dicts to report, and per dict, guard, factory and Redis endpoint a fixed
// number of dict keys. Never the held leases themselves (json.ts lists a
// bounded number of those), which a busy gateway has tens of thousands of.

import * as backend from "../redis/backend";
import * as check from "../core/check";
import * as eviction from "../redis/eviction";
import * as registry from "../gateway/registry";
import * as ledger from "../core/ledger";
import * as meter from "../core/meter";
import * as meters from "./meters";
import * as redis from "../redis/client";
import * as sentinel from "../redis/sentinel";
import * as stats from "../gateway/stats";
import * as breaker from "../gateway/breaker";

const lua_tostring = tostring;
const lua_pairs = pairs;
const lua_ipairs = ipairs;
const ngx_get_phase = ngx.get_phase;
const ngx_shared = ngx.shared;
const lua_type = type;

const ADVICE = "set maxmemory-policy noeviction, or give locks a Redis of their own";

/** Phases in which a handler may answer the request (ngx.say, ngx.var). */
const ANSWERING = check.set("rewrite", "server_rewrite", "access", "content");

/** nil in a phase that can answer a request, else the error `fn` returns there. */
export function phaseError(fn: string): string | undefined {
  const phase = ngx_get_phase();
  if (ANSWERING.has(phase)) return undefined;
  return "dlock: status." + fn + " answers a request: call it from content_by_lua, not the " + phase + " phase";
}

/** Dict names to report: those of the guards and factories of this worker, plus o.dicts (default { "dlock" }). */
export function dictNames(o: LuaTable<string, unknown>): LuaMultiReturn<[string[] | undefined, string | undefined]> {
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
    if (lua_type(extra) !== "table") return check.fail("dicts must be a list of lua_shared_dict names", extra);
    if (!check.isList(extra as LuaTable<AnyNotNil, unknown>)) return check.fail("dicts must be a list of lua_shared_dict names", extra);
    for (const [_, n] of lua_ipairs(extra as unknown[])) {
      if (lua_type(n) !== "string" || ngx_shared.get(n as string) === undefined) {
        return check.fail("dicts must name lua_shared_dicts", n);
      }
      add(n as string);
    }
  }
  const mine: NgxSharedDict[] = [];
  for (const [_, g] of lua_ipairs(registry.all())) mine.push(g._dict);
  for (const [_, d] of lua_ipairs(meter.known())) mine.push(d);
  for (const [_, d] of lua_ipairs(mine)) {
    for (const [name, sd] of lua_pairs(ngx_shared)) {
      if (sd === d) add(name);
    }
  }
  if (names.length === 0 && ngx_shared.get("dlock") !== undefined) add("dlock");
  return $multi(names, undefined);
}

export interface HeldView {
  dict: string;
  key: string;
  pid: number;
  ttl: number;
  expires_at: number;
}

export interface Report {
  dicts: string[];
  /** At most `held_limit` leases. */
  held: HeldView[];
  held_listed: number;
  held_limit: number;
  /** More leases are held than listed (or may be: the search stopped before the end of a dict). */
  held_truncated: boolean;
  /** Leases held now, all factories of all reported dicts (the held gauges, not a walk). */
  held_total: number;
  /** Per dict: leases this nginx could not record (the dict was full). */
  unrecorded: LuaTable<string, number>;
  /** Per dict: writes fewer replicas than redis.replicas acknowledged in time. */
  shortfalls: LuaTable<string, number>;
  /** Per Redis endpoint: can it evict lock keys. */
  redis: LuaTable<string, LuaTable<string, unknown>>;
  /** Per Redis endpoint: how it is reached (kind, TLS, replicas, the Sentinel master). */
  topology: LuaTable<string, LuaTable<string, unknown>>;
  guards: LuaTable<string, LuaTable<string, unknown>>;
  /** Per factory name: its readings, summed over the reported dicts. */
  factories: LuaTable<string, meters.Reading>;
  /** Factory names in the order first seen. */
  factoryNames: string[];
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

function addReading(into: meters.Reading, r: meters.Reading): void {
  into.held += r.held;
  into.acquired += r.acquired;
  into.busy += r.busy;
  into.timeout += r.timeout;
  into.error += r.error;
  into.lost += r.lost;
  into.waitSum += r.waitSum;
  into.holdSum += r.holdSum;
  for (const i of $range(1, r.wait.length)) into.wait[i - 1] = into.wait[i - 1]! + r.wait[i - 1]!;
  for (const i of $range(1, r.hold.length)) into.hold[i - 1] = into.hold[i - 1]! + r.hold[i - 1]!;
}

/** Every factory counted in the dicts (by any worker), summed by name. */
function factories(dicts: NgxSharedDict[]): LuaMultiReturn<[LuaTable<string, meters.Reading>, string[], number]> {
  const byName = new LuaTable<string, meters.Reading>();
  const order: string[] = [];
  let held = 0;
  for (const [_, d] of lua_ipairs(dicts)) {
    for (const [_, name] of lua_ipairs(meters.names(d))) {
      const r = meters.read(d, name);
      held += r.held;
      const had = byName.get(name);
      if (had === undefined) {
        byName.set(name, r);
        order.push(name);
      } else {
        addReading(had, r);
      }
    }
  }
  return $multi(byName, order, held);
}

/** How each endpoint is reached: this worker's view (a Sentinel master is this worker's latest answer). */
function topologies(): LuaTable<string, LuaTable<string, unknown>> {
  const topology = new LuaTable<string, LuaTable<string, unknown>>();
  for (const [ep, conf] of lua_pairs(redis.endpoints())) {
    const v = new LuaTable<string, unknown>();
    topology.set(ep, v);
    v.set("kind", conf.topology);
    v.set("tls", conf.ssl);
    v.set("tls_verify", conf.ssl_verify);
    v.set("replicas", conf.replicas);
    if (conf.sentinel !== undefined) {
      const m = sentinel.last(conf.pool);
      v.set("master", m === undefined ? "unknown" : m.host + ":" + lua_tostring(m.port));
    }
    const more = backend.describe(conf);
    if (more !== undefined) {
      for (const [k, x] of lua_pairs(more)) v.set(k, x);
    }
    const [kind, counts] = backend.shared(conf);
    if (kind === "cluster") {
      // All workers' redirects, not only this one's.
      v.set("redirects", counts.get("redirects"));
    }
  }
  return topology;
}

/** What serve() and metrics() both show: guards, factories, unrecorded leases per dict, Redis. No held leases. */
export function counters(names: string[]): Report {
  // This worker's counts are in Lua until their flush: add them before reading.
  meter.flush();
  const dicts: NgxSharedDict[] = [];
  const unrecorded = new LuaTable<string, number>();
  const shortfalls = new LuaTable<string, number>();
  for (const [_, name] of lua_ipairs(names)) {
    const d = ngx_shared.get(name)!;
    dicts.push(d);
    unrecorded.set(name, ledger.unrecorded(d));
    const [n] = d.get(backend.SHORTFALLS);
    shortfalls.set(name, lua_type(n) === "number" ? (n as number) : 0);
  }
  const ev = new LuaTable<string, LuaTable<string, unknown>>();
  for (const [ep, e] of lua_pairs(eviction.evictions(dicts))) {
    ev.set(ep, evictionView(e));
  }
  const guards = new LuaTable<string, LuaTable<string, unknown>>();
  for (const [_, g] of lua_ipairs(registry.all())) {
    const row = new LuaTable<string, unknown>();
    row.set("mode", g.mode);
    const state = breaker.breakerState(g._dict, g.name);
    row.set("breaker", state);
    // on_error = "local": deciding on this nginx's share until the breaker closes again (a half-open one waits for its probe).
    row.set("degraded", state !== "closed" && g._onError === "local");
    row.set("in_flight", stats.gauge(g._dict, g.name, "in_flight"));
    for (const [_, e] of lua_ipairs(stats.EVENTS)) {
      row.set(e, stats.count(g._dict, g.name, e));
    }
    guards.set(g.name, row);
  }
  const [byName, order, heldTotal] = factories(dicts);
  return {
    dicts: names, held: [], held_listed: 0, held_limit: 0, held_truncated: false, held_total: heldTotal,
    unrecorded, shortfalls, redis: ev, topology: topologies(), guards, factories: byName, factoryNames: order,
  };
}
