// Tables whose options depend on a mode (a gateway guard's `mode`): one
// schema per mode, made of the options that apply to it, in which those of
// the other modes are refused by name, with why.

import * as check from "../check";
import * as schema from "../schema";
import * as values from "./values";

const lua_type = type;
const lua_ipairs = ipairs;
const lua_error = error;
const lua_pairs = pairs;

type Spec = values.Spec;

/** A mode of a table that takes several (a gateway guard's `mode`). */
export interface Mode {
  readonly name: string;
  /**
   * A mode of its own (idempotency): it refuses the options of the others as
   * "<option> does not apply to mode <it>", and the others name it only for
   * options no other mode takes.
   */
  readonly apart?: boolean;
}

/** Whether `spec` applies to mode `mode`. */
function applies(spec: Spec, mode: string): boolean {
  if (spec.notFor !== undefined && spec.notFor[mode] !== undefined) return false;
  if (spec.modes === undefined) return true;
  for (const [_, m] of lua_ipairs(spec.modes)) {
    if (m === mode) return true;
  }
  return false;
}

/** Why `name`, an option of other modes, is refused in `mode`. */
function refusal(name: string, mode: Mode, list: Mode[], specs: Spec[]): string {
  if (mode.apart === true) return name + " does not apply to mode " + mode.name;
  for (const [_, s] of lua_ipairs(specs)) {
    const why = s.notFor && s.notFor[mode.name];
    if (s.name === name && why !== undefined) return name + " does not apply to mode " + mode.name + " (" + why + ")";
  }
  const taking: string[] = [];
  const apart: string[] = [];
  for (const [_, m] of lua_ipairs(list)) {
    for (const [_, s] of lua_ipairs(specs)) {
      if (s.name === name && applies(s, m.name)) {
        const into = m.apart === true ? apart : taking;
        into.push(m.name);
        break;
      }
    }
  }
  const named = taking.length > 0 ? taking : apart;
  return name + " applies to mode" + (named.length > 1 ? "s " : " ") + values.listed(named, "and") + " only, not " + mode.name;
}

/**
 * One validator for a table whose option `option` picks one of `list`: each
 * mode is a schema of the specs that apply to it (`modes`, `notFor`), in
 * which the options of the other modes are refused by name. A new mode is a
 * line in `list`, and `modes` entries on the options it takes.
 */
export function modes<T>(path: string, option: string, list: Mode[], specs: Spec[]): values.Validator<T> {
  const all = new LuaTable<string, boolean>();
  let picker: Spec | undefined;
  for (const [_, s] of lua_ipairs(specs)) {
    all.set(s.name, true);
    if (s.name === option) picker = s;
  }
  if (picker === undefined) lua_error("dlock: schema " + path + ": no option " + option + " picks the mode");
  const byMode = new LuaTable<string, values.Validator<T>>();
  for (const [_, m] of lua_ipairs(list)) {
    const mine: Spec[] = [];
    const names = new LuaTable<string, boolean>();
    for (const [_, s] of lua_ipairs(specs)) {
      if (applies(s, m.name)) {
        mine.push(s);
        names.set(s.name, true);
      }
    }
    const elsewhere: schema.Elsewhere[] = [];
    for (const [_, s] of lua_ipairs(specs)) {
      if (!names.has(s.name)) {
        names.set(s.name, true);
        elsewhere.push({ name: s.name, why: refusal(s.name, m, list, specs) });
      }
    }
    byMode.set(m.name, schema.compile<T>(path, mine, { labels: "", elsewhere }));
  }
  const pick = values.option(picker!, option);
  const out = new LuaTable<string, unknown>();
  return (v: unknown) => {
    if (lua_type(v) === "table") {
      const which = byMode.get((v as LuaTable<string, string>).get(option));
      if (which !== undefined) return which(v);
    } else if (v !== undefined) {
      return check.fail(path + " must be a table", v);
    }
    // No mode to go by: a misspelt name is still the first thing to say, then the mode.
    const given = (v === undefined ? values.NONE : v) as LuaTable<AnyNotNil, unknown>;
    const [odd, k] = values.stranger(given, all, undefined);
    if (odd) return check.fail("unknown option in " + path, k);
    return values.value(pick, given.get(option), out) as LuaMultiReturn<[undefined, string]>;
  };
}

/** `spec` (shared with another table) for some modes only: a copy, made at load time. */
export function only<S extends Spec>(spec: S, list: string[]): S {
  const copy = new LuaTable<string, unknown>();
  for (const [k, v] of lua_pairs(spec as unknown as LuaTable<string, unknown>)) copy.set(k, v);
  copy.set("modes", list);
  return copy as unknown as S;
}

// Exported by name: this module's own uses of them are locals, not lookups in its exports table.
export { applies };
