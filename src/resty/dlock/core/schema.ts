// Declarative option tables. A schema lists each option once (its kind, bounds,
// default, what it excludes or needs, the modes it applies to) and is compiled
// at module load; the validator it gives checks a user's table in one pass and
// hands back a fresh table with the defaults filled in, or nil and
// "dlock: <message naming the option>". Messages are built only when something
// is wrong, so a valid table costs its result and nothing else. The kinds of
// option, and the checking of one value, are in schema/values.ts.

import * as check from "./check";
import * as values from "./schema/values";
import * as hosts from "./schema/hosts";

export type {
  Node, Validator, Check, Rule, Spec, IntegerSpec, StringSpec, BooleanSpec, EnumSpec, FunctionSpec, NodesSpec, TableSpec, CheckSpec,
} from "./schema/values";
export const node = hosts.node;
export const literal = hosts.literal;
export const named = hosts.named;
type Spec = values.Spec;
type Rule = values.Rule;
type Option = values.Option;
type Validator<T> = values.Validator<T>;

const lua_type = type;
const str_find = string.find;
const lua_ipairs = ipairs;
const lua_error = error;
const concat = table.concat;
const value = values.value;
const refuse = values.refuse;

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

interface Compiled {
  readonly opt: Option;
  readonly spec: Spec;
  readonly excludes: Exclusion[];
  readonly requires: Requirement[];
}

interface Schema {
  readonly path: string;
  readonly options: Compiled[];
  readonly byName: LuaTable<string, Compiled>;
  /** Names this table refuses although they are options elsewhere (of another mode), each with why. */
  readonly elsewhere: Elsewhere[];
  readonly foreign: LuaTable<string, string> | undefined;
}

/** Whether `other` (validated, defaults filled) is what `rule` needs of it. */
function met(rule: Rule, other: unknown): boolean {
  if (rule.must === "set") return other !== undefined;
  if (rule.must === "unset") return other === undefined;
  if (rule.must === "true") return other === true;
  return lua_type(other) === "number" && (other as number) > 0;
}

