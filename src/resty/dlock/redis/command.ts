// A script call as Redis reads it: EVALSHA, the script's SHA, its key count,
// then the key and arguments, encoded once, when the call joins a batch (no
// table of its arguments). EVAL with the script's body replaces the head for
// calls Redis met with NOSCRIPT; ASKING precedes each call of a batch for a
// Cluster slot being imported.

import type { Fault, Target } from "./backend";
import * as resp from "./resp";
import * as scripts from "./scripts";

const lua_tostring = tostring;
const lua_select = select;
const str_sub = string.sub;
const str_format = string.format;
const str_rep = string.rep;
const tbl_concat = table.concat;
const queueKey = scripts.queueKey;
const readersKey = scripts.readersKey;

/** One call. */
export interface Job {
  readonly s: scripts.Script;
  /** Its command, encoded (EVALSHA, the SHA, the key count, then the words). */
  readonly cmd: string;
  /** Words after the script's SHA and key count: the key and the arguments. */
  readonly words: number;
  /** Its caller came back for the answer (pipeline.ts). */
  back: boolean;
  res: RedisValue | undefined;
  err: string | undefined;
  fault: Fault | undefined;
}

export interface Batch {
  /** The calls' EVALSHA commands, one string each as they join; joined once, when sent. */
  readonly parts: string[];
  readonly jobs: Job[];
  /** Wakes the callers (nil for calls sent by their caller). */
  readonly sem: NgxSemaphore | undefined;
  /** Calls whose script has an undo (acquires). */
  undos: number;
  /** ASKING before each call (a Cluster slot this node imports). */
  readonly asking: boolean;
}

export function batchOf(sem: NgxSemaphore | undefined, asking: boolean): Batch {
  return { parts: [], jobs: [], sem, undos: 0, asking };
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

// A call's command after its head, per number of words: one string.format
// makes it. (Five table slots per word grew the batch buffer in the hot
// trace, and the side traces of its resizes never compiled: "register
// coalescing too complex", hundreds of aborts a second.) Arguments beyond the
// words a format names are ignored by string.format.
const WORD = "$%d\r\n%s\r\n";
const FORMATS = new LuaTable<number, string>();
for (const n of $range(1, 7)) FORMATS.set(n, "%s" + str_rep(WORD, n));
const ASKING = resp.encode(["ASKING"]);

/** The words of a command (up to seven: the key and six arguments), with its head. Not a tail call (see lease.make). */
function encode(head: string, n: number, w1: string, w2: string, w3: string, w4: string, w5: string, w6: string, w7: string): string {
  const cmd = str_format(FORMATS.get(n)!, head, w1.length, w1, w2.length, w2, w3.length, w3, w4.length, w4, w5.length, w5,
    w6.length, w6, w7.length, w7);
  return cmd;
}

/** Add a call to b: its command goes into the buffer at once (no table of its arguments). */
export function add(b: Batch, s: scripts.Script, rkey: string, ...args: (string | number)[]): Job {
  const n = lua_select("#", ...args);
  const words = 1 + n;
  const head = headOf(heads, s, words, false);
  let cmd: string;
  if (n <= 6) {
    // The arguments as locals: select(i, ...) in a loop copies the rest each
    // time and keeps the function out of the JIT. Six cover every script.
    const [a1, a2, a3, a4, a5, a6] = lua_select(1, ...args);
    cmd = encode(head, words, rkey, n >= 1 ? lua_tostring(a1) : "", n >= 2 ? lua_tostring(a2) : "", n >= 3 ? lua_tostring(a3) : "",
      n >= 4 ? lua_tostring(a4) : "", n >= 5 ? lua_tostring(a5) : "", n >= 6 ? lua_tostring(a6) : "");
  } else {
    const parts: resp.Buffer = new LuaTable();
    parts.set(1, head);
    resp.arg(parts, rkey);
    for (const i of $range(1, n)) {
      const [a] = lua_select(i, ...args);
      resp.arg(parts, a!);
    }
    cmd = tbl_concat(parts as unknown as string[]);
  }
  const job: Job = { s, cmd, words, back: false, res: undefined, err: undefined, fault: undefined };
  b.jobs.push(job);
  b.parts.push(cmd);
  if (s.undo !== undefined) b.undos++;
  return job;
}

/**
 * Add a per-target script call (release, extend, drop): KEYS[1] the key (and
 * KEYS[2] its waiters' queue, for two-key scripts; its readers and its queue
 * for three-key ones), ARGV[1] the token (and
 * ARGV[2] ms, when given). What scripts.forTarget sends through a backend.
 */
export function addTarget(b: Batch, slotted: boolean, s: scripts.Script, t: Target, ms: number | undefined): void {
  if (s.keys === 3) {
    // Readers' scripts: the lock key, its readers, its queue.
    const q = queueKey(t.rkey, slotted);
    const r = readersKey(t.rkey, slotted);
    if (ms === undefined) add(b, s, t.rkey, r, q, t.token);
    else add(b, s, t.rkey, r, q, t.token, ms);
  } else if (s.keys === 2) {
    const q = queueKey(t.rkey, slotted);
    if (ms === undefined) add(b, s, t.rkey, q, t.token);
    else add(b, s, t.rkey, q, t.token, ms);
  } else if (ms === undefined) {
    add(b, s, t.rkey, t.token);
  } else {
    add(b, s, t.rkey, t.token, ms);
  }
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
  return resp.word(j.cmd, headOf(heads, j.s, j.words, false).length + 1, n);
}

/** The commands of the jobs `which` of b (nil: all), EVAL with the script's body when `body`, each after ASKING when b asks. */
export function commands(b: Batch, which: number[] | undefined, body: boolean): string {
  const out: string[] = [];
  const n = which === undefined ? b.jobs.length : which.length;
  for (const k of $range(1, n)) {
    const j = b.jobs[which === undefined ? k - 1 : which[k - 1]! - 1]!;
    if (b.asking) out.push(ASKING);
    if (body) {
      const sha = headOf(heads, j.s, j.words, false);
      out.push(headOf(bodies, j.s, j.words, true) + str_sub(j.cmd, sha.length + 1));
    } else {
      out.push(j.cmd);
    }
  }
  return tbl_concat(out);
}
