// The Redis protocol (RESP2), for what lua-resty-redis does not expose: a
// pipeline whose replies are read one at a time, so that a connection that
// breaks after the third reply leaves the first three calls answered and only
// the rest "outcome unknown" (commit_pipeline reads all or nothing).

const lua_tonumber = tonumber;
const lua_tostring = tostring;
const ngx_null = ngx.null;
const concat = table.concat;
const sub = string.sub;

/** A command buffer: pieces joined once, when it is sent. */
export type Buffer = LuaTable<number, string | number>;

/** Append the head of a command of n words. */
function command(parts: Buffer, n: number): void {
  const i = parts.length();
  parts.set(i + 1, "*");
  parts.set(i + 2, n);
  parts.set(i + 3, "\r\n");
}

/** Append one word of a command. */
function arg(parts: Buffer, w: string | number): void {
  const s = lua_tostring(w);
  const i = parts.length();
  parts.set(i + 1, "$");
  parts.set(i + 2, s.length);
  parts.set(i + 3, "\r\n");
  parts.set(i + 4, s);
  parts.set(i + 5, "\r\n");
}

/** One command, encoded. */
export function encode(words: (string | number)[]): string {
  const parts: Buffer = new LuaTable();
  command(parts, words.length);
  for (const i of $range(1, words.length)) arg(parts, words[i - 1]!);
  return concat(parts as unknown as string[]);
}

/**
 * Replies read in chunks (receiveany) and parsed here: one call into the
 * cosocket for a whole batch of short replies, where receive("*l") makes one
 * per reply (each a C function, which also ends LuaJIT's trace).
 */
export interface Reader {
  readonly sock: NgxTcpSocket;
  buf: string;
  pos: number;
}

export function reader(sock: NgxTcpSocket): Reader {
  return { sock, buf: "", pos: 1 };
}

/** Nothing is left unread (a connection fit to go back to the pool). */
export function drained(r: Reader): boolean {
  return r.pos > r.buf.length;
}

const byte = string.byte;
const find = string.find;
const CHUNK = 65536;

type Parsed = LuaMultiReturn<[RedisValue | false | undefined, string | undefined, number | undefined]>;

/**
 * The reply at pos of buf: value, error message (of an error reply), and the
 * position after it; no position when buf ends before the reply does.
 */
function parse(buf: string, pos: number): Parsed {
  const [eol] = find(buf, "\r\n", pos, true);
  if (eol === undefined) return $multi(undefined, undefined, undefined);
  const kind = byte(buf, pos);
  const line = sub(buf, pos + 1, eol - 1);
  const after = eol + 2;
  if (kind === 43) return $multi(line, undefined, after); // +
  if (kind === 45) return $multi(false, line, after); // -
  if (kind === 58) return $multi(lua_tonumber(line), undefined, after); // :
  if (kind === 36) { // $
    const n = lua_tonumber(line) ?? -1;
    if (n < 0) return $multi(ngx_null as unknown as RedisValue, undefined, after);
    if (buf.length < after + n + 1) return $multi(undefined, undefined, undefined);
    return $multi(sub(buf, after, after + n - 1), undefined, after + n + 2);
  }
  if (kind === 42) { // *
    const n = lua_tonumber(line) ?? -1;
    if (n < 0) return $multi(ngx_null as unknown as RedisValue, undefined, after);
    const out = new LuaTable<number, unknown>();
    let p = after;
    for (const i of $range(1, n)) {
      const [v, verr, next] = parse(buf, p);
      if (next === undefined) return $multi(undefined, undefined, undefined);
      // An error inside an array (a script's table reply) stays a value, as lua-resty-redis keeps it.
      out.set(i, v === false ? [false, verr] : v);
      p = next;
    }
    return $multi(out as unknown as RedisValue, undefined, p);
  }
  return $multi(undefined, "bad reply: " + line, -1);
}

/** The next reply, once buf holds no whole reply: read chunks until it does. */
function readMore(r: Reader): LuaMultiReturn<[RedisValue | false | undefined, string | undefined]> {
  while (true) {
    const [data, rerr] = r.sock.receiveany(CHUNK);
    if (data === undefined) return $multi(undefined, rerr);
    r.buf = r.pos > r.buf.length ? data : sub(r.buf, r.pos) + data;
    r.pos = 1;
    const [v, err, next] = parse(r.buf, r.pos);
    if (next !== undefined) {
      if (next < 0) return $multi(undefined, err);
      r.pos = next;
      return $multi(v, err);
    }
  }
}

/**
 * The next reply, as lua-resty-redis returns one: the value (ngx.null for a
 * nil bulk or array), or false and the message of an error reply; nil and
 * the socket's error when the connection failed. A reply already read comes
 * without a loop: the sender's loop over a batch's replies stays one trace.
 */
export function read(r: Reader): LuaMultiReturn<[RedisValue | false | undefined, string | undefined]> {
  const [v, err, next] = parse(r.buf, r.pos);
  if (next === undefined) return readMore(r);
  if (next < 0) return $multi(undefined, err);
  r.pos = next;
  return $multi(v, err);
}
