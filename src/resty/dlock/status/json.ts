// The status page: GET /dlock/status answers JSON (?limit=N lists up to N
// leases, at most MAX_LIMIT). See ../status.ts for its members.

import * as check from "../core/check";
import * as ledger from "../core/ledger";
import * as meters from "./meters";
import * as common from "./common";

/** Leases serve() and report() list unless asked for another number. */
export const DEFAULT_LIMIT = 100;
/** The most a request may ask for: listing walks the dict, a bound keeps the page cheap. */
export const MAX_LIMIT = 10000;

const cjson = require("cjson.safe") as CjsonSafeModule;

const lua_tostring = tostring;
const lua_pairs = pairs;
const lua_ipairs = ipairs;
const ngx_var = ngx.var;
const ngx_header = ngx.header;
const ngx_say = ngx.say;
const ngx_shared = ngx.shared;
const ngx_ = ngx;
const table_concat = table.concat;
const lua_type = type;
const lua_tonumber = tonumber;
const str_byte = string.byte;
const str_char = string.char;
const str_find = string.find;
const str_sub = string.sub;
const str_gsub = string.gsub;

/** A byte of a multi-byte UTF-8 sequence, or U+FFFD; built from bytes (the source is UTF-8 text). */
const HIGH = "[" + str_char(0x80) + "-" + str_char(0xff) + "]";
const REPLACEMENT = str_char(0xef, 0xbf, 0xbd);

const REPORT_OPTIONS = check.set("dicts", "limit");

function checkLimit(v: unknown): LuaMultiReturn<[number | undefined, string | undefined]> {
  return check.integer("limit", v, 0, MAX_LIMIT, "an integer from 0 to " + lua_tostring(MAX_LIMIT));
}

/** The length of the well-formed UTF-8 sequence at byte i of s (RFC 3629), or 0. */
function sequence(s: string, i: number): number {
  const c = str_byte(s, i);
  let len: number;
  let lo = 0x80;
  let hi = 0xbf;
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf) len = 2;
  else if (c >= 0xe0 && c <= 0xef) len = 3;
  else if (c >= 0xf0 && c <= 0xf4) len = 4;
  else return 0;
  // No overlong forms, no surrogates, nothing past U+10FFFF.
  if (c === 0xe0) lo = 0xa0;
  else if (c === 0xed) hi = 0x9f;
  else if (c === 0xf0) lo = 0x90;
  else if (c === 0xf4) hi = 0x8f;
  for (const j of $range(1, len - 1)) {
    const b = str_byte(s, i + j);
    if (b === undefined || b < lo || b > hi) return 0;
    lo = 0x80;
    hi = 0xbf;
  }
  return len;
}

/**
 * s as valid UTF-8, as RFC 8259 asks of JSON (cjson passes bytes through): a
 * byte that starts no well-formed sequence becomes U+FFFD. A key is whatever
 * bytes a client or the application used.
 */
function utf8(s: string): string {
  if (str_find(s, HIGH)[0] === undefined) return s;
  const out: string[] = [];
  let i = 1;
  while (i <= s.length) {
    const len = sequence(s, i);
    if (len > 0) {
      out.push(str_sub(s, i, i + len - 1));
      i += len;
    } else {
      out.push(REPLACEMENT);
      i++;
    }
  }
  return table_concat(out);
}

/** Append at most `max` leases of one dict to `out` (tokens left out); true when it holds more. */
function listHeld(name: string, dict: NgxSharedDict, max: number, out: common.HeldView[]): boolean {
  if (max === 0) {
    // Nothing to list, but say whether anything is held.
    const [one, more] = ledger.list(dict, 1, meters.keys(dict));
    return one.length > 0 || more;
  }
  // Factories' instruments share the dict with the records: look past them too.
  const [found, more] = ledger.list(dict, max, meters.keys(dict));
  for (const [_, l] of lua_ipairs(found)) {
    out.push({ dict: name, key: l.key, pid: l.pid, ttl: l.ttl, expires_at: l.expires_at });
  }
  return more;
}

/** The report as report() returns it and serve() answers it (README "What they show"). */
interface Shown {
  held: common.HeldView[];
  held_listed: number;
  held_limit: number;
  held_truncated: boolean;
  held_total: number;
  /** Per dict: { unrecorded_leases, replica_shortfalls }. */
  dicts: LuaTable<string, LuaTable<string, number>>;
  redis: LuaTable<string, LuaTable<string, unknown>>;
  topology: LuaTable<string, LuaTable<string, unknown>>;
  guards: LuaTable<string, LuaTable<string, unknown>>;
  /** Per factory name: { held, acquired, busy, timeout, error, lost }. */
  factories: LuaTable<string, LuaTable<string, number>>;
}