function validate(s: Schema, v: unknown): LuaMultiReturn<[LuaTable<string, unknown> | undefined, string | undefined]> {
  let given = values.NONE;
  if (v !== undefined) {
    if (lua_type(v) !== "table") {
      // redis = "redis://:secret@host": the string is not shown.
      if (lua_type(v) === "string" && str_find(v as string, "@", 1, true)[0] !== undefined) {
        return check.hidden(s.path + " must be a table", v);
      }
      return check.fail(s.path + " must be a table", v);
    }
    given = v as LuaTable<AnyNotNil, unknown>;
  }
  const [odd, k] = values.stranger(given, s.byName, s.foreign);
  if (odd) return check.fail("unknown option in " + s.path, k);
  const options = s.options;
  const n = options.length;
  // Options of other modes next: "hold applies to mode dedup only" says more than hold's value would.
  for (const i of $range(1, s.elsewhere.length)) {
    const e = s.elsewhere[i - 1]!;
    const theirs = given.get(e.name);
    if (theirs !== undefined) return check.fail(e.why, theirs);
  }
  // Exclusions first: a value is not worth checking beside one that rules it out.
  for (const i of $range(1, n)) {
    const o = options[i - 1]!;
    const mine = given.get(o.spec.name);
    if (mine !== undefined) {
      for (const j of $range(1, o.excludes.length)) {
        const x = o.excludes[j - 1]!;
        const theirs = given.get(x.option);
        if (theirs !== undefined) {
          if (x.own) return refuse(x.message, mine, o.spec.secret === true);
          return refuse(x.message, theirs, x.secret);
        }
      }
    }
  }
  const out = new LuaTable<string, unknown>();
  for (const i of $range(1, n)) {
    const o = options[i - 1]!;
    const x = given.get(o.spec.name);
    // A check of its own sees every value, the default too: it may turn either into what the caller uses.
    if (x === undefined && o.spec.required !== true && o.spec.kind !== "check") {
      out.set(o.spec.name, o.opt.default);
    } else {
      let raw = x;
      if (raw === undefined) raw = o.opt.default;
      const [y, err] = value(o.opt, raw, out);
      if (err !== undefined) return $multi(undefined, err);
      out.set(o.spec.name, y);
    }
  }
  // Rules last, on checked values: "replicas > 0" is a number by now. A default never trips one.
  for (const i of $range(1, n)) {
    const o = options[i - 1]!;
    const x = out.get(o.spec.name);
    if (given.get(o.spec.name) !== undefined && x !== o.spec.idle) {
      for (const j of $range(1, o.requires.length)) {
        const r = o.requires[j - 1]!;
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
    lua_error("dlock: schema " + path + ": " + name + " refers to no option " + other);
  }
  return spec;
}

function requirement(path: string, labels: string, specs: LuaTable<string, Spec>, spec: Spec, rule: Rule): Requirement {
  known(path, specs, spec.name, rule.option);
  const label = labels + spec.name;
  const other = labels + rule.option;
  if (rule.must === "unset") {
    const why = rule.why !== undefined ? " (" + rule.why + ")" : "";
    return { rule, message: label + " is refused with " + other + why, show: true };
  }
  let subject = label + " needs ";
  if (rule.shared !== undefined) {
    const names: string[] = [];
    for (const [_, n] of lua_ipairs(rule.shared)) {
      known(path, specs, spec.name, n);
      names.push(labels + n);
    }
    subject = concat(names, " and ") + " need ";
  }
  // The value is fine in itself here (it is the other option that is missing or off),
  // except beside a number the other one must exceed.
  if (rule.must === "set") return { rule, message: subject + other, show: false };
  if (rule.must === "true") return { rule, message: subject + other + " = true", show: false };
  return { rule, message: subject + other + " > 0", show: true };
}

function exclusions(path: string, labels: string, specs: LuaTable<string, Spec>, spec: Spec): Exclusion[] {
  const list: Exclusion[] = [];
  if (spec.excludes === undefined) return list;
  const label = labels + spec.name;
  const names: string[] = [];
  for (const [_, n] of lua_ipairs(spec.excludes)) names.push(labels + n);
  const together = label + " excludes " + concat(names, " and ");
  const asOne = spec.excludesAsOne === true;
  for (const [_, n] of lua_ipairs(spec.excludes)) {
    const other = known(path, specs, spec.name, n);
    const message = asOne ? together : label + " excludes " + labels + n;
    list.push({ option: n, message, own: asOne, secret: other.secret === true });
  }
  return list;
}

/** An option of other modes, refused here. */
export interface Elsewhere {
  readonly name: string;
  /** "hold applies to mode dedup only, not mutex". */
  readonly why: string;
}

export interface How {
  /** What every option's name starts with in a message: "redis." (the default: path + "."), or "" for a factory's own options. */
  readonly labels?: string;
  /** Names refused here although they are options elsewhere, each with the message that says why. */
  readonly elsewhere?: Elsewhere[];
}

/**
 * A validator for the option table named `path` ("redis", "redis.cluster",
 * "dlock.new options"). Options are checked, and their errors reported, in
 * the order given. A spec that names an option the schema lacks raises here,
 * at module load.
 */
export function compile<T>(path: string, specs: Spec[], how?: How): Validator<T> {
  const labels = how?.labels ?? path + ".";
  const byName = new LuaTable<string, Spec>();
  for (const [_, spec] of lua_ipairs(specs)) {
    if (byName.has(spec.name)) lua_error("dlock: schema " + path + ": " + spec.name + " is declared twice");
    byName.set(spec.name, spec);
  }
  const options: Compiled[] = [];
  const index = new LuaTable<string, Compiled>();
  for (const [_, spec] of lua_ipairs(specs)) {
    const requires: Requirement[] = [];
    if (spec.requires !== undefined) {
      for (const [_, r] of lua_ipairs(spec.requires)) requires.push(requirement(path, labels, byName, spec, r));
    }
    const o: Compiled = {
      opt: values.option(spec, labels + spec.name), spec, excludes: exclusions(path, labels, byName, spec), requires,
    };
    options.push(o);
    index.set(spec.name, o);
  }
  const elsewhere = how?.elsewhere ?? [];
  let foreign: LuaTable<string, string> | undefined;
  for (const [_, e] of lua_ipairs(elsewhere)) {
    foreign ??= new LuaTable<string, string>();
    foreign.set(e.name, e.why);
  }
  const s: Schema = { path, options, byName: index, elsewhere, foreign };
  return (v: unknown) => validate(s, v) as LuaMultiReturn<[T | undefined, string | undefined]>;
}

/** The check of one option alone, for a hot path that reads its options by name (acquire, extend). */
export function one<T>(spec: Spec, label?: string): (this: void, v: unknown) => LuaMultiReturn<[T | undefined, string | undefined]> {
  const o = values.option(spec, label ?? spec.name);
  const out = new LuaTable<string, unknown>();
  return (v: unknown) => value(o, v, out) as LuaMultiReturn<[T | undefined, string | undefined]>;
}
