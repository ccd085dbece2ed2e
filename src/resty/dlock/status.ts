// resty.dlock.status: what this nginx instance holds and what its guards did.
//
//   location = /dlock/status  { content_by_lua_block { require("resty.dlock.status").serve() } }
//   location = /dlock/metrics { content_by_lua_block { require("resty.dlock.status").metrics() } }
//
// serve() answers JSON: { held = [ {key, pid, ttl, expires_at} ], guards = { name = {mode, breaker, <events>} } };
// metrics() answers the same numbers in the Prometheus text format.
// Both read the shared dicts of the guards (and any dict named in `dicts`).

import * as check from "./check";
import * as gateway from "./gateway";
import * as ledger from "./ledger";
import * as stats from "./stats";

export const _VERSION = "0.1.0";

const cjson = require("cjson.safe") as CjsonSafeModule;

const OPTIONS = check.set("dicts");

/** Dict names to report: those of the guards, plus opts.dicts (default { "dlock" } when there are no guards). */
function dictNames(opts: unknown): LuaMultiReturn<[string[] | undefined, string | undefined]> {
  const [o, err] = check.options("status options", opts, OPTIONS);
  if (o === undefined) return $multi(undefined, err);
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

interface HeldView {
  dict: string;
  key: string;
  pid: number;
  ttl: number;
  expires_at: number;
}

interface Report {
  dicts: string[];
  held: HeldView[];
  guards: LuaTable<string, LuaTable<string, unknown>>;
}

/** The numbers serve() and metrics() show. Tokens are left out: they are capabilities. */
export function report(opts?: unknown): LuaMultiReturn<[Report | undefined, string | undefined]> {
  const [names, err] = dictNames(opts);
  if (names === undefined) return $multi(undefined, err);
  const held: HeldView[] = [];
  for (const name of names) {
    for (const l of ledger.held(ngx.shared.get(name)!)) {
      held.push({ dict: name, key: l.key, pid: l.pid, ttl: l.ttl, expires_at: l.expires_at });
    }
  }
  const guards = new LuaTable<string, LuaTable<string, unknown>>();
  for (const g of gateway.guards()) {
    const row = new LuaTable<string, unknown>();
    row.set("mode", g.mode);
    row.set("breaker", stats.breakerState(g.dict, g.name));
    for (const ev of stats.EVENTS) {
      row.set(ev, stats.count(g.dict, g.name, ev));
    }
    guards.set(g.name, row);
  }
  return $multi({ dicts: names, held, guards }, undefined);
}

/** content_by_lua: the report as JSON. */
export function serve(opts?: unknown): void {
  const [r, err] = report(opts);
  ngx.header.set("Content-Type", "application/json");
  if (r === undefined) {
    ngx.status = 500;
    ngx.say(cjson.encode({ error: err })[0] ?? "{}");
    return;
  }
  // An empty list must stay a JSON list, not become {}.
  const [body, jerr] = cjson.encode({ held: r.held.length > 0 ? r.held : cjson.empty_array, guards: r.guards });
  ngx.say(body ?? "{\"error\":\"" + tostring(jerr) + "\"}");
}

function label(s: string): string {
  const [escaped] = string.gsub(s, "[\\\"\n]", (c: string) => (c === "\n" ? "\\n" : "\\" + c));
  return escaped;
}

/** content_by_lua: the report in the Prometheus text format (version 0.0.4). */
export function metrics(opts?: unknown): void {
  const [r, err] = report(opts);
  if (r === undefined) {
    ngx.status = 500;
    ngx.say("# ", err!);
    return;
  }
  const lines: string[] = [
    "# HELP dlock_guard_events_total Gateway guard outcomes since this nginx started.",
    "# TYPE dlock_guard_events_total counter",
  ];
  const breakers: string[] = [
    "# HELP dlock_guard_breaker_open 1 while the guard's Redis circuit breaker is open.",
    "# TYPE dlock_guard_breaker_open gauge",
  ];
  for (const [gname, row] of r.guards) {
    const name = label(gname);
    for (const ev of stats.EVENTS) {
      lines.push("dlock_guard_events_total{guard=\"" + name + "\",mode=\"" + row.get("mode") + "\",event=\"" + ev + "\"} " +
        row.get(ev));
    }
    breakers.push("dlock_guard_breaker_open{guard=\"" + name + "\"} " + (row.get("breaker") === "open" ? 1 : 0));
  }
  for (const b of breakers) lines.push(b);
  lines.push("# HELP dlock_held_leases Leases this nginx instance holds now.");
  lines.push("# TYPE dlock_held_leases gauge");
  for (const name of r.dicts) {
    let n = 0;
    for (const l of r.held) {
      if (l.dict === name) n++;
    }
    lines.push("dlock_held_leases{dict=\"" + label(name) + "\"} " + n);
  }
  ngx.header.set("Content-Type", "text/plain; version=0.0.4");
  ngx.say(table.concat(lines, "\n"));
}
