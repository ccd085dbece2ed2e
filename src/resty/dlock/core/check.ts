// Input validation shared by every public entry point. Each checker returns
// `value, nil` or `nil, "dlock: <what is wrong>, got <value>"`, so callers can
// hand the error straight back to the Lua user.

const lua_type = type;
const lua_pcall = pcall;
const lua_tostring = tostring;
const lua_pairs = pairs;
const lua_require = require;
const lua_getmetatable = getmetatable;
const str_sub = string.sub;
const str_format = string.format;
const str_find = string.find;
const str_gsub = string.gsub;
const math_floor = math.floor;
const shared = ngx.shared;

/** tostring that cannot raise: a __tostring that fails or returns no string gives the type. */
function text(v: unknown): string {
  const [ok, s] = lua_pcall(lua_tostring, v);
  return ok && lua_type(s) === "string" ? s : "a " + lua_type(v);
}

/**
 * An error of ours without its "dlock: " prefix, for a log line that already
 * starts with one ("dlock: guard jobs: redis ...", not "dlock: guard jobs: dlock: redis ...").
 */
export function reason(err: unknown): string {
  const s = text(err);
  return str_sub(s, 1, 7) === "dlock: " ? str_sub(s, 8) : s;
}

/** Render any Lua value for an error message, bounded and printable. */
function show(v: unknown): string {
  const t = lua_type(v);
  if (t === "string") {
    const s = v as string;
    const cut = s.length > 40 ? str_sub(s, 1, 40) + "..." : s;
    // %q writes a newline as a backslash and a real newline: an error message stays on one line.
    return str_gsub(str_format("%q", cut), "\\\n", "\\n")[0];
  }
  if (t === "number" && v !== v) {
    return "nan";
  }
  if (t === "table" || t === "userdata" || t === "function" || t === "thread") {
    return "a " + t;
  }
  return text(v);
}

function fail(what: string, v: unknown): LuaMultiReturn<[undefined, string]> {
  return $multi(undefined, "dlock: " + what + ", got " + show(v));
}

/**
 * nil when obj, a method's self, is an object of metatable mt; else why the
 * method was called without its object (a "." where ":" was meant), for its
 * nil, err. Never raises, whatever obj is (getmetatable of nil, a number or a string).
 */
export function notSelf(obj: unknown, mt: object, call: string): string | undefined {
  if (lua_getmetatable(obj as object) === mt) return undefined;
  return "dlock: " + call + " was called without its object (with \".\" where \":\" was meant), got " + show(obj);
}

/**
 * Is t a list: 1..n and nothing else? A value under another key (or past a
 * hole) would go unread, without a word.
 */
export function isList(t: LuaTable<AnyNotNil, unknown>): boolean {
  let n = 0;
  for (const [_] of lua_pairs(t)) n++;
  for (const i of $range(1, n)) {
    if (t.get(i) === undefined) return false;
  }
  return true;
}

/** fail() for a secret: its type, never its value, not even a mistyped one. */
export function hidden(what: string, v: unknown): LuaMultiReturn<[undefined, string]> {
  return $multi(undefined, "dlock: " + what + ", got a " + lua_type(v));
}

/** Integer in [min, max]; `unit` finishes the sentence ("a positive integer of ms"). */
export function integer(name: string, v: unknown, min: number, max: number, unit: string): LuaMultiReturn<[number | undefined, string | undefined]> {
  if (lua_type(v) !== "number") {
    return fail(name + " must be " + unit, v);
  }
  const n = v as number;
  // NaN fails every comparison, +/-inf fails the floor test or the bounds.
  if (n !== n || n !== math_floor(n) || n < min) {
    return fail(name + " must be " + unit, v);
  }
  if (n > max) {
    return fail(name + " must be at most " + lua_tostring(max), v);
  }
  return $multi(n, undefined);
}

function str(name: string, v: unknown, maxLen: number): LuaMultiReturn<[string | undefined, string | undefined]> {
  if (lua_type(v) !== "string") {
    return fail(name + " must be a string", v);
  }
  const s = v as string;
  if (s.length === 0) {
    return fail(name + " must not be empty", v);
  }
  if (s.length > maxLen) {
    return $multi(undefined, "dlock: " + name + " must be at most " + lua_tostring(maxLen) + " bytes, got " + lua_tostring(s.length) + " bytes");
  }
  return $multi(s, undefined);
}

/** A lua_shared_dict by name (the `dict` option of every factory). */
export function sharedDict(v: unknown): LuaMultiReturn<[NgxSharedDict | undefined, string | undefined]> {
  const [name, err] = str("dict", v, 256);
  if (name === undefined) return $multi(undefined, err);
  const dict = shared.get(name);
  if (dict === undefined) {
    return fail("no lua_shared_dict named " + name + " (declare it in nginx.conf)", name);
  }
  return $multi(dict, undefined);
}

export function bool(name: string, v: unknown): LuaMultiReturn<[boolean | undefined, string | undefined]> {
  if (lua_type(v) !== "boolean") {
    return fail(name + " must be a boolean", v);
  }
  return $multi(v as boolean, undefined);
}

/**
 * An options table: nil is an empty table; anything else must be a table whose
 * keys are all in `allowed`, so a typo ("ttl_ms", "wiat") is an error, never ignored.
 */
export function options(name: string, v: unknown, allowed: LuaSet<string>): LuaMultiReturn<[LuaTable<string, unknown> | undefined, string | undefined]> {
  if (v === undefined) {
    return $multi(new LuaTable<string, unknown>(), undefined);
  }
  if (lua_type(v) !== "table") {
    return fail(name + " must be a table", v);
  }
  const t = v as LuaTable<AnyNotNil, unknown>;
  for (const [k] of lua_pairs(t)) {
    if (lua_type(k) !== "string" || !allowed.has(k as string)) {
      return fail("unknown option in " + name, k);
    }
  }
  return $multi(t as unknown as LuaTable<string, unknown>, undefined);
}

function loadNkeys(this: void): ((this: void, t: LuaTable<AnyNotNil, unknown>) => number) | undefined {
  const [ok, f] = lua_pcall(lua_require, "table.nkeys");
  return ok && lua_type(f) === "function" ? f as (this: void, t: LuaTable<AnyNotNil, unknown>) => number : undefined;
}
// OpenResty's LuaJIT counts a table's entries without a loop (and compiles the
// call): how a hot path checks that a table holds the options it read by name
// and nothing else (core/options.ts acquire).
export const nkeys = loadNkeys();

/** Whether the Lua pattern matches somewhere in s. */
export function found(s: string, pattern: string): boolean {
  const [at] = str_find(s, pattern);
  return at !== undefined;
}

export function set(...names: string[]): LuaSet<string> {
  const s = new LuaSet<string>();
  for (const i of $range(1, names.length)) s.add(names[i - 1]!);
  return s;
}

// Exported by name: this module's own uses of them are locals, not lookups in its exports table.
export { fail, show, str, text };
