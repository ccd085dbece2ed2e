// The kinds of option a schema declares (../schema.ts), and the check of one value against its
// declaration, with the message a user reads when it fails.

import * as check from "../check";
import * as hosts from "./hosts";

const lua_type = type;
const str_find = string.find;
const lua_ipairs = ipairs;
const str_sub = string.sub;
const str_format = string.format;
const lua_tostring = tostring;
const lua_pairs = pairs;
const concat = table.concat;
const node = hosts.node;
const hostLike = hosts.hostLike;
const refuse = hosts.refuse;

export interface Node {
  readonly host: string;
  readonly port: number;
}

export type Validator<T> = (this: void, v: unknown) => LuaMultiReturn<[T | undefined, string | undefined]>;

/** A check of its own: the value given (or the declared default), and the options checked before it. */
export type Check = (this: void, v: unknown, out: LuaTable<string, unknown>) => LuaMultiReturn<[unknown, string | undefined]>;

/**
 * What an option needs of another one (of the same table) when it is given
 * and not idle. "set"/"true"/"positive": the other must be given, true, > 0;
 * "unset": the other must be absent ("db is refused with cluster").
 */
export interface Rule {
  readonly option: string;
  readonly must: "set" | "unset" | "true" | "positive";
  /** Why a refusal: the user should not have to guess. */
  readonly why?: string;
  /** The options that share this rule, named together in one message (ssl_verify and server_name). */
  readonly shared?: string[];
}

interface Common {
  readonly name: string;
  /** Checked even when absent: the message then says "got nil". */
  readonly required?: boolean;
  /** Never shown in a message, not even mistyped (a password): only its type is. */
  readonly secret?: boolean;
  /** A value that asks for nothing, so `requires` does not apply to it (db = 0, ssl_verify = false). */
  readonly idle?: number | boolean;
  /** Options refused beside this one: "<this> excludes <other>, got <other's value>". */
  readonly excludes?: string[];
  /** The excluded options make one thing (host and port): named together, and this option's value shown. */
  readonly excludesAsOne?: boolean;
  readonly requires?: Rule[];
  /** The modes (of a gateway guard) it applies to; every mode when absent (see schema/modes.ts). */
  readonly modes?: string[];
  /** Modes it does not apply to, each with why: "renew does not apply to mode throttle (<why>)". */
  readonly notFor?: { readonly [mode: string]: string };
  /** The default as the README states it, where it is not a plain value: "the factory's `ttl`", "`<mode>#<n>`". */
  readonly doc?: string;
}

export interface IntegerSpec extends Common {
  readonly kind: "integer";
  readonly min: number;
  readonly max: number;
  /** Ends "must be ...": "a positive integer of ms". */
  readonly unit: string;
  readonly default?: number;
}

export interface StringSpec extends Common {
  readonly kind: "string";
  /** Non-empty and at most this many bytes; without it any string will do (a password is Redis's to judge). */
  readonly maxLen?: number;
  /** "" is a value of its own (no prefix at all), not an empty name. */
  readonly empty?: boolean;
  /** How it must start: "unix:" tells a socket path from a host name. */
  readonly prefix?: string;
  /** A host: a name or an IP address, nothing more (hostLike). */
  readonly host?: boolean;
  readonly default?: string;
}

export interface BooleanSpec extends Common {
  readonly kind: "boolean";
  readonly default?: boolean;
}

/** One of a few strings. */
export interface EnumSpec extends Common {
  readonly kind: "enum";
  readonly values: string[];
  /** Ends "must be ...", where the values alone do not say enough: "\"allow\" (fail open) or \"deny\" (fail closed)". */
  readonly unit?: string;
  readonly default?: string;
}

export interface FunctionSpec extends Common {
  readonly kind: "function";
}

/** A non-empty list of "host:port" or "[v6]:port" strings, at least `min` of them. */
export interface NodesSpec extends Common {
  readonly kind: "nodes";
  readonly min?: number;
  /** Ends "needs at least <min> ...": "independent masters". */
  readonly unit?: string;
}

/** A nested option table, checked by its own validator (a compiled schema, or a parser built on one). */
export interface TableSpec extends Common {
  readonly kind: "table";
  readonly table: Validator<unknown>;
}

/**
 * A value only code can judge (a key template, a lua_shared_dict by name):
 * `check` gets the value, or the default when it is absent, and hands back
 * what the caller uses (a compiled template, the dict itself).
 */
export interface CheckSpec extends Common {
  readonly kind: "check";
  readonly check: Check;
  readonly default?: unknown;
}

export type Spec = IntegerSpec | StringSpec | BooleanSpec | EnumSpec | FunctionSpec | NodesSpec | TableSpec | CheckSpec;

/** An option ready to check: its spec, and what its messages say. */
export interface Option {
  readonly spec: Spec;
  /** "redis.port": every message names the option by its full path. */
  readonly label: string;
  readonly default: unknown;
  /** "must be ..." of an enum: its values, quoted, or its own unit. */
  readonly unit: string;
}

