// Input validation shared by every public entry point. Each checker returns
// `value, nil` or `nil, "dlock: <what is wrong>, got <value>"`, so callers can
// hand the error straight back to the Lua user.

/** tostring that cannot raise: a __tostring that fails or returns no string gives the type. */
export function text(v: unknown): string {
  const [ok, s] = pcall(tostring, v);
  return ok && type(s) === "string" ? s : "a " + type(v);
}

/**
 * An error of ours without its "dlock: " prefix, for a log line that already
 * starts with one ("dlock: guard jobs: redis ...", not "dlock: guard jobs: dlock: redis ...").
 */
export function reason(err: unknown): string {
  const s = text(err);
  return string.sub(s, 1, 7) === "dlock: " ? string.sub(s, 8) : s;
}

/** Render any Lua value for an error message, bounded and printable. */
export function show(v: unknown): string {
  const t = type(v);
  if (t === "string") {
    const s = v as string;
    const cut = s.length > 40 ? string.sub(s, 1, 40) + "..." : s;
    return string.format("%q", cut);
  }
  if (t === "number" && v !== v) {
    return "nan";
  }
  if (t === "table" || t === "userdata" || t === "function" || t === "thread") {
    return "a " + t;
  }
  return text(v);
}

export function fail(what: string, v: unknown): LuaMultiReturn<[undefined, string]> {
  return $multi(undefined, "dlock: " + what + ", got " + show(v));
}

/** fail() for a secret: its type, never its value, not even a mistyped one. */
export function hidden(what: string, v: unknown): LuaMultiReturn<[undefined, string]> {
  return $multi(undefined, "dlock: " + what + ", got a " + type(v));
}

/** Integer in [min, max]; `unit` finishes the sentence ("a positive integer of ms"). */
export function integer(name: string, v: unknown, min: number, max: number, unit: string): LuaMultiReturn<[number | undefined, string | undefined]> {
  if (type(v) !== "number") {
    return fail(name + " must be " + unit, v);
  }
  const n = v as number;
  // NaN fails every comparison, +/-inf fails the floor test or the bounds.
  if (n !== n || n !== math.floor(n) || n < min) {
    return fail(name + " must be " + unit, v);
  }
  if (n > max) {
    return fail(name + " must be at most " + max, v);
  }
  return $multi(n, undefined);
}

export function str(name: string, v: unknown, maxLen: number): LuaMultiReturn<[string | undefined, string | undefined]> {
  if (type(v) !== "string") {
    return fail(name + " must be a string", v);
  }
  const s = v as string;
  if (s.length === 0) {
    return fail(name + " must not be empty", v);
  }
  if (s.length > maxLen) {
    return $multi(undefined, "dlock: " + name + " must be at most " + maxLen + " bytes, got " + s.length + " bytes");
  }
  return $multi(s, undefined);
}

/** A lua_shared_dict by name (the `dict` option of every factory). */
export function sharedDict(v: unknown): LuaMultiReturn<[NgxSharedDict | undefined, string | undefined]> {
  const [name, err] = str("dict", v, 256);
  if (name === undefined) return $multi(undefined, err);
  const dict = ngx.shared.get(name);
  if (dict === undefined) {
    return fail("no lua_shared_dict named " + name + " (declare it in nginx.conf)", name);
  }
  return $multi(dict, undefined);
}

export function bool(name: string, v: unknown): LuaMultiReturn<[boolean | undefined, string | undefined]> {
  if (type(v) !== "boolean") {
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
  if (type(v) !== "table") {
    return fail(name + " must be a table", v);
  }
  const t = v as LuaTable<AnyNotNil, unknown>;
  for (const [k] of pairs(t)) {
    if (type(k) !== "string" || !allowed.has(k as string)) {
      return fail("unknown option in " + name, k);
    }
  }
  return $multi(t as unknown as LuaTable<string, unknown>, undefined);
}

function loadNkeys(this: void): ((this: void, t: LuaTable<AnyNotNil, unknown>) => number) | undefined {
  const [ok, f] = pcall(require, "table.nkeys");
  return ok && type(f) === "function" ? f as (this: void, t: LuaTable<AnyNotNil, unknown>) => number : undefined;
}
// OpenResty's LuaJIT counts a table's entries without a loop (and compiles the call).
const nkeys = loadNkeys();

/**
 * For a hot path that read its options by name: nil when the table t holds
 * those `found` options and nothing else, else the error options() gives.
 * Counting instead of walking the table keeps the caller loop-free: LuaJIT
 * will not compile a function whose trace runs into a loop (a root trace
 * cannot hold an inner one), and the acquire path ran interpreted for it.
 */
export function onlyKnown(name: string, t: LuaTable<string, unknown>, found: number, allowed: LuaSet<string>): string | undefined {
  if (nkeys !== undefined && nkeys(t as unknown as LuaTable<AnyNotNil, unknown>) === found) return undefined;
  const [, err] = options(name, t, allowed);
  return err;
}

/** Whether the Lua pattern matches somewhere in s. */
export function found(s: string, pattern: string): boolean {
  const [at] = string.find(s, pattern);
  return at !== undefined;
}

export function set(...names: string[]): LuaSet<string> {
  const s = new LuaSet<string>();
  for (const n of names) {
    s.add(n);
  }
  return s;
}
