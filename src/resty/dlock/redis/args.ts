// A call's arguments as locals, for the paths where a `...` would keep LuaJIT
// from compiling the rest: it compiles no `...` (VARG, "NYI: bytecode 71") in
// a function that a trace did not enter, and a trace that starts where a loop
// exits (the Cluster slot's CRC, cluster.ts) comes back into its caller's
// frame. Six arguments cover every script but the general rate script and
// acquire_all's, which go as lists.

import type * as redis from "./client";
import type * as scripts from "./scripts";

export type Arg = string | number | undefined;
export type Send<R> = (this: void, node: redis.RedisConf, s: scripts.Script, rkey: string, ...args: (string | number)[]) => R;

/** f with the first n of a1..a6: a fixed number of arguments in each branch, no `...`. */
export function forward<R>(f: Send<R>, node: redis.RedisConf, s: scripts.Script, rkey: string, n: number,
  a1: Arg, a2: Arg, a3: Arg, a4: Arg, a5: Arg, a6: Arg): R {
  if (n === 0) return f(node, s, rkey);
  if (n === 1) return f(node, s, rkey, a1!);
  if (n === 2) return f(node, s, rkey, a1!, a2!);
  if (n === 3) return f(node, s, rkey, a1!, a2!, a3!);
  if (n === 4) return f(node, s, rkey, a1!, a2!, a3!, a4!);
  if (n === 5) return f(node, s, rkey, a1!, a2!, a3!, a4!, a5!);
  return f(node, s, rkey, a1!, a2!, a3!, a4!, a5!, a6!);
}

/** The first n of a1..a6 as a list. */
export function listOf(n: number, a1: Arg, a2: Arg, a3: Arg, a4: Arg, a5: Arg, a6: Arg): (string | number)[] {
  const all = [a1, a2, a3, a4, a5, a6];
  const out: (string | number)[] = [];
  for (const i of $range(1, n)) out[i - 1] = all[i - 1]!;
  return out;
}

/** args (the keys after the first, then the arguments) without those at positions first..last. */
export function withoutKeys(args: (string | number)[], first: number, last: number): (string | number)[] {
  const out: (string | number)[] = [];
  for (const i of $range(1, args.length)) {
    if (i < first || i > last) out.push(args[i - 1]!);
  }
  return out;
}