/** What the counters say, in the shape the README documents: per dict and factory, only the published readings. */
function shown(r: common.Report): Shown {
  const dicts = new LuaTable<string, LuaTable<string, number>>();
  for (const [_, name] of lua_ipairs(r.dicts)) {
    const d = new LuaTable<string, number>();
    d.set("unrecorded_leases", r.unrecorded.get(name));
    d.set("replica_shortfalls", r.shortfalls.get(name));
    dicts.set(name, d);
  }
  const factories = new LuaTable<string, LuaTable<string, number>>();
  for (const [name, f] of lua_pairs(r.factories)) {
    const row = new LuaTable<string, number>();
    row.set("held", f.held);
    row.set("acquired", f.acquired);
    row.set("busy", f.busy);
    row.set("timeout", f.timeout);
    row.set("error", f.error);
    row.set("lost", f.lost);
    factories.set(name, row);
  }
  return {
    held: r.held, held_listed: r.held_listed, held_limit: r.held_limit, held_truncated: r.held_truncated,
    held_total: r.held_total, dicts, redis: r.redis, topology: r.topology, guards: r.guards, factories,
  };
}

/**
 * The numbers serve() shows, with at most opts.limit (default 100) held leases.
 * Tokens are left out: they are capabilities.
 */
function report(opts?: unknown): LuaMultiReturn<[Shown | undefined, string | undefined]> {
  const [o, oerr] = check.options("status options", opts, REPORT_OPTIONS);
  if (o === undefined) return $multi(undefined, oerr);
  let limit = DEFAULT_LIMIT;
  if (o.get("limit") !== undefined) {
    const [n, err] = checkLimit(o.get("limit"));
    if (n === undefined) return $multi(undefined, err);
    limit = n;
  }
  const [names, err] = common.dictNames(o);
  if (names === undefined) return $multi(undefined, err);
  const r = common.counters(names);
  let truncated = false;
  for (const [_, name] of lua_ipairs(names)) {
    if (listHeld(name, ngx_shared.get(name)!, limit - r.held.length, r.held)) {
      truncated = true;
    }
  }
  r.held_listed = r.held.length;
  r.held_limit = limit;
  r.held_truncated = truncated;
  return $multi(shown(r), undefined);
}

/** One "name":value member of a JSON object (names are ours: plain identifiers). */
function member(name: string, value: unknown): string | undefined {
  const [v] = cjson.encode(value);
  if (v === undefined) return undefined;
  return "\"" + name + "\":" + v;
}

/** The report as a JSON object, its members in a fixed order. */
function encode(r: Shown): LuaMultiReturn<[string | undefined, string | undefined]> {
  // Written by hand when empty: Debian's lua-cjson has no empty_array, and an
  // empty table would become {} (or the member would be dropped). "held" is always a list.
  const held: common.HeldView[] = [];
  for (const [_, l] of lua_ipairs(r.held)) {
    held.push({ dict: l.dict, key: utf8(l.key), pid: l.pid, ttl: l.ttl, expires_at: l.expires_at });
  }
  const parts: string[] = [held.length > 0 ? member("held", held) ?? "" : "\"held\":[]"];
  const rest: [string, unknown][] = [
    ["held_listed", r.held_listed],
    ["held_limit", r.held_limit],
    ["held_truncated", r.held_truncated],
    ["held_total", r.held_total],
    ["dicts", r.dicts],
    ["redis", r.redis],
    ["topology", r.topology],
    ["guards", r.guards],
    ["factories", r.factories],
  ];
  for (const [_, pair] of lua_ipairs(rest)) {
    const name = pair[0];
    const value = pair[1];
    let p = member(name, value) ?? "";
    // The same for a Cluster's masters before its slot map is read: a list, empty.
    if (name === "topology") p = str_gsub(p, "\"masters\":{}", "\"masters\":[]")[0];
    parts.push(p);
  }
  for (const [_, p] of lua_ipairs(parts)) {
    if (p === "") return $multi(undefined, "dlock: status: cannot encode the report as JSON");
  }
  return $multi("{" + table_concat(parts, ",") + "}", undefined);
}

function fail(status: number, err: string): void {
  ngx_.status = status;
  ngx_header.set("Content-Type", "application/json");
  ngx_say(cjson.encode({ error: err })[0] ?? "{}");
}

/**
 * content_by_lua: the report as JSON; ?limit=N lists up to N held leases
 * (instead of opts.limit or 100). Outside a request: nil, err.
 */
export function serve(opts?: unknown): LuaMultiReturn<[true | undefined, string | undefined]> {
  const perr = common.phaseError("serve");
  if (perr !== undefined) return $multi(undefined, perr);
  let o = opts;
  const arg = ngx_var.get("arg_limit");
  if (arg !== undefined) {
    const [n, lerr] = checkLimit(lua_tonumber(arg) ?? arg);
    if (n === undefined) {
      fail(400, lerr!);
      return $multi(true as const, undefined);
    }
    if (opts === undefined || lua_type(opts) === "table") {
      // A copy: opts is the caller's table, shared by every request.
      const copy = new LuaTable<AnyNotNil, unknown>();
      if (opts !== undefined) {
        for (const [k, v] of lua_pairs(opts as LuaTable<AnyNotNil, unknown>)) copy.set(k, v);
      }
      copy.set("limit", n);
      o = copy;
    }
  }
  const [r, err] = report(o);
  if (r === undefined) {
    fail(500, err!);
    return $multi(true as const, undefined);
  }
  const [body, jerr] = encode(r);
  if (body === undefined) {
    fail(500, jerr!);
    return $multi(true as const, undefined);
  }
  ngx_header.set("Content-Type", "application/json");
  ngx_say(body);
  return $multi(true as const, undefined);
}

// Exported by name: this module's own uses of them are locals, not lookups in its exports table.
export { report };
