// Key templates of the gateway guards: "$http_idempotency_key",
// "tenant:$remote_addr:$uri" (nginx variables and literals), or a Lua function.
// A key that cannot be computed is never taken for a missing one (that would let
// the request through unguarded): value() tells the two apart, and what goes
// wrong is logged per guard and worker at most once an interval, never per request.

import * as check from "../core/check";
import * as vars from "./vars";
import * as clock from "../core/clock";
import * as quiet from "../core/quiet";

const ngx_log = ngx.log;
const ERR = ngx.ERR;
const WARN = ngx.WARN;
const clock_now = clock.now;
const quiet_make = quiet.make;
const quiet_due = quiet.due;
const var_get = vars.get;
const math_floor = math.floor;
const str_find = string.find;
const str_sub = string.sub;
const lua_type = type;
const lua_tostring = tostring;
const lua_pcall = pcall;

export type KeyFn = (this: void) => unknown;

/** A compiled key: literal parts and nginx variable names alternating (literal first), or a function. */
export interface Template {
  readonly parts: LuaTable<number, string> | undefined;
  readonly keyFn: KeyFn | undefined;
  /** The variable's name when the template is that one variable alone ("$request_id"), the usual case. */
  readonly only: string | undefined;
  /** What the operator wrote, for log lines: the template, or "a function". */
  readonly source: string;
}

/** Seconds between two log lines of one guard about its keys (per worker). Settable for tests. */
const settings = { interval: 60 };

/**
 * Split "$remote_addr:$uri" into { "", "remote_addr", ":", "uri" }: literal,
 * var, literal, var... As nginx reads its own templates: "${arg_org}-x" where a
 * name runs into what follows, and a "$" that starts no name is an error.
 */
function split(name: string, tpl: string): LuaMultiReturn<[LuaTable<number, string> | undefined, string | undefined]> {
  const parts = new LuaTable<number, string>();
  let pos = 1;
  let n = 0;
  while (true) {
    const [s] = str_find(tpl, "$", pos, true);
    if (s === undefined) break;
    let [_, e, v] = str_find(tpl, "^([%a_][%w_]*)", s + 1);
    if (v === undefined) [_, e, v] = str_find(tpl, "^{([%a_][%w_]*)}", s + 1);
    if (v === undefined) return check.fail(name + ": a \"$\" must start a variable name ($name or ${name})", tpl);
    parts.set(n + 1, str_sub(tpl, pos, s - 1));
    parts.set(n + 2, v as string);
    n += 2;
    pos = e! + 1;
  }
  if (n === 0) {
    return check.fail(name + " must name at least one nginx variable ($http_x, $arg_x, $remote_addr...) or be a function", tpl);
  }
  parts.set(n + 1, str_sub(tpl, pos));
  return $multi(parts, undefined);
}

/** Compile option `name` (a template string or a function). */
export function compile(name: string, v: unknown): LuaMultiReturn<[Template | undefined, string | undefined]> {
  if (lua_type(v) === "function") {
    return $multi({ parts: undefined, keyFn: v as KeyFn, only: undefined, source: "a function" }, undefined);
  }
  if (lua_type(v) === "string") {
    const [p, err] = split(name, v as string);
    if (p === undefined) return $multi(undefined, err);
    const only = p.length() === 3 && p.get(1) === "" && p.get(3) === "" ? p.get(2) : undefined;
    return $multi({ parts: p, keyFn: undefined, only, source: v as string }, undefined);
  }
  return check.fail(name + " must be a string of nginx variables (\"$http_idempotency_key\") or a function", v);
}

/**
 * The request's value of t: the key; or nil when it is missing (a variable
 * missing or empty, the function returned nil or ""); or nil and what went
 * wrong when it cannot be computed (the function raised or returned a non-string).
 */
export function value(t: Template): LuaMultiReturn<[string | undefined, string | undefined]> {
  if (t.keyFn !== undefined) {
    const [ok, v] = lua_pcall(t.keyFn);
    if (!ok) return $multi(undefined, "the key function raised: " + lua_tostring(v));
    if (v === undefined || v === "") return $multi(undefined, undefined);
    if (lua_type(v) !== "string") return $multi(undefined, "the key function returned a " + lua_type(v) + ", not a string");
    return $multi(v as string, undefined);
  }
  const only = t.only;
  if (only !== undefined) {
    // The variable's own string, without a loop and a concatenation that makes it again.
    const v = var_get(only);
    if (v === undefined || v === "") return $multi(undefined, undefined);
    return $multi(v, undefined);
  }
  const parts = t.parts!;
  let out = parts.get(1);
  for (const i of $range(2, parts.length(), 2)) {
    const v = var_get(parts.get(i));
    if (v === undefined || v === "") {
      return $multi(undefined, undefined);
    }
    out = out + v + parts.get(i + 1);
  }
  return $multi(out, undefined);
}

/** Per guard and worker: what its keys looked like since `since`, and its line about keys that could not be computed. */
interface Seen {
  since: number;
  present: number;
  missing: number;
  failed: quiet.Quiet;
}
const seen = new LuaTable<string, Seen>();

function state(guard: string): Seen {
  let s = seen.get(guard);
  if (s === undefined) {
    s = { since: clock_now(), present: 0, missing: 0, failed: quiet_make() };
    seen.set(guard, s);
  }
  return s;
}

/** What note() needs of a guard. */
export interface Noting {
  readonly name: string;
  readonly _onMissing: "pass" | "reject";
  /** What was done with requests without a key, for the line below. */
  readonly _missingWhat: string;
}

/**
 * Count a request with (present) or without its key. Once an interval, a guard
 * that saw its key on none of its requests says so: a misspelt variable would
 * otherwise leave every request unguarded without a word. At warn when such
 * requests pass (on_missing = "pass": clients that send no optional header are
 * normal operation), at error when every one of them was refused.
 */
export function note(g: Noting, t: Template, present: boolean): void {
  const guard = g.name;
  const s = state(guard);
  const now = clock_now();
  if (now - s.since >= settings.interval) {
    if (s.present === 0 && s.missing > 0) {
      ngx_log(g._onMissing === "reject" ? ERR : WARN, "dlock: guard ", guard, ": the key (", t.source,
        ") was missing on all ", s.missing, " requests of the last ", math_floor(now - s.since),
        " s in this worker; they were ", g._missingWhat);
    }
    s.since = now;
    s.present = 0;
    s.missing = 0;
  }
  if (present) {
    s.present++;
  } else {
    s.missing++;
  }
}

/** A key that could not be computed: logged at once, then at most once an interval with the count. */
export function failed(guard: string, problem: string, what: string): void {
  const n = quiet_due(state(guard).failed, settings.interval);
  if (n === 0) return;
  ngx_log(ERR, "dlock: guard ", guard, ": no key: ", problem, " (", n,
    n === 1 ? " request" : " requests", " since the last such line in this worker; ", what, ")");
}

// Exported by name: this module's own uses of them are locals, not lookups in its exports table.
export { settings };
