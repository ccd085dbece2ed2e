// The IETF httpapi RateLimit fields of a rate guard's decisions
// (draft-ietf-httpapi-ratelimit-headers-11): RateLimit-Policy names each
// limit's quota q per window w; RateLimit says what remains r and the
// effective window t, the seconds within which no more than r can be used.

import type * as core from "../core/rate";

const str_format = string.format;
const tbl_concat = table.concat;
const math_ceil = math.ceil;
const math_min = math.min;
const math_max = math.max;
const lua_type = type;
const str_find = string.find;
const ngx_ = ngx;

/** What the fields need of a guard. */
export interface Fielded {
  /** RateLimit-Policy's value (nil: the RateLimit fields are off). */
  readonly _policy: string | undefined;
  /** Per limit, the start of its RateLimit item: "\"<name>\";r=". */
  readonly _items: string[];
  /** Per limit, its name as the fields quote it: what another guard's fields are searched for. */
  readonly _quoted: string[];
  /** The same two with each name after the guard's ("per_key:5-per-1m"): when another guard of the request sent a name of ours. */
  readonly _ownPolicy: string | undefined;
  readonly _ownItems: string[];
  /** Reused to build RateLimit (filled and joined without yielding in between). */
  readonly _parts: string[];
}

/**
 * Set a RateLimit field to this guard's items, after those another rate guard
 * of the request set already (per client and per API key: both lists go out,
 * one field each, as the draft has several policies in one field).
 */
function field(header: LuaTable<string, unknown>, name: string, items: string): void {
  const before = header.get(name);
  header.set(name, lua_type(before) === "string" ? (before as string) + ", " + items : items);
}

/**
 * The effective window of limit i of a reply, in seconds (t): the draft's
 * "seconds within which the client can use no more than the available
 * quota", the time until the next unit comes back (GCRA: from ms ahead d
 * and r left, d + (r + 1) x interval - capacity), rounded up, never past a
 * refusal's Retry-After. iv and cap in ms: the limits', or this nginx's
 * share of them while the local fallback decides.
 */
function window(reply: LuaTable<number, number>, i: number, iv: number[], cap: number[]): number {
  const x = reply.get(2 + 2 * i) + (reply.get(1 + 2 * i) + 1) * iv[i - 1]! - cap[i - 1]!;
  const t = x > 0 ? math_ceil(x / 1000) : 0;
  // A refusal: no limit's window past its Retry-After (a shorter window is as true).
  if (reply.get(1) === 0) return math_min(t, math_max(1, math_ceil(reply.get(2) / 1000)));
  return t;
}

/** Is one of these quoted names in a field's value already? */
function sent(value: string, quoted: string[]): boolean {
  for (const i of $range(1, quoted.length)) {
    if (str_find(value, quoted[i - 1]!, 1, true)[0] !== undefined) return true;
  }
  return false;
}

/** The RateLimit fields of a reply, its limits' intervals and capacities in ms. */
export function fields(g: Fielded, reply: LuaTable<number, number>, iv: number[], cap: number[]): void {
  const header = ngx_.header as unknown as LuaTable<string, unknown>;
  // A client tells policies apart by name (draft-11 3.1, 4.1): a name another guard sent already is made ours.
  const before = header.get("RateLimit-Policy");
  const clash = lua_type(before) === "string" && sent(before as string, g._quoted);
  field(header, "RateLimit-Policy", (clash && g._ownPolicy) || g._policy!);
  const items = (clash && g._ownItems) || g._items;
  if (items.length === 1) {
    // One limit without the loop (a loop on the request's path keeps it out of LuaJIT's traces).
    field(header, "RateLimit", items[0]! + str_format("%d;t=%d", reply.get(3), window(reply, 1, iv, cap)));
    return;
  }
  const parts = g._parts;
  for (const i of $range(1, items.length)) {
    parts[i - 1] = items[i - 1]! + str_format("%d;t=%d", reply.get(1 + 2 * i), window(reply, i, iv, cap));
  }
  field(header, "RateLimit", tbl_concat(parts, ", "));
}

/** RateLimit-Policy for these limits, each name after `own` ("" or "<guard>:"). */
export function policyOf(ls: core.Limits, own: string): string {
  const out: string[] = [];
  for (const i of $range(1, ls.list.length)) {
    const l = ls.list[i - 1]!;
    let item = str_format("\"%s%s\";q=%d", own, l.name, l.rate);
    if (l.period % 1000 === 0) item = item + str_format(";w=%d", l.period / 1000);
    if (l.burst !== l.rate) item = item + str_format(";dlock-burst=%d", l.burst);
    out[i - 1] = item;
  }
  return tbl_concat(out, ", ");
}
