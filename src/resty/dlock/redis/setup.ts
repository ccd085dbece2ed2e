// What a fresh connection goes through before its first command, in the one
// order every Redis accepts: TLS, then AUTH, then SELECT. Servers with a
// password answer anything else, PING and ROLE included, with NOAUTH, so
// nothing may be sent ahead of AUTH. Used for data nodes (connection.ts) and for
// sentinels (sentinel.ts); pooled connections went through it when fresh.

import * as check from "../core/check";
import * as schema from "../core/schema";
import * as clientcert from "./clientcert";
import * as hints from "./hints";

const apply_cert = clientcert.apply;
const lua_pcall = pcall;
const lua_setmetatable = setmetatable;
const lua_tostring = tostring;
const ngx_md5 = ngx.md5;
const str_sub = string.sub;
const named = schema.named;
const refusedBy = hints.refusedBy;
const unverified = hints.unverified;
const plaintext = hints.plaintext;
const turnedAway = hints.turnedAway;

/**
 * Who to AUTH as. The password itself stays in this module (a weak table keyed
 * by these credentials): no factory, lease or configuration table a caller can
 * reach holds it.
 */
export interface Credentials {
  readonly username: string | undefined;
  /** A digest of user and password, for pool names (they show in debug logs). */
  readonly digest: string;
}

const secrets = lua_setmetatable(new LuaTable<Credentials, string>(), { __mode: "k" });

/** Credentials for AUTH, or nil without a password. */
export function credentials(username: string | undefined, password: string | undefined): Credentials | undefined {
  if (password === undefined) return undefined;
  const c: Credentials = { username, digest: str_sub(ngx_md5((username ?? "") + "\0" + password), 1, 16) };
  secrets.set(c, password);
  return c;
}

/** How to set up one connection: the factory's settings, or the sentinels' own. */
export interface Setup {
  /** "host:port" or the socket path, for messages. */
  readonly endpoint: string;
  /** The host it is reached by (an IPv6 address in brackets). */
  readonly host: string;
  readonly ssl: boolean;
  readonly ssl_verify: boolean;
  readonly server_name: string | undefined;
  /** The certificate the handshake presents (redis.ssl_client_cert), if any. */
  readonly client_cert: clientcert.ClientCert | undefined;
  readonly credentials: Credentials | undefined;
  /** 0: no SELECT (sentinels have no databases). */
  readonly db: number;
  /** Who gave this address, when the servers did (RedisConf.announced): a hint's words. */
  readonly announced?: string;
  /** A sentinel's own connection: hints name the redis.sentinel options, not the master's. */
  readonly asSentinel?: boolean;
}

function shake(this: void, sock: NgxTcpSocket, serverName: string | undefined, verify: boolean): LuaMultiReturn<[unknown, string | undefined]> {
  return sock.sslhandshake(undefined, serverName, verify);
}

/**
 * The name a handshake sends (SNI) and ssl_verify checks: server_name, else
 * the host the server is reached by when that is a name, as lua-resty-http,
 * Redisson and redis-py (check_hostname) check it; a node a sentinel or
 * CLUSTER SLOTS names by name is checked by its own. An address is no name
 * to send, and nginx checks certificates against names only: with an address
 * and no server_name, ssl_verify checks the chain alone.
 */
function nameOf(s: Setup): string | undefined {
  if (s.server_name !== undefined) return s.server_name;
  return named(s.host) ? s.host : undefined;
}

/**
 * TLS on the client's own socket: lua-resty-redis 0.27 has no ssl option, and
 * this way both clients behave the same. Never plaintext: any failure is an
 * error (the caller closes the connection). lua-resty-core 0.1.25's
 * sslhandshake sometimes raises on a verification failure instead of
 * returning an error: hence the pcall. ssl_verify checks the chain against
 * lua_ssl_trusted_certificate and the name (nameOf) against the certificate.
 */
function tls(sock: NgxTcpSocket | undefined, s: Setup): string | undefined {
  if (sock === undefined) {
    return "dlock: redis " + s.endpoint + ": TLS: the Redis client has no socket";
  }
  if (s.client_cert !== undefined) {
    const cerr = apply_cert(sock, s.client_cert);
    if (cerr !== undefined) return "dlock: redis " + s.endpoint + ": TLS client certificate: " + cerr;
  }
  const name = nameOf(s);
  const [ok, session, err] = lua_pcall(shake, sock, name, s.ssl_verify);
  if (!ok || session === undefined) {
    // A raise leaves its message where the session would be.
    let why: unknown = session;
    if (ok) why = err;
    return "dlock: redis " + s.endpoint + ": TLS handshake failed: " + check.text(why) + refusedBy(why === "handshake failed", s) +
      unverified(why, s, name) + plaintext(why, s);
  }
  return undefined;
}

/**
 * The first reply over TLS proves the handshake: the same lua-resty-core has
 * been seen to report success on a failed one. A Redis error reply (false)
 * came through TLS; a socket error (nil) did not.
 */
function viaTls(s: Setup, ok: unknown, err: string | undefined): string | undefined {
  if (s.ssl && ok === undefined) {
    return "dlock: redis " + s.endpoint + ": TLS handshake failed: " + lua_tostring(err) + refusedBy(true, s);
  }
  return undefined;
}

/** Set up a fresh connection (sock: its cosocket, connection.socket); nil, or what went wrong (the caller closes it). */
export function run(red: RestyRedis, sock: NgxTcpSocket | undefined, s: Setup): string | undefined {
  if (s.ssl) {
    const terr = tls(sock, s);
    if (terr !== undefined) return terr;
  }
  const c = s.credentials;
  if (c !== undefined) {
    const password = secrets.get(c);
    // Two-argument AUTH is the ACL form (Redis >= 6); one argument is requirepass.
    let ok: string | false | undefined;
    let err: string | undefined;
    if (c.username !== undefined) {
      [ok, err] = red.auth(c.username, password);
    } else {
      [ok, err] = red.auth(password);
    }
    if (!ok) {
      const terr = viaTls(s, ok, err);
      if (terr !== undefined) return terr;
      const away = turnedAway(s.endpoint, err, s.asSentinel === true);
      if (away !== undefined) return away;
      // The user, never the password: which of several credentials is wrong.
      return "dlock: redis " + s.endpoint + ": authentication failed for user " + (c.username ?? "default") + ": " + lua_tostring(err);
    }
  } else if (s.ssl) {
    const [pong, err] = red.ping();
    if (pong !== "PONG") {
      const terr = viaTls(s, pong, err);
      if (terr !== undefined) return terr;
      const away = turnedAway(s.endpoint, err, s.asSentinel === true);
      if (away !== undefined) return away;
      return "dlock: redis " + s.endpoint + ": PING after the TLS handshake failed: " + lua_tostring(err);
    }
  }
  if (s.db !== 0) {
    const [ok, err] = red.select(s.db);
    if (!ok) {
      const away = turnedAway(s.endpoint, err, s.asSentinel === true);
      if (away !== undefined) return away;
      return "dlock: redis " + s.endpoint + ": SELECT " + lua_tostring(s.db) + " failed: " + lua_tostring(err);
    }
  }
  return undefined;
}
