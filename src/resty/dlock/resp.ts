// The Redis protocol (RESP2), for what lua-resty-redis does not expose: a
// pipeline whose replies are read one at a time, so that a connection that
// breaks after the third reply leaves the first three calls answered and only
// the rest "outcome unknown" (commit_pipeline reads all or nothing).

const concat = table.concat;
const sub = string.sub;

/** A command buffer: pieces joined once, when it is sent. */
export type Buffer = LuaTable<number, string | number>;

/** One command, encoded. */
export function encode(words: (string | number)[]): string {
  const parts: Buffer = new LuaTable();
  command(parts, words.length);
  for (const w of words) arg(parts, w);
  return concat(parts as unknown as string[]);
}

/** Append the head of a command of n words. */
export function command(parts: Buffer, n: number): void {
  const i = parts.length();
  parts.set(i + 1, "*");
  parts.set(i + 2, n);
  parts.set(i + 3, "\r\n");
}

/** Append one word of a command. */
export function arg(parts: Buffer, w: string | number): void {
  const s = tostring(w);
  const i = parts.length();
  parts.set(i + 1, "$");
  parts.set(i + 2, s.length);
  parts.set(i + 3, "\r\n");
  parts.set(i + 4, s);
  parts.set(i + 5, "\r\n");
}

/**
 * One reply from sock, as lua-resty-redis returns it: the value (ngx.null for
 * a nil bulk or array), or false and the message of an error reply; nil and
 * the socket's error when the connection failed.
 */
export function read(sock: NgxTcpSocket): LuaMultiReturn<[RedisValue | false | undefined, string | undefined]> {
  const [line, err] = sock.receive("*l");
  if (line === undefined) return $multi(undefined, err);
  const kind = sub(line, 1, 1);
  const rest = sub(line, 2);
  if (kind === "+") return $multi(rest, undefined);
  if (kind === "-") return $multi(false, rest);
  if (kind === ":") return $multi(tonumber(rest), undefined);
  if (kind === "$") {
    const n = tonumber(rest) ?? -1;
    if (n < 0) return $multi(ngx.null as unknown as RedisValue, undefined);
    const [data, derr] = sock.receive(n + 2);
    if (data === undefined) return $multi(undefined, derr);
    return $multi(sub(data, 1, n), undefined);
  }
  if (kind === "*") {
    const n = tonumber(rest) ?? -1;
    if (n < 0) return $multi(ngx.null as unknown as RedisValue, undefined);
    const out = new LuaTable<number, unknown>();
    for (const i of $range(1, n)) {
      const [v, verr] = read(sock);
      if (v === undefined) return $multi(undefined, verr);
      // An error inside an array (a script's table reply) stays a value, as lua-resty-redis keeps it.
      out.set(i, v === false ? [false, verr] : v);
    }
    return $multi(out as unknown as RedisValue, undefined);
  }
  return $multi(undefined, "bad reply: " + line);
}
