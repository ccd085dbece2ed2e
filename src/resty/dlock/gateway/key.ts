// Key templates of the gateway guards: "$http_idempotency_key",
// "tenant:$remote_addr:$uri" (nginx variables and literals), or a Lua function.

import * as check from "../check";

export type KeyFn = (this: void) => unknown;

/** A compiled key: literal parts and nginx variable names alternating (literal first), or a function. */
export interface Template {
  readonly parts: LuaTable<number, string> | undefined;
  readonly keyFn: KeyFn | undefined;
}

/** Split "$remote_addr:$uri" into { "", "remote_addr", ":", "uri" }: literal, var, literal, var... */
function split(name: string, tpl: string): LuaMultiReturn<[LuaTable<number, string> | undefined, string | undefined]> {
  const parts = new LuaTable<number, string>();
  let pos = 1;
  let n = 0;
  while (true) {
    const [s, e, v] = string.find(tpl, "%$([%a_][%w_]*)", pos);
    if (s === undefined) break;
    parts.set(n + 1, string.sub(tpl, pos, s - 1));
    parts.set(n + 2, v as string);
    n += 2;
    pos = e! + 1;
  }
  if (n === 0) {
    return check.fail(name + " must name at least one nginx variable ($http_x, $arg_x, $remote_addr...) or be a function", tpl);
  }
  parts.set(n + 1, string.sub(tpl, pos));
  return $multi(parts, undefined);
}

/** Compile option `name` (a template string or a function). */
export function compile(name: string, v: unknown): LuaMultiReturn<[Template | undefined, string | undefined]> {
  if (type(v) === "function") {
    return $multi({ parts: undefined, keyFn: v as KeyFn }, undefined);
  }
  if (type(v) === "string") {
    const [p, err] = split(name, v as string);
    if (p === undefined) return $multi(undefined, err);
    return $multi({ parts: p, keyFn: undefined }, undefined);
  }
  return check.fail(name + " must be a string of nginx variables (\"$http_idempotency_key\") or a function", v);
}

/** The request's value of t, or nil when a variable is missing or empty (or the function fails). */
export function value(guard: string, t: Template): string | undefined {
  if (t.keyFn !== undefined) {
    const [ok, v] = pcall(t.keyFn);
    if (!ok) {
      ngx.log(ngx.ERR, "dlock: guard ", guard, ": key function failed: ", tostring(v));
      return undefined;
    }
    return type(v) === "string" && (v as string).length > 0 ? (v as string) : undefined;
  }
  const parts = t.parts!;
  let out = parts.get(1);
  for (const i of $range(2, parts.length(), 2)) {
    const v = ngx.var.get(parts.get(i));
    if (v === undefined || v === "") {
      return undefined;
    }
    out = out + v + parts.get(i + 1);
  }
  return out;
}
