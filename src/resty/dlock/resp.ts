// The Redis protocol (RESP2), for what lua-resty-redis does not expose: a
// pipeline whose replies are read one at a time, so that a connection that
// breaks after the third reply leaves the first three calls answered and only
// the rest "outcome unknown" (commit_pipeline reads all or nothing).

const concat = table.concat;
const sub = string.sub;

/** One command, encoded. */
export function encode(words: (string | number)[]): string {
  const parts: string[] = ["*" + words.length + "\r\n"];
  for (const w of words) {
    const s = tostring(w);
    parts.push("$" + s.length + "\r\n" + s + "\r\n");
  }
  return concat(parts);
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
