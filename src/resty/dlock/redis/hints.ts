// What a failure most likely means, said to the operator: the hints the
// connection module (connection.ts, setup.ts, roundtrip.ts, eviction.ts,
// sentinel.ts) appends to an error, or says instead of a misleading one, when
// the cause is not in the error's own words. Each names what to look at: an
// option here, a directive of nginx, a setting of redis-server.

import type { Setup } from "./setup";

const lua_tostring = tostring;
const lua_type = type;
const str_find = string.find;
const str_match = string.match;

/** Who gave an address the operator did not (RedisConf.announced), as the hints name them. */
const BY_CLUSTER = "the cluster";
const BY_SENTINELS = "the sentinels";

/**
 * Why a connect failed. nginx resolves a host name only through its `resolver`
 * directive, never /etc/hosts: "localhost" fails too without one.
 */
export function unconnected(err: string | undefined): string {
  const e = lua_tostring(err);
  if (str_find(e, "no resolver defined", 1, true)[0] === undefined) return e;
  return e + " (nginx resolves host names only through its resolver directive, never /etc/hosts: add one, or give an IP address)";
}

/**
 * A connect that failed to an address the servers gave rather than the
 * operator: a cluster's nodes and a Sentinel's master announce themselves
 * (cluster-announce-ip or -hostname; replica-announce-ip, announce-hostnames),
 * and behind NAT, Docker or Kubernetes that may be an address or name only
 * they can resolve and reach. `by`: BY_CLUSTER, BY_SENTINELS, or nil
 * (the operator's own address: "").
 */
export function announced(err: string, by: string | undefined): string {
  if (by === undefined) return "";
  if (str_find(err, "could not be resolved", 1, true)[0] === undefined && str_find(err, "timeout", 1, true)[0] === undefined &&
    str_find(err, "unreachable", 1, true)[0] === undefined && str_find(err, "no route to host", 1, true)[0] === undefined) {
    return "";
  }
  if (by === BY_CLUSTER) {
    return " (an address the cluster gave in CLUSTER SLOTS or MOVED: the nodes announce themselves by cluster-announce-ip " +
      "or cluster-announce-hostname, which nginx must be able to resolve and reach)";
  }
  return " (the master's address as " + by + " announce it: replica-announce-ip, or the names of announce-hostnames, " +
    "which nginx must be able to resolve and reach)";
}

/**
 * Why a connect to a unix socket failed, with what an operator looks at for
 * each: nginx's workers connect as the user of its `user` directive
 * (www-data on Debian), which a socket of mode 700 refuses.
 */
export function unreachableSocket(err: string | undefined): string {
  const e = lua_tostring(err);
  if (e === "permission denied") {
    return e + " (nginx's worker processes, as the user nginx.conf's user directive names, need write permission on the " +
      "socket: redis.conf's unixsocketperm, e.g. 770 with that user in the socket's group)";
  }
  if (e === "no such file or directory") return e + " (no socket at that path: is redis-server running, with unixsocket set to it?)";
  if (e === "connection refused") return e + " (nobody listens on that socket: redis-server is not running; a killed one leaves its socket file behind)";
  return e;
}

/**
 * What it most likely means when the server broke the connection off during
 * the handshake (a bare "handshake failed"; a failed verification of the
 * server's own certificate says more than that) or at the first reply (under
 * TLS 1.3 a client's side of the handshake may end before the server has
 * looked at its certificate). A redis-server does that to a client without a
 * certificate it trusts unless tls-auth-clients is off, and to one that offers
 * none of its TLS versions: Debian's nginx offers TLSv1.3 only where
 * lua_ssl_protocols names it, and Redis may be set to take TLSv1.3 alone.
 * nginx logs the server's alert, which tells which.
 */
export function refusedBy(broken: boolean, s: Setup): string {
  if (!broken) return "";
  const versions = "; or no TLS version it takes: lua_ssl_protocols (nginx's log has the server's alert)";
  if (s.client_cert === undefined) {
    return " (the server may want a client certificate, as redis-server does unless tls-auth-clients is no: " +
      "redis.ssl_client_cert and redis.ssl_client_priv_key" + versions + ")";
  }
  return " (the server may not trust the issuer of redis.ssl_client_cert: its tls-ca-cert-file" + versions + ")";
}

/**
 * What ssl_verify checked when it refused the server's certificate
 * (lua-nginx-module says "<X509 error code>: <reason>", or "certificate host
 * mismatch"): the operator's lua_ssl_trusted_certificate, its depth, the name.
 */
export function unverified(why: unknown, s: Setup, name: string | undefined): string {
  if (!s.ssl_verify || lua_type(why) !== "string") return "";
  if (why === "certificate host mismatch") {
    if (s.server_name !== undefined) return " (ssl_verify: the certificate does not name server_name " + s.server_name + ")";
    return " (ssl_verify: the certificate does not name " + lua_tostring(name) + ", the host it is reached by: " +
      "server_name, when given, is checked instead)";
  }
  if (str_find(why as string, "^%d+: ")[0] !== undefined) {
    return " (ssl_verify: the chain is checked against nginx's lua_ssl_trusted_certificate, up to lua_ssl_verify_depth)";
  }
  return "";
}

