// Declarative option tables. A schema lists each option once (its kind, bounds,
// default, what it excludes or needs) and is compiled at module load; the
// validator it gives checks a user's table in one pass and hands back a fresh
// table with the defaults filled in, or nil and "dlock: <message naming the
// option>". Messages are built only when something is wrong, so a valid table
// costs its result and nothing else.

import * as check from "./check";

export interface Node {
  readonly host: string;
  readonly port: number;
}

export type Validator<T> = (this: void, v: unknown) => LuaMultiReturn<[T | undefined, string | undefined]>;

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
  /** How it must start: "unix:" tells a socket path from a host name. */
  readonly prefix?: string;
  readonly default?: string;
}

export interface BooleanSpec extends Common {
  readonly kind: "boolean";
  readonly default?: boolean;
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

export type Spec = IntegerSpec | StringSpec | BooleanSpec | NodesSpec | TableSpec;

interface Exclusion {
  readonly option: string;
  readonly message: string;
  /** Show this option's value (excludesAsOne), not the excluded one's. */
  readonly own: boolean;
  readonly secret: boolean;
}

interface Requirement {
  readonly rule: Rule;
  readonly message: string;
  /** Whether the message ends with the value: it does where the value is what is refused. */
  readonly show: boolean;
}

interface Option {
  readonly spec: Spec;
  /** "redis.port": every message names the option by its full path. */
  readonly label: string;
  readonly default: unknown;
  readonly excludes: Exclusion[];
  readonly requires: Requirement[];
}

interface Schema {
  readonly path: string;
  readonly options: Option[];
  readonly byName: LuaTable<string, Option>;
}

/** What an absent option table validates as: read, never written. */
const NONE = new LuaTable<AnyNotNil, unknown>();

/** "dlock: <what>, got <v>", or only v's type when v is a secret. */
function refuse(what: string, v: unknown, secret: boolean): LuaMultiReturn<[undefined, string]> {
  if (secret) return check.hidden(what, v);
  return check.fail(what, v);
}

/** The port whose digits run from `at` to the end of s: read in place, a substring would be garbage. */
function port(s: string, at: number): number | undefined {
  let p = 0;
  for (const i of $range(at, s.length)) {
    p = p * 10 + string.byte(s, i) - 48;
    if (p > 65535) return undefined;
  }
  return p >= 1 ? p : undefined;
}

/** "host:port" or "[v6]:port"; `label` names the list it came from. */
export function node(label: string, v: unknown): LuaMultiReturn<[Node | undefined, string | undefined]> {
  if (type(v) !== "string") return check.fail(label + " must be \"host:port\" strings", v);
  // The () captures are positions: numbers, where the port digits start.
  let [host, at] = string.match(v as string, "^%[([%x:%.]+)%]:()%d+$");
  if (host === undefined) {
    [host, at] = string.match(v as string, "^([%w%.%-_]+):()%d+$");
  }
  if (host === undefined) return check.fail(label + " must be \"host:port\" strings", v);
  const p = port(v as string, at as unknown as number);
  if (p === undefined) return check.fail(label + " must be \"host:port\" strings", v);
  return $multi({ host, port: p }, undefined);
}

function nodes(o: Option, spec: NodesSpec, list: unknown): LuaMultiReturn<[Node[] | undefined, string | undefined]> {
  if (type(list) !== "table" || (list as unknown[]).length === 0) {
    return check.fail(o.label + " must be a list of \"host:port\" strings", list);
  }
  const out: Node[] = [];
  for (const v of list as unknown[]) {
    const [n, err] = node(o.label, v);
    if (n === undefined) return $multi(undefined, err);
    out.push(n);
  }
  if (spec.min !== undefined && out.length < spec.min) {
    return check.fail(o.label + " needs at least " + spec.min + " " + (spec.unit ?? "nodes"), out.length);
  }
  return $multi(out, undefined);
}

/** One given value (or nil for a required option), checked against its spec. */
function value(o: Option, v: unknown): LuaMultiReturn<[unknown, string | undefined]> {
  const spec = o.spec;
  if (spec.kind === "integer") {
    return check.integer(o.label, v, spec.min, spec.max, spec.unit);
  } else if (spec.kind === "string") {
    if (type(v) !== "string") return refuse(o.label + " must be a string", v, spec.secret === true);
    if (spec.maxLen === undefined) return $multi(v, undefined);
    // Past the type check its messages show nothing of a secret but its length.
    const [s, err] = check.str(o.label, v, spec.maxLen);
    if (s === undefined) return $multi(undefined, err);
    if (spec.prefix !== undefined && string.sub(s, 1, spec.prefix.length) !== spec.prefix) {
      return refuse(o.label + " must start with " + string.format("%q", spec.prefix), s, spec.secret === true);
    }
    return $multi(s, undefined);
  } else if (spec.kind === "boolean") {
    return check.bool(o.label, v);
  } else if (spec.kind === "nodes") {
    return nodes(o, spec, v);
  }
  return spec.table(v);
}

/** Whether `other` (validated, defaults filled) is what `rule` needs of it. */
function met(rule: Rule, other: unknown): boolean {
  if (rule.must === "set") return other !== undefined;
  if (rule.must === "unset") return other === undefined;
  if (rule.must === "true") return other === true;
  return type(other) === "number" && (other as number) > 0;
}

function validate(s: Schema, v: unknown): LuaMultiReturn<[LuaTable<string, unknown> | undefined, string | undefined]> {
  let given = NONE;
  if (v !== undefined) {
    if (type(v) !== "table") return check.fail(s.path + " must be a table", v);
    given = v as LuaTable<AnyNotNil, unknown>;
  }
  // A misspelt name is an error, never a silently ignored option.
  for (const [k] of pairs(given)) {
    if (type(k) !== "string" || !s.byName.has(k as string)) {
      return check.fail("unknown option in " + s.path, k);
    }
  }
  // Exclusions first: a value is not worth checking beside one that rules it out.
  for (const o of s.options) {
    const mine = given.get(o.spec.name);
    if (mine !== undefined) {
      for (const x of o.excludes) {
        const theirs = given.get(x.option);
        if (theirs !== undefined) {
          if (x.own) return refuse(x.message, mine, o.spec.secret === true);
          return refuse(x.message, theirs, x.secret);
        }
      }
    }
  }
  const out = new LuaTable<string, unknown>();
  for (const o of s.options) {
    const v = given.get(o.spec.name);
    if (v === undefined && o.spec.required !== true) {
      out.set(o.spec.name, o.default);
    } else {
      const [x, err] = value(o, v);
      if (err !== undefined) return $multi(undefined, err);
      out.set(o.spec.name, x);
    }
  }
  // Rules last, on checked values: "replicas > 0" is a number by now. A default never trips one.
  for (const o of s.options) {
    const x = out.get(o.spec.name);
    if (given.get(o.spec.name) !== undefined && x !== o.spec.idle) {
      for (const r of o.requires) {
        if (!met(r.rule, out.get(r.rule.option))) {
          if (r.show) return refuse(r.message, x, o.spec.secret === true);
          return $multi(undefined, "dlock: " + r.message);
        }
      }
    }
  }
  return $multi(out, undefined);
}

/** The spec of `other`, which `name` refers to: a typo in a schema raises at module load. */
function known(path: string, specs: LuaTable<string, Spec>, name: string, other: string): Spec {
  const spec = specs.get(other);
  if (spec === undefined) {
    error("dlock: schema " + path + ": " + name + " refers to no option " + other);
  }
  return spec;
}

function requirement(path: string, specs: LuaTable<string, Spec>, spec: Spec, rule: Rule): Requirement {
  known(path, specs, spec.name, rule.option);
  const label = path + "." + spec.name;
  const other = path + "." + rule.option;
  if (rule.must === "unset") {
    const why = rule.why !== undefined ? " (" + rule.why + ")" : "";
    return { rule, message: label + " is refused with " + other + why, show: true };
  }
  let subject = label + " needs ";
  if (rule.shared !== undefined) {
    const names: string[] = [];
    for (const n of rule.shared) {
      known(path, specs, spec.name, n);
      names.push(path + "." + n);
    }
    subject = table.concat(names, " and ") + " need ";
  }
  // The value is fine in itself here (it is the other option that is missing or off),
  // except beside a number the other one must exceed.
  if (rule.must === "set") return { rule, message: subject + other, show: false };
  if (rule.must === "true") return { rule, message: subject + other + " = true", show: false };
  return { rule, message: subject + other + " > 0", show: true };
}

function exclusions(path: string, specs: LuaTable<string, Spec>, spec: Spec): Exclusion[] {
  const list: Exclusion[] = [];
  if (spec.excludes === undefined) return list;
  const label = path + "." + spec.name;
  const labels: string[] = [];
  for (const n of spec.excludes) labels.push(path + "." + n);
  const together = label + " excludes " + table.concat(labels, " and ");
  const asOne = spec.excludesAsOne === true;
  for (const n of spec.excludes) {
    const other = known(path, specs, spec.name, n);
    const message = asOne ? together : label + " excludes " + path + "." + n;
    list.push({ option: n, message, own: asOne, secret: other.secret === true });
  }
  return list;
}

/**
 * A validator for the option table named `path` ("redis", "redis.cluster").
 * Options are checked, and their errors reported, in the order given.
 * A spec that names an option the schema lacks raises here, at module load.
 */
export function compile<T>(path: string, specs: Spec[]): Validator<T> {
  const byName = new LuaTable<string, Spec>();
  for (const spec of specs) byName.set(spec.name, spec);
  const options: Option[] = [];
  const index = new LuaTable<string, Option>();
  for (const spec of specs) {
    const requires: Requirement[] = [];
    if (spec.requires !== undefined) {
      for (const r of spec.requires) requires.push(requirement(path, byName, spec, r));
    }
    const o: Option = {
      spec, label: path + "." + spec.name, default: (spec as { default?: unknown }).default,
      excludes: exclusions(path, byName, spec), requires,
    };
    options.push(o);
    index.set(spec.name, o);
  }
  const s: Schema = { path, options, byName: index };
  return (v: unknown) => validate(s, v) as LuaMultiReturn<[T | undefined, string | undefined]>;
}
