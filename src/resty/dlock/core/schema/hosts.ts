// Hosts and "host:port" nodes as the redis options name them and nginx's
// connect() takes them: IPv6 in brackets, names told from addresses, ports
// read in place.

import * as check from "../check";
import type { Node } from "./values";

const lua_type = type;
const str_find = string.find;
const str_byte = string.byte;
const str_match = string.match;

/** "dlock: <what>, got <v>", or only v's type when v is a secret. */
function refuse(what: string, v: unknown, secret: boolean): LuaMultiReturn<[undefined, string]> {
  if (secret) return check.hidden(what, v);
  return check.fail(what, v);
}

/** The port whose digits run from `at` to the end of s: read in place, a substring would be garbage. */
function port(s: string, at: number): number | undefined {
  let p = 0;
  for (const i of $range(at, s.length)) {
    p = p * 10 + str_byte(s, i) - 48;
    if (p > 65535) return undefined;
  }
  return p >= 1 ? p : undefined;
}

/**
 * A host as nginx's connect() takes it: an IPv6 address in brackets ("[::1]"),
 * which is also how "host:port" names it unambiguously. Hosts come bare from
 * the `host` option, CLUSTER SLOTS, MOVED and the sentinels.
 */
function literal(host: string): string {
  // Two colons at least: "10.0.0.1:6379" is a host with a port, not an IPv6 address.
  if (str_match(host, "^[%x%.]*:[%x%.]*:[%x:%.]*$")[0] !== undefined) return "[" + host + "]";
  return host;
}

/** A host as `host` takes it: a name, an IPv4 address, or IPv6 bare or in brackets; not "host:port" nor a URL. */
function hostLike(s: string): boolean {
  if (str_match(s, "^[%w%.%-_]+$")[0] !== undefined) return true;
  return str_match(s, "^%[?[%x%.]*:[%x%.]*:[%x:%.]*%]?$")[0] !== undefined;
}

// Per host as literal() gives it: whether it is a name (bounded by the hosts of
// configurations, sentinels' answers and CLUSTER SLOTS).
const names = new LuaTable<string, boolean>();

/**
 * Whether a host (as literal() gives it) is a name nginx must resolve, not an
 * address: what a certificate can be checked against, and what nginx's
 * resolver may keep a connect waiting for.
 */
function named(host: string): boolean {
  let n = names.get(host);
  if (n === undefined) {
    n = str_match(host, "^%[")[0] === undefined && str_match(host, "^[%d%.]+$")[0] === undefined;
    names.set(host, n);
  }
  return n;
}

/** "host:port" or "[v6]:port" (the host keeps its brackets); `label` names the list it came from. */
function node(label: string, v: unknown): LuaMultiReturn<[Node | undefined, string | undefined]> {
  if (lua_type(v) !== "string") return check.fail(label + " must be \"host:port\" strings", v);
  // A URL with credentials ("redis://:secret@host:port") is refused without being shown.
  const what = label + " must be \"host:port\" strings";
  const secret = str_find(v as string, "@", 1, true)[0] !== undefined;
  // The () captures are positions: numbers, where the port digits start.
  let [host, at] = str_match(v as string, "^(%[[%x:%.]+%]):()%d+$");
  if (host === undefined) {
    [host, at] = str_match(v as string, "^([%w%.%-_]+):()%d+$");
  }
  if (host === undefined) return refuse(what, v, secret);
  const p = port(v as string, at as unknown as number);
  if (p === undefined) return refuse(what, v, secret);
  return $multi({ host, port: p }, undefined);
}

// Exported by name: this module's own uses of them are locals, not lookups in its exports table.
export { hostLike, literal, named, node, refuse };