/** "a", "a or b", "a, b or c". */
function listed(names: string[], last: string): string {
  const n = names.length;
  if (n === 1) return names[0]!;
  const head: string[] = [];
  for (const i of $range(1, n - 1)) head.push(names[i - 1]!);
  return concat(head, ", ") + " " + last + " " + names[n - 1]!;
}

export function option(spec: Spec, label: string): Option {
  let unit = "";
  if (spec.kind === "enum") {
    const quoted: string[] = [];
    for (const [_, v] of lua_ipairs(spec.values)) quoted.push("\"" + v + "\"");
    unit = spec.unit ?? listed(quoted, "or");
  }
  return { spec, label, default: (spec as { default?: unknown }).default, unit };
}

/** What an absent option table validates as: read, never written. */
export const NONE = new LuaTable<AnyNotNil, unknown>();

/** A misspelt name is an error, never a silently ignored option: the name of the first unknown key, if any. */
export function stranger<V>(given: LuaTable<AnyNotNil, unknown>, byName: LuaTable<string, V>,
  elsewhere: LuaTable<string, string> | undefined): LuaMultiReturn<[boolean, unknown]> {
  for (const [k] of lua_pairs(given)) {
    if (lua_type(k) !== "string" || (!byName.has(k as string) && (elsewhere === undefined || !elsewhere.has(k as string)))) {
      return $multi(true, k);
    }
  }
  return $multi(false, undefined);
}


function nodes(o: Option, spec: NodesSpec, list: unknown): LuaMultiReturn<[Node[] | undefined, string | undefined]> {
  if (lua_type(list) !== "table" || (list as unknown[]).length === 0 || !check.isList(list as LuaTable<AnyNotNil, unknown>)) {
    return check.fail(o.label + " must be a list of \"host:port\" strings", list);
  }
  const out: Node[] = [];
  const given = list as unknown[];
  for (const i of $range(1, given.length)) {
    const [n, err] = node(o.label, given[i - 1]);
    if (n === undefined) return $multi(undefined, err);
    out.push(n);
  }
  if (spec.min !== undefined && out.length < spec.min) {
    return check.fail(o.label + " needs at least " + lua_tostring(spec.min) + " " + (spec.unit ?? "nodes"), out.length);
  }
  return $multi(out, undefined);
}

function str(o: Option, spec: StringSpec, v: unknown): LuaMultiReturn<[unknown, string | undefined]> {
  if (lua_type(v) !== "string") return refuse(o.label + " must be a string", v, spec.secret === true);
  if (spec.maxLen === undefined || (v === "" && spec.empty === true)) return $multi(v, undefined);
  // Past the type check its messages show nothing of a secret but its length.
  const [s, err] = check.str(o.label, v, spec.maxLen);
  if (s === undefined) return $multi(undefined, err);
  if (spec.prefix !== undefined && str_sub(s, 1, spec.prefix.length) !== spec.prefix) {
    return refuse(o.label + " must start with " + str_format("%q", spec.prefix), s, spec.secret === true);
  }
  if (spec.prefix !== undefined && s.length === spec.prefix.length) {
    return refuse(o.label + " names nothing after " + str_format("%q", spec.prefix), s, spec.secret === true);
  }
  if (spec.host === true && !hostLike(s)) {
    // A URL with credentials is not shown.
    return refuse(o.label + " must be a host name or an IP address (no port, scheme or credentials)", s, str_find(s, "@", 1, true)[0] !== undefined);
  }
  return $multi(s, undefined);
}

/** One value (the given one, or the default of a check), checked against its spec; `out`: the options checked before it. */
export function value(o: Option, v: unknown, out: LuaTable<string, unknown>): LuaMultiReturn<[unknown, string | undefined]> {
  const spec = o.spec;
  if (spec.kind === "integer") {
    return check.integer(o.label, v, spec.min, spec.max, spec.unit);
  } else if (spec.kind === "string") {
    return str(o, spec, v);
  } else if (spec.kind === "boolean") {
    return check.bool(o.label, v);
  } else if (spec.kind === "enum") {
    if (lua_type(v) === "string") {
      for (const i of $range(1, spec.values.length)) {
        if (spec.values[i - 1] === v) return $multi(v, undefined);
      }
    }
    return check.fail(o.label + " must be " + o.unit, v);
  } else if (spec.kind === "function") {
    if (lua_type(v) !== "function") return check.fail(o.label + " must be a function", v);
    return $multi(v, undefined);
  } else if (spec.kind === "nodes") {
    return nodes(o, spec, v);
  } else if (spec.kind === "check") {
    return spec.check(v, out);
  }
  return spec.table(v);
}

// Exported by name: this module's own uses of them are locals, not lookups in its exports table.
export { listed, refuse };
