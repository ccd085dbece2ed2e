// A script call as Redis reads it: EVALSHA, the script's SHA, its key count,
// then the key and arguments, written into the batch's buffer as fragments
// when the call joins it, and sent as one write (the cosocket joins them in
// C). No string per call or per batch is made in Lua: LuaJIT interns every
// string, hashing only four of its 4-byte windows, and the commands of one
// script differ only between those windows (same head, same tail, same
// length), so each new one walked a chain of all the others (memcmp): half
// of the worker's CPU at 20,000 rate checks a second. EVAL with the script's
// body replaces the head for calls Redis met with NOSCRIPT; ASKING precedes
// each call of a batch for a Cluster slot being imported.

import type { Fault } from "./backend";
import * as resp from "./resp";
import * as scripts from "./scripts";

const lua_tostring = tostring;
const lua_select = select;
const str_sub = string.sub;
const table_new = require("table.new") as (this: void, narr: number, nrec: number) => LuaTable<number, string>;

/** Fragments sent as one write. */
export type Fragments = LuaTable<number, string>;

/** One call. */
export interface Job {
  readonly s: scripts.Script;
  /** The buffer its command is in, from `at` (its head: EVALSHA, the SHA, the key count) on, 3 fragments per word. */
  readonly parts: Fragments;
  readonly at: number;
  /** Words after the script's SHA and key count: the key and the arguments. */
  readonly words: number;
  /** Its caller came back for the answer (pipeline.ts). */
  back: boolean;
  res: RedisValue | undefined;
  err: string | undefined;
  fault: Fault | undefined;
}

export interface Batch {
  /** The calls' commands, as fragments (parts[1 .. n]). */
  readonly parts: Fragments;
  n: number;
  readonly jobs: Job[];
  /** Wakes the callers (nil for calls sent by their caller). */
  readonly sem: NgxSemaphore | undefined;
  /** Calls whose script has an undo (acquires). */
  undos: number;
  /** ASKING before each call (a Cluster slot this node imports). */
  readonly asking: boolean;
}

/** A batch; size: fragments it is expected to hold (the buffer never grows inside the hot trace below that). */
export function batchOf(sem: NgxSemaphore | undefined, asking: boolean, size?: number): Batch {
  return { parts: table_new(size ?? 16, 0), n: 0, jobs: [], sem, undos: 0, asking };
}

// The fixed start of a call's command, per script and word count: the array
// head, EVALSHA (or EVAL), the SHA (or body) and the key count, as one piece.
const heads = setmetatable(new LuaTable<scripts.Script, LuaTable<number, string>>(), { __mode: "k" });
const bodies = setmetatable(new LuaTable<scripts.Script, LuaTable<number, string>>(), { __mode: "k" });

function headOf(cache: LuaTable<scripts.Script, LuaTable<number, string>>, s: scripts.Script, words: number, body: boolean): string {
  let byWords = cache.get(s);
  if (byWords === undefined) {
    byWords = new LuaTable();
    cache.set(s, byWords);
  }
  let h = byWords.get(words);
  if (h === undefined) {
    h = resp.encode([body ? "EVAL" : "EVALSHA", body ? s.src : s.sha, s.keys]);
    // The array head counts every word of the command, the key and arguments included.
    h = "*" + lua_tostring(3 + words) + str_sub(h, 3);
    byWords.set(words, h);
  }
  return h;
}

const CRLF = "\r\n";
// "$<length>\r\n" per word length, made once (a word's length is at most a key's).
const PRE = new LuaTable<number, string>();
const PRE_CACHED = 4096;

/** Put word w at fragments k+1 .. k+3 of parts; the index of the last. */
function put(parts: Fragments, k: number, w: string): number {
  const len = w.length;
  let pre = PRE.get(len);
  if (pre === undefined) {
    pre = "$" + lua_tostring(len) + CRLF;
    if (len <= PRE_CACHED) PRE.set(len, pre);
  }
  parts.set(k + 1, pre);
  parts.set(k + 2, w);
  parts.set(k + 3, CRLF);
  return k + 3;
}

const ASKING = resp.encode(["ASKING"]);

/** Add a call to b: its command goes into the buffer at once (no table of its arguments). */
export function add(b: Batch, s: scripts.Script, rkey: string, ...args: (string | number)[]): Job {
  const n = lua_select("#", ...args);
  const words = 1 + n;
  const parts = b.parts;
  const at = b.n + 1;
  parts.set(at, headOf(heads, s, words, false));
  let k = put(parts, at, rkey);
  if (n <= 6) {
    // The arguments as locals: select(i, ...) in a loop copies the rest each
    // time and keeps the function out of the JIT. Six cover every script.
    const [a1, a2, a3, a4, a5, a6] = lua_select(1, ...args);
    if (n >= 1) k = put(parts, k, lua_tostring(a1));
    if (n >= 2) k = put(parts, k, lua_tostring(a2));
    if (n >= 3) k = put(parts, k, lua_tostring(a3));
    if (n >= 4) k = put(parts, k, lua_tostring(a4));
    if (n >= 5) k = put(parts, k, lua_tostring(a5));
    if (n >= 6) k = put(parts, k, lua_tostring(a6));
  } else {
    for (const i of $range(1, n)) {
      const [a] = lua_select(i, ...args);
      k = put(parts, k, lua_tostring(a));
    }
  }
  b.n = k;
  const job: Job = { s, parts, at, words, back: false, res: undefined, err: undefined, fault: undefined };
  b.jobs.push(job);
  if (s.undo !== undefined) b.undos++;
  return job;
}

/** Every job of b not answered yet fails with err. */
export function fail(b: Batch, err: string, fault: Fault): void {
  const jobs = b.jobs;
  for (const i of $range(1, jobs.length)) {
    const j = jobs[i - 1]!;
    if (j.fault === undefined && j.res === undefined) {
      j.err = err;
      j.fault = fault;
    }
  }
}

/** Word n of job j's command after its key count (1: KEYS[1]). */
export function wordOf(j: Job, n: number): string {
  return j.parts.get(j.at + 3 * n - 1);
}

/** The commands of the jobs `which` of b (nil: all), EVAL with the script's body when `body`, each after ASKING when b asks. */
export function commands(b: Batch, which: number[] | undefined, body: boolean): Fragments {
  const out: Fragments = table_new(b.n + 2 * b.jobs.length, 0);
  let k = 0;
  const n = which === undefined ? b.jobs.length : which.length;
  for (const m of $range(1, n)) {
    const j = b.jobs[which === undefined ? m - 1 : which[m - 1]! - 1]!;
    if (b.asking) {
      k++;
      out.set(k, ASKING);
    }
    k++;
    out.set(k, body ? headOf(bodies, j.s, j.words, true) : j.parts.get(j.at));
    const parts = j.parts;
    for (const i of $range(j.at + 1, j.at + 3 * j.words)) {
      k++;
      out.set(k, parts.get(i));
    }
  }
  return out;
}
