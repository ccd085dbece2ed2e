// A script call as Redis reads it: EVALSHA, the script's SHA, its key count,
// then the key and arguments, written into the batch's buffer when the call
// joins it and sent as one write (the cosocket joins the pieces in C). Four
// pieces per call: the head (cached per script and word count), the key's
// "$<length>\r\n" (cached per length), the key, and the rest of the command
// (one string.format). Why that split:
//   - LuaJIT interns every string and hashes only four 4-byte windows of it
//     (first, last, middle, a quarter in). Whole commands of one script differ
//     only between those windows (same head, same tail, same length): each new
//     one walked a chain of all the others (memcmp), half of the worker's CPU
//     at 20,000 rate checks a second. The rest after the key is short and holds
//     the token (random) wherever it varies, or is the same string every time
//     (a rate limiter's arguments), which interning finds at once.
//   - Three pieces per word (length, word, CRLF) cost the cosocket two passes
//     of Lua C API calls per piece (its length, then its copy): a rate
//     decision took the worker about a fifth more CPU that way (bench 1e).
// EVAL with the script's body replaces the head for calls Redis met with
// NOSCRIPT; ASKING precedes each call of a batch for a Cluster slot being imported.

import type { Fault } from "./backend";
import * as resp from "./resp";
import * as scripts from "./scripts";

const lua_tostring = tostring;
const lua_tonumber = tonumber;
const lua_select = select;
const str_sub = string.sub;
const str_find = string.find;
const str_format = string.format;
const str_rep = string.rep;
const tbl_concat = table.concat;
const table_new = require("table.new") as (this: void, narr: number, nrec: number) => LuaTable<number, string>;

/** Fragments sent as one write. */
export type Fragments = LuaTable<number, string>;

/** One call. Its table passes to a later call once its caller has the answer (recycle). */
export interface Job {
  s: scripts.Script;
  /** KEYS[1]. */
  rkey: string;
  /** The command after its key: CRLF, then "$<length>\r\n<word>\r\n" per further word. */
  rest: string;
  /** Words after the script's SHA and key count: the key and the arguments. */
  words: number;
  /** Its caller came back for the answer (pipeline.ts). */
  back: boolean;
  res: RedisValue | undefined;
  err: string | undefined;
  fault: Fault | undefined;
  /** Who takes the outcome of a call nobody waits for (pipeline.post). */
  post: Posted | undefined;
}

/**
 * What a call put into a pipeline without a waiting caller reports to: the
 * sender calls `answered` with the call once its outcome is known. A record
 * the poster keeps anyway (the gateway's Held) carries it: no closure, no
 * table per post.
 */
export interface Posted {
  readonly answered: (this: void, j: Job) => void;
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
  /** Calls nobody waits for (pipeline.post): not woken through sem. */
  posted: number;
  /** ASKING before each call (a Cluster slot this node imports). */
  readonly asking: boolean;
  /** Its calls stay with it after its callers are woken (a timer takes back the acquires of callers gone): none is recycled. */
  kept: boolean;
}

/**
 * A batch, sized for `calls` calls (4 unless told): neither its buffer nor its
 * list of calls grows below that. Growing inside the hot trace of add() left a
 * side exit whose trace LuaJIT could not compile, and recorded again and again
 * (jit.v: hundreds of "register coalescing too complex" in seconds).
 */