/**
 * A handshake that got no answer in time: a server listening in plaintext
 * waits for a command and never answers a ClientHello, so a TLS setting that
 * does not match the port looks like this (a slow server would too).
 */
export function plaintext(why: unknown, s: Setup): string {
  if (why !== "timeout") return "";
  const plain = " (a port in plaintext never answers a TLS handshake";
  if (s.announced === BY_CLUSTER) {
    // The map itself was read over TLS: the port is the cluster's choice, not the operator's.
    return plain + ", and the cluster gave this one in CLUSTER SLOTS or MOVED: " +
      "nodes with tls-cluster no announce their plaintext ports, to TLS clients too; tls-cluster yes on every node)";
  }
  const option = s.asSentinel === true ? "redis.sentinel.ssl" : "redis.ssl";
  return plain + ": is it a TLS port? " + option + ")";
}

/**
 * What it may mean when a fresh connection in plaintext is reset or closed at
 * its first command: a redis-server's TLS port does that to anything that is
 * not a TLS handshake. "" otherwise.
 */
export function tlsPort(err: string, ssl: boolean, option: string): string {
  if (ssl) return "";
  if (str_find(err, "connection reset by peer", 1, true)[0] === undefined && str_find(err, "closed$")[0] === undefined) return "";
  return " (a TLS port resets a connection in plaintext at once: if this is one, " + option + " = true)";
}

const MAXCLIENTS = "max number of clients reached";
const PROTECTED = " in protected mode";

/** An error (Redis' or turnedAway's) after which the server has closed the connection. */
export function closedAfter(err: string): boolean {
  return str_find(err, MAXCLIENTS, 1, true)[0] !== undefined || str_find(err, "DENIED", 1, true)[0] !== undefined &&
    str_find(err, PROTECTED, 1, true)[0] !== undefined;
}

/**
 * The refusals a redis-server (or a sentinel) answers a connection's first
 * command with, before it closes the connection: said as what they are, with
 * what to look at (`option`: where the password goes), not as a failed AUTH or
 * eviction check (or a TLS port's reset, which the next command meets). nil
 * for any other error.
 *   - at its maxclients, it takes no more connections;
 *   - in protected mode (no password for the default user, the default), it
 *     takes connections from its loopback interface only.
 */
function awayWhy(err: string | undefined, option: string): string | undefined {
  const e = lua_tostring(err);
  if (str_find(e, MAXCLIENTS, 1, true)[0] !== undefined) {
    return e + " (the server is at its maxclients and takes no more connections: each nginx worker keeps up to " +
      "redis.pool_size to it)";
  }
  if (str_find(e, "^DENIED Redis is running" + PROTECTED)[0] !== undefined) {
    return "DENIED: the server is" + PROTECTED + " (no password for its default user) and takes connections from its " +
      "loopback interface only: give it requirepass (and " + option + " here), or set protected-mode no where the " +
      "network is private";
  }
  return undefined;
}

/**
 * A server with EVAL and EVALSHA renamed away (rename-command, as hardened
 * setups do): every call of the locks is a script. Redis echoes the call's
 * first arguments, a lease's token among them, which stay out of the message.
 * nil for any other error.
 */
export function noScripts(endpoint: string, err: string | undefined): string | undefined {
  const [name] = str_match(lua_tostring(err), "^(ERR unknown command 'EVAL%w*')");
  if (name === undefined) return undefined;
  return "dlock: redis " + endpoint + ": " + name + " (every call of the locks is a Lua script: this server has EVAL " +
    "and EVALSHA renamed away, rename-command, or runs no scripts)";
}

/** awayWhy, as an error naming the endpoint; `sentinel`: a sentinel's own connection turned us away. */
export function turnedAway(endpoint: string, err: string | undefined, sentinel = false): string | undefined {
  const why = awayWhy(err, sentinel ? "redis.sentinel.password" : "redis.password");
  if (why === undefined) return undefined;
  return "dlock: redis " + endpoint + ": " + why;
}

/**
 * What a READONLY reply of a server given as the master means: it is a
 * replica now (promoted away by hand, or a failover nothing told nginx of),
 * and every lock write fails there until the configuration names the master.
 * "" for the topologies that find their master themselves.
 */
export function replica(topology: string, err: string): string {
  if ((topology !== "standalone" && topology !== "unix") || str_find(err, "READONLY", 1, true)[0] !== 1) return "";
  return " (this server is a replica now: lock writes need the master; point the configuration at it, or have Sentinel " +
    "name it: redis.sentinel)";
}

// Exported by name: this module's own uses of them are locals, not lookups in its exports table.
export { BY_CLUSTER, BY_SENTINELS, awayWhy };
