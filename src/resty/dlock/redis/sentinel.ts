// Redis Sentinel: which server is the master of `redis.sentinel.master` now?
// Asked of the sentinels in order (one that answers moves to the front), then
// confirmed with ROLE on the server itself before use: a master just demoted by
// a failover still answers, and must not take locks. The answer is cached per
// worker and forgotten on connection errors, READONLY and LOADING, so after a
// failover locks resume on the new master without an nginx reload.

import * as schema from "../core/schema";
import type * as clientcert from "./clientcert";
import * as hints from "./hints";
import * as setup from "./setup";
import * as clock from "../core/clock";
import * as question from "../core/question";

const lua_tonumber = tonumber;
const lua_tostring = tostring;
const lua_type = type;
const literal = schema.literal;
const clock_now = clock.now;
const ngx_null = ngx.null;
const str_len = string.len;
const str_sub = string.sub;
const tbl_concat = table.concat;
const tbl_insert = table.insert;
const tbl_remove = table.remove;
const underway = question.underway;
const tls_port = hints.tlsPort;
const away_why = hints.awayWhy;

export interface Node {
  readonly host: string;
  readonly port: number;
}

export interface SentinelConf {
  readonly master: string;
  /** The nodes as configured, for the pool name: two Sentinel sets may both watch a "mymaster". */
  readonly id: string;
  /** In the order to ask them; reordered as sentinels answer or fail. */
  readonly nodes: Node[];
  /** The sentinels' own; the password is kept by redis/setup.ts. */
  readonly credentials: setup.Credentials | undefined;
  /** TLS to the sentinels; nil: as to the data nodes (redis.ssl). */
  readonly ssl: boolean | undefined;
}

/** What the `redis.sentinel` schema hands back: a SentinelConf but for its id. */
interface Options {
  readonly master: string;
  readonly nodes: Node[];
  readonly username: string | undefined;
  readonly password: string | undefined;
  readonly ssl: boolean | undefined;
}

/** The `redis.sentinel` table (README's table is checked against it: spec/options_spec.lua). */
export const SENTINEL: schema.Spec[] = [
  { name: "master", kind: "string", maxLen: 255, required: true },
  { name: "nodes", kind: "nodes", required: true },
  { name: "username", kind: "string", maxLen: 1024, requires: [{ option: "password", must: "set" }] },
  { name: "password", kind: "string", secret: true },
  { name: "ssl", kind: "boolean", doc: "as `redis.ssl`" },
];
const validate = schema.compile<Options>("redis.sentinel", SENTINEL);

/** The `redis.sentinel` option table. */
export function parse(this: void, v: unknown): LuaMultiReturn<[SentinelConf | undefined, string | undefined]> {
  const [o, err] = validate(v);
  if (o === undefined) return $multi(undefined, err);
  const names: string[] = [];
  for (const i of $range(1, o.nodes.length)) names.push(o.nodes[i - 1]!.host + ":" + lua_tostring(o.nodes[i - 1]!.port));
  // A TLS setting of the sentinels' own is part of the id (the factory's is in its pool name already): a
  // factory that reaches them otherwise never rides on another's answers, right or wrong.
  let id = tbl_concat(names, ",");
  if (o.ssl !== undefined) id = id + (o.ssl ? "+tls" : "+plain");
  return $multi({ master: o.master, id, nodes: o.nodes,
    credentials: setup.credentials(o.username, o.password), ssl: o.ssl }, undefined);
}

/**
 * Seconds a worker trusts the sentinels' last answer. A failover is announced
 * by the sentinels at once, but the old master goes on taking writes for
 * several seconds before it is demoted: asking again every second moves every
 * worker to the new master within a second, without waiting for an error.
 */
const FRESH = 1;

/** Per worker: the master found for a sentinel set (by pool name), and when. */
const masters = new LuaTable<string, { node: Node; at: number }>();

/**
 * Per worker: the question to a pool's sentinels on its way, if any. A timer
 * asks it (core/question.ts): a request that asked itself and went away in
 * the middle left it open for good, and its worker on the previous master,
 * taking locks there after a failover.
 */
const questions = new LuaTable<string, question.Question>();

/**
 * The master to use now: the sentinels' answer of less than FRESH seconds ago;
 * or, while the worker is asking them again, the previous answer (one
 * question per worker and second, not one per request in flight). nil: ask
 * (discover).
 */
export function cached(pool: string): Node | undefined {
  const m = masters.get(pool);
  if (m === undefined) return undefined;
  if (clock_now() - m.at <= FRESH || underway(questions.get(pool))) return m.node;
  return undefined;
}