export function batchOf(sem: NgxSemaphore | undefined, asking: boolean, calls?: number): Batch {
  const n = calls ?? 4;
  return { parts: table_new(4 * n, 0), n: 0, jobs: table_new(n, 0) as unknown as Job[], sem, undos: 0, posted: 0, asking, kept: false };
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
// "$<length>\r\n" per key length, made once (a key is at most a few hundred bytes).
const PRE = new LuaTable<number, string>();
const PRE_CACHED = 4096;

function pre(len: number): string {
  let p = PRE.get(len);
  if (p === undefined) {
    p = "$" + lua_tostring(len) + CRLF;
    if (len <= PRE_CACHED) PRE.set(len, p);
  }
  return p;
}

// The rest of a command after its key, per number of arguments: one format.
const WORD = "$%d\r\n%s\r\n";
const RESTS = new LuaTable<number, string>();
for (const n of $range(0, 6)) RESTS.set(n, CRLF + str_rep(WORD, n));

/** The rest of a command after its key, for up to six arguments (as strings). Not a tail call (see lease.make). */
function restOf(n: number, a1: string, a2: string, a3: string, a4: string, a5: string, a6: string): string {
  const r = str_format(RESTS.get(n)!, a1.length, a1, a2.length, a2, a3.length, a3, a4.length, a4, a5.length, a5, a6.length, a6);
  return r;
}

const ASKING = resp.encode(["ASKING"]);

// Calls' tables, passed from answered calls to new ones: nine fields take a
// table of 16 hash slots, about 450 bytes, per call. An uncontended acquire +
// release allocated 1,970 bytes with a table per call and 1,420 with them
// passed on; a rate decision 490 and 240 (50 threads, pipelined).
const spare: Job[] = [];
let spares = 0;
const SPARES = 256;

/**
 * Hand j to a later call. Only for a call whose caller read its answer, in a
 * batch no one looks at again (not kept, not posted): the sender, the batch
 * and the caller are done with it.
 */
export function recycle(j: Job): void {
  if (spares < SPARES) {
    spares++;
    spare[spares - 1] = j;
  }
}

/** Is j's table waiting for a later call (for the specs: a look at each)? */
export function spared(j: Job): boolean {
  for (const i of $range(1, spares)) if (spare[i - 1] === j) return true;
  return false;
}

/**
 * The arguments of a call, encoded once: the rest of its command after the
 * key, and its number of words (the key and the arguments). A call sent to
 * several servers (fanout.ts) encodes them once for all.
 */
function encoded(...args: (string | number)[]): LuaMultiReturn<[string, number]> {
  const n = lua_select("#", ...args);
  let rest: string;
  if (n <= 6) {
    // The arguments as locals: select(i, ...) in a loop copies the rest each
    // time and keeps the function out of the JIT. Six cover every script.
    const [a1, a2, a3, a4, a5, a6] = lua_select(1, ...args);
    rest = restOf(n, n >= 1 ? lua_tostring(a1) : "", n >= 2 ? lua_tostring(a2) : "", n >= 3 ? lua_tostring(a3) : "",
      n >= 4 ? lua_tostring(a4) : "", n >= 5 ? lua_tostring(a5) : "", n >= 6 ? lua_tostring(a6) : "");
  } else {
    const out: string[] = [CRLF];
    for (const i of $range(1, n)) {
      const [a] = lua_select(i, ...args);
      const w = lua_tostring(a);
      out[i] = str_format(WORD, w.length, w);
    }
    rest = tbl_concat(out);
  }
  return $multi(rest, 1 + n);
}

/** Add a call to b whose arguments are encoded (encoded()): its command goes into the buffer at once. */
function addEncoded(b: Batch, s: scripts.Script, rkey: string, rest: string, words: number): Job {
  const parts = b.parts;
  const k = b.n;
  parts.set(k + 1, headOf(heads, s, words, false));
  parts.set(k + 2, pre(rkey.length));
  parts.set(k + 3, rkey);
  parts.set(k + 4, rest);
  b.n = k + 4;
  let job: Job;
  if (spares > 0) {
    job = spare[spares - 1]!;
    spare[spares - 1] = undefined as unknown as Job;
    spares--;
    job.s = s;
    job.rkey = rkey;
    job.rest = rest;
    job.words = words;
    job.back = false;
    job.res = undefined;
    job.err = undefined;
    job.fault = undefined;
    job.post = undefined;
  } else {
    job = { s, rkey, rest, words, back: false, res: undefined, err: undefined, fault: undefined, post: undefined };
  }
  b.jobs[b.jobs.length] = job;
  if (s.undo !== undefined) b.undos++;
  return job;
}

/** Add a call to b: its command goes into the buffer at once (no table of its arguments). */
export function add(b: Batch, s: scripts.Script, rkey: string, ...args: (string | number)[]): Job {
  const [rest, words] = encoded(...args);
  const job = addEncoded(b, s, rkey, rest, words);
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

/** Word n of job j's command after its key count (1: KEYS[1]), read back from its rest (only for a call to take back). */
export function wordOf(j: Job, n: number): string {
  if (n === 1) return j.rkey;
  const rest = j.rest;
  let pos = 3; // after the CRLF that ends the key
  let w = "";
  for (const _ of $range(2, n)) {
    const [eol] = str_find(rest, CRLF, pos, true);
    const len = lua_tonumber(str_sub(rest, pos + 1, eol! - 1))!;
    w = str_sub(rest, eol! + 2, eol! + 1 + len);
    pos = eol! + 2 + len + 2;
  }
  return w;
}

/** Index k of the jobs `which` of a batch (nil: all of them, in order). */
function at(which: number[] | undefined, k: number): number {
  return which === undefined ? k : which[k - 1]!;
}

/** The commands of the jobs `which` of b (nil: all), EVAL with the script's body when `body`, each after ASKING when b asks. */
export function commands(b: Batch, which: number[] | undefined, body: boolean): Fragments {
  const out: Fragments = table_new(5 * b.jobs.length, 0);
  let k = 0;
  const n = which === undefined ? b.jobs.length : which.length;
  for (const m of $range(1, n)) {
    const j = b.jobs[at(which, m) - 1]!;
    if (b.asking) {
      k++;
      out.set(k, ASKING);
    }
    out.set(k + 1, headOf(body ? bodies : heads, j.s, j.words, body));
    out.set(k + 2, pre(j.rkey.length));
    out.set(k + 3, j.rkey);
    out.set(k + 4, j.rest);
    k += 4;
  }
  return out;
}

// Exported by name: this module's own uses of them are locals, not lookups in its exports table.
export { addEncoded, at, encoded };