/** The master the sentinels named last (however long ago), for status pages. */
export function last(pool: string): Node | undefined {
  const m = masters.get(pool);
  return m && m.node;
}

/** Forget the master of this pool: the next connection asks the sentinels again. */
export function forget(pool: string): void {
  masters.delete(pool);
}

/** The factory's TLS settings: the sentinels use them unless redis.sentinel.ssl says otherwise. */
export interface Tls {
  readonly ssl: boolean;
  readonly ssl_verify: boolean;
  readonly server_name: string | undefined;
  readonly client_cert: clientcert.ClientCert | undefined;
}

/** A fresh connection to a sentinel: the client and its socket, or why not (connection.ts makes it). */
export type Opener = (this: void, host: string, port: number, timeout: number) =>
  LuaMultiReturn<[RestyRedis | undefined, NgxTcpSocket | undefined, string | undefined]>;

function ask(pool: string, s: SentinelConf, open: Opener, timeout: number, tls: Tls): LuaMultiReturn<[Node | undefined, string | undefined]> {
  const errors: string[] = [];
  let ssl = s.ssl;
  if (ssl === undefined) ssl = tls.ssl;
  for (const i of $range(1, s.nodes.length)) {
    const node = s.nodes[i - 1]!;
    const endpoint = node.host + ":" + lua_tostring(node.port);
    const [red, sock, cerr] = open(node.host, node.port, timeout);
    let why = lua_tostring(cerr);
    if (red !== undefined) {
      // The sentinel's own TLS and credentials, in the order every server accepts.
      const serr = setup.run(red, sock, {
        endpoint: "sentinel " + endpoint, host: node.host, ssl, ssl_verify: tls.ssl_verify, server_name: tls.server_name,
        client_cert: tls.client_cert, credentials: s.credentials, db: 0, asSentinel: true,
      });
      if (serr === undefined) {
        const [addr, aerr] = red.sentinel("get-master-addr-by-name", s.master);
        red.close();
        if (lua_type(addr) === "table") {
          const t = addr as LuaTable<number, string>;
          const port = lua_tonumber(t.get(2));
          if (port !== undefined) {
            // Ask this one first next time.
            if (i > 1) {
              tbl_remove(s.nodes, i);
              tbl_insert(s.nodes, 1, node);
            }
            const m = { host: literal(t.get(1)), port };
            masters.set(pool, { node: m, at: clock_now() });
            return $multi(m, undefined);
          }
        }
        if (addr === ngx_null) {
          why = "does not know master " + s.master;
        } else {
          const away = away_why(aerr, "redis.sentinel.password");
          why = away !== undefined ? away : lua_tostring(aerr ?? addr);
        }
      } else {
        red.close();
        // setup's message names the sentinel already; keep only why.
        why = str_sub(serr, str_len("dlock: redis sentinel " + endpoint + ": ") + 1);
      }
    }
    errors.push(endpoint + " " + why + tls_port(why, ssl, "redis.sentinel.ssl"));
  }
  return $multi(undefined, "dlock: redis sentinel " + s.master + ": no sentinel named the master (" + tbl_concat(errors, "; ") + ")");
}

/** What the question's timer asks with. */
interface Asking {
  readonly pool: string;
  readonly s: SentinelConf;
  readonly dial: Opener;
  readonly timeout: number;
  readonly tls: Tls;
}

function askFor(this: void, a: Asking): LuaMultiReturn<[Node | undefined, string | undefined]> {
  return ask(a.pool, a.s, a.dial, a.timeout, a.tls);
}

/**
 * Ask the sentinels for the master's address, over connections `dial` makes;
 * timeouts (ms) and TLS settings are the factory's. The question is a timer's,
 * asked once for every caller of the worker that waits for it; with no timer
 * to be had, the caller asks itself.
 */
export function discover(pool: string, s: SentinelConf, dial: Opener, timeout: number, tls: Tls): LuaMultiReturn<[Node | undefined, string | undefined]> {
  let q: question.Question | undefined = questions.get(pool);
  if (!underway(q)) {
    // Each sentinel: a connect, a handshake, AUTH and the question, each within timeout; and a second to start.
    const longest = s.nodes.length * 4 * timeout / 1000 + 1;
    q = question.start(longest, askFor as question.Asker, { pool, s, dial, timeout, tls });
    if (q === undefined) return ask(pool, s, dial, timeout, tls);
    questions.set(pool, q);
  }
  const [m, err] = question.answer(q!, "redis sentinel " + s.master);
  return $multi(m as Node | undefined, err);
}
