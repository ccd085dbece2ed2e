// Redis connections: option parsing, the client library, pooling, AUTH/SELECT.
// Every Redis round trip in lua-resty-dlock goes through connect()/done().

import * as check from "./check";
import * as eviction from "./eviction";
import * as sentinel from "./sentinel";

function loadClient(this: void): RestyRedisModule | undefined {
  // OpenResty ships resty.redis; Debian ships the same library (0.27) as nginx.redis.
  for (const name of ["resty.redis", "nginx.redis"]) {
    const [ok, mod] = pcall(require, name);
    if (ok && type(mod) === "table") {
      return mod as RestyRedisModule;
    }
  }
  return undefined;
}

const client = loadClient();
// set_timeouts arrived in lua-resty-redis 0.28 (with its `ssl` options, which 0.27
// silently ignores: TLS is done here, on the socket, for both).
const clientHasTimeouts = client !== undefined && rawget(client, "set_timeouts") !== undefined;

export interface RedisConf {
  readonly host: string;
  readonly port: number;
  readonly path: string | undefined;
  readonly username: string | undefined;
  readonly password: string | undefined;
  readonly db: number;
  readonly connect_timeout: number;
  readonly read_timeout: number;
  readonly pool_size: number;
  readonly backlog: number | undefined;
  /** WAIT for this many replicas after a write that must survive a failover (0: no WAIT). */
  readonly replicas: number;
  readonly replicas_timeout: number;
  readonly keepalive_timeout: number;
  readonly ssl: boolean;
  readonly ssl_verify: boolean;
  readonly server_name: string | undefined;
  /** Pool name: endpoint, db, TLS and a credentials digest, so pools never mix. */
  readonly pool: string;
  /** "host:port" or the socket path, for messages. */
  readonly endpoint: string;
  /** Discover the master through these sentinels (host and port are unused then). */
  readonly sentinel: sentinel.SentinelConf | undefined;
  /** Where the eviction check shares its finding with the other workers (see checkEviction). */
  readonly dict: NgxSharedDict | undefined;
  /** Which backend serves this configuration (see backend.ts). */
  readonly topology: Topology;
  /** Cluster: the seed nodes; Redlock: the independent masters. Each a standalone configuration. */
  readonly nodes: RedisConf[] | undefined;
  /** Cluster: MOVED/ASK redirections followed per call before giving up. */
  readonly max_redirects: number;
}

export type Topology = "standalone" | "unix" | "sentinel" | "cluster" | "redlock";

const REDIS_OPTIONS = check.set(
  "host", "port", "path", "username", "password", "db",
  "connect_timeout", "read_timeout", "pool_size", "backlog", "keepalive_timeout",
  "ssl", "ssl_verify", "server_name", "replicas", "replicas_timeout", "sentinel", "cluster", "redlock",
);
const CLUSTER_OPTIONS = check.set("nodes", "max_redirects");
const MAX_MS = 3600000;

/**
 * Validate the `redis` option table of dlock.new and friends. `dict` is the
 * factory's lua_shared_dict: the eviction finding is shared there.
 */
export function parse(v: unknown, dict?: NgxSharedDict): LuaMultiReturn<[RedisConf | undefined, string | undefined]> {
  if (client === undefined) {
    return $multi(undefined, "dlock: no Redis client library: install lua-resty-redis (resty.redis) or Debian's lua-nginx-redis (nginx.redis)");
  }
  const [o, oerr] = check.options("redis", v, REDIS_OPTIONS);
  if (o === undefined) return $multi(undefined, oerr);

  let host = "127.0.0.1";
  let port = 6379;
  let path: string | undefined;
  let sent: sentinel.SentinelConf | undefined;
  let seeds: sentinel.Node[] | undefined;
  let maxRedirects = 5;
  let topology: Topology = "standalone";
  const exclusive = ["host", "port", "path", "sentinel", "cluster", "redlock"];
  for (const a of ["sentinel", "cluster", "redlock"]) {
    if (o.get(a) !== undefined) {
      for (const b of exclusive) {
        if (b !== a && o.get(b) !== undefined) {
          return check.fail("redis." + a + " excludes redis." + b, o.get(b));
        }
      }
    }
  }
  if (o.get("cluster") !== undefined) {
    const [c, cerr] = check.options("redis.cluster", o.get("cluster"), CLUSTER_OPTIONS);
    if (c === undefined) return $multi(undefined, cerr);
    const [list, lerr] = sentinel.parseNodes("redis.cluster.nodes", c.get("nodes"));
    if (list === undefined) return $multi(undefined, lerr);
    seeds = list;
    if (c.get("max_redirects") !== undefined) {
      const [n, err] = check.integer("redis.cluster.max_redirects", c.get("max_redirects"), 1, 16, "a positive integer");
      if (n === undefined) return $multi(undefined, err);
      maxRedirects = n;
    }
    if (o.get("db") !== undefined && o.get("db") !== 0) {
      return check.fail("redis.db is refused with redis.cluster (Redis Cluster has one database)", o.get("db"));
    }
    topology = "cluster";
  } else if (o.get("redlock") !== undefined) {
    const [list, lerr] = sentinel.parseNodes("redis.redlock", o.get("redlock"));
    if (list === undefined) return $multi(undefined, lerr);
    if (list.length < 3) {
      return check.fail("redis.redlock needs at least 3 independent masters", list.length);
    }
    seeds = list;
    topology = "redlock";
  } else if (o.get("sentinel") !== undefined) {
    const [sc, serr] = sentinel.parse(o.get("sentinel"));
    if (sc === undefined) return $multi(undefined, serr);
    sent = sc;
    topology = "sentinel";
  } else if (o.get("path") !== undefined) {
    if (o.get("host") !== undefined || o.get("port") !== undefined) {
      return check.fail("redis.path excludes redis.host and redis.port", o.get("path"));
    }
    const [p, err] = check.str("redis.path", o.get("path"), 4096);
    if (p === undefined) return $multi(undefined, err);
    if (string.sub(p, 1, 5) !== "unix:") {
      return check.fail("redis.path must start with \"unix:\"", p);
    }
    path = p;
    topology = "unix";
  } else {
    if (o.get("host") !== undefined) {
      const [h, err] = check.str("redis.host", o.get("host"), 255);
      if (h === undefined) return $multi(undefined, err);
      host = h;
    }
    if (o.get("port") !== undefined) {
      const [p, err] = check.integer("redis.port", o.get("port"), 1, 65535, "an integer port number");
      if (p === undefined) return $multi(undefined, err);
      port = p;
    }
  }

  let username: string | undefined;
  let password: string | undefined;
  if (o.get("username") !== undefined) {
    const [u, err] = check.str("redis.username", o.get("username"), 1024);
    if (u === undefined) return $multi(undefined, err);
    username = u;
  }
  if (o.get("password") !== undefined) {
    if (type(o.get("password")) !== "string") {
      // Never echo a password back, not even a mistyped one.
      return $multi(undefined, "dlock: redis.password must be a string, got a " + type(o.get("password")));
    }
    password = o.get("password") as string;
  }
  if (username !== undefined && password === undefined) {
    return $multi(undefined, "dlock: redis.username needs redis.password");
  }

  const ints = new LuaTable<string, number>();
  const defaults: [string, number, number, number, string][] = [
    ["db", 0, 0, 1000000, "a non-negative integer"],
    ["connect_timeout", 1000, 1, MAX_MS, "a positive integer of ms"],
    ["read_timeout", 1000, 1, MAX_MS, "a positive integer of ms"],
    ["pool_size", 64, 1, 100000, "a positive integer"],
    ["keepalive_timeout", 60000, 0, MAX_MS, "a non-negative integer of ms"],
  ];
  for (const [name, dflt, min, max, unit] of defaults) {
    const v = o.get(name);
    if (v === undefined) {
      ints.set(name, dflt);
    } else {
      const [n, err] = check.integer("redis." + name, v, min, max, unit);
      if (n === undefined) return $multi(undefined, err);
      ints.set(name, n);
    }
  }
  let backlog: number | undefined;
  if (o.get("backlog") !== undefined) {
    const [n, err] = check.integer("redis.backlog", o.get("backlog"), 0, 100000, "a non-negative integer");
    if (n === undefined) return $multi(undefined, err);
    backlog = n;
  }
  let replicas = 0;
  if (o.get("replicas") !== undefined) {
    const [n, err] = check.integer("redis.replicas", o.get("replicas"), 0, 100, "a non-negative integer");
    if (n === undefined) return $multi(undefined, err);
    replicas = n;
  }
  let replicasTimeout = 50;
  if (o.get("replicas_timeout") !== undefined) {
    if (replicas === 0) {
      return check.fail("redis.replicas_timeout needs redis.replicas > 0", o.get("replicas_timeout"));
    }
    const [n, err] = check.integer("redis.replicas_timeout", o.get("replicas_timeout"), 1, MAX_MS, "a positive integer of ms");
    if (n === undefined) return $multi(undefined, err);
    replicasTimeout = n;
  }

  let ssl = false;
  let sslVerify = false;
  let serverName: string | undefined;
  if (o.get("ssl") !== undefined) {
    const [b, err] = check.bool("redis.ssl", o.get("ssl"));
    if (b === undefined) return $multi(undefined, err);
    ssl = b;
  }
  if (o.get("ssl_verify") !== undefined) {
    const [b, err] = check.bool("redis.ssl_verify", o.get("ssl_verify"));
    if (b === undefined) return $multi(undefined, err);
    sslVerify = b;
  }
  if (o.get("server_name") !== undefined) {
    const [s, err] = check.str("redis.server_name", o.get("server_name"), 255);
    if (s === undefined) return $multi(undefined, err);
    serverName = s;
  }
  if (!ssl && (sslVerify || serverName !== undefined)) {
    return $multi(undefined, "dlock: redis.ssl_verify and redis.server_name need redis.ssl = true");
  }

  let endpoint = path ?? host + ":" + port;
  if (sent !== undefined) {
    endpoint = "sentinel " + sent.master;
  } else if (seeds !== undefined) {
    const names: string[] = [];
    for (const n of seeds) names.push(n.host + ":" + n.port);
    endpoint = topology + " " + table.concat(names, ",");
  }
  const db = ints.get("db");
  // A connection verified for one name (or not verified) must not serve a factory that asks for another.
  let tls = "";
  if (ssl) {
    tls = sslVerify ? "tls+verify=" + (serverName ?? "") + ":" : "tls:";
  }
  let pool = "dlock:" + tls + endpoint + ":" + db;
  if (sent !== undefined) {
    pool = pool + ":" + sent.id;
  }
  if (password !== undefined) {
    // A digest, not the secret, ends up in the pool name (it shows in debug logs).
    pool = pool + ":" + string.sub(ngx.md5((username ?? "") + "\0" + password), 1, 16);
  }
  const conf: RedisConf = {
    host, port, path, username, password, db,
    connect_timeout: ints.get("connect_timeout"),
    read_timeout: ints.get("read_timeout"),
    pool_size: ints.get("pool_size"),
    backlog, replicas, replicas_timeout: replicasTimeout,
    keepalive_timeout: ints.get("keepalive_timeout"),
    ssl, ssl_verify: sslVerify, server_name: serverName,
    pool, endpoint, dict, sentinel: sent,
    topology, nodes: undefined, max_redirects: maxRedirects,
  };
  if (seeds !== undefined) {
    const nodes: RedisConf[] = [];
    for (const n of seeds) nodes.push(node(conf, n.host, n.port));
    (conf as { nodes: RedisConf[] | undefined }).nodes = nodes;
  }
  if (!known.has(endpoint)) {
    known.set(endpoint, conf);
  }
  return $multi(conf, undefined);
}

/**
 * One server of a cluster or a Redlock set: the settings of `conf` (credentials,
 * TLS, timeouts, pools per endpoint) for host:port alone.
 */
export function node(conf: RedisConf, host: string, port: number): RedisConf {
  const endpoint = host + ":" + port;
  let tls = "";
  if (conf.ssl) {
    tls = conf.ssl_verify ? "tls+verify=" + (conf.server_name ?? "") + ":" : "tls:";
  }
  let pool = "dlock:" + tls + endpoint + ":" + conf.db;
  if (conf.password !== undefined) {
    pool = pool + ":" + string.sub(ngx.md5((conf.username ?? "") + "\0" + conf.password), 1, 16);
  }
  return {
    host, port, path: undefined, username: conf.username, password: conf.password, db: conf.db,
    connect_timeout: conf.connect_timeout, read_timeout: conf.read_timeout,
    pool_size: conf.pool_size, backlog: conf.backlog,
    replicas: conf.replicas, replicas_timeout: conf.replicas_timeout,
    keepalive_timeout: conf.keepalive_timeout,
    ssl: conf.ssl, ssl_verify: conf.ssl_verify, server_name: conf.server_name,
    pool, endpoint, dict: conf.dict, sentinel: undefined,
    topology: "standalone", nodes: undefined, max_redirects: conf.max_redirects,
  };
}

/** Per endpoint, the first configuration seen for it: what status pages show of the topology. */
const known = new LuaTable<string, RedisConf>();

/** The Redis endpoints factories of this worker were made for (bounded by distinct configurations). */
export function endpoints(): LuaTable<string, RedisConf> {
  return known;
}


/**
 * A ready connection from the pool (or a fresh one, authenticated and with the
 * db selected). Errors name the endpoint: "dlock: redis 127.0.0.1:6379: connection refused".
 */
export function connect(conf: RedisConf): LuaMultiReturn<[RestyRedis | undefined, string | undefined]> {
  const [red, nerr] = (client as RestyRedisModule).new();
  if (red === undefined) {
    return $multi(undefined, "dlock: redis client: " + tostring(nerr));
  }
  // Never touch red.set_timeouts on 0.27: its __index would turn the name into a Redis command.
  if (clientHasTimeouts) {
    red.set_timeouts!(conf.connect_timeout, conf.read_timeout, conf.read_timeout);
  } else {
    red.set_timeout(conf.connect_timeout);
  }
  let host = conf.host;
  let port = conf.port;
  let pool = conf.pool;
  if (conf.sentinel !== undefined) {
    let m = sentinel.cached(conf.pool);
    if (m === undefined) {
      const [found, serr] = sentinel.discover(conf.pool, conf.sentinel, client as RestyRedisModule, conf.connect_timeout);
      if (found === undefined) return $multi(undefined, serr);
      m = found;
    }
    host = m.host;
    port = m.port;
    // One pool per master: connections to a demoted one are never handed out again.
    pool = conf.pool + "@" + host + ":" + port;
  }
  const opts: RedisConnectOptions = { pool, pool_size: conf.pool_size, backlog: conf.backlog };
  const [ok, err] = red.connect(conf.path ?? host, conf.path !== undefined ? opts : port, opts);
  if (ok === undefined) {
    stale(conf);
    return $multi(undefined, "dlock: redis " + conf.endpoint + ": " + tostring(err));
  }
  if (!clientHasTimeouts) {
    red.set_timeout(conf.read_timeout);
  }
  const [reused] = red.get_reused_times();
  if (reused === 0) {
    let ierr: string | undefined;
    if (conf.ssl) ierr = handshake(red, conf);
    if (ierr === undefined && conf.sentinel !== undefined) ierr = isMaster(red, conf, host, port);
    if (ierr === undefined) ierr = init(red, conf);
    if (ierr === undefined) ierr = eviction.check(red, conf);
    if (ierr !== undefined) {
      red.close();
      return $multi(undefined, ierr);
    }
  }
  return $multi(red, undefined);
}

function shake(this: void, sock: NgxTcpSocket, serverName: string | undefined, verify: boolean): LuaMultiReturn<[unknown, string | undefined]> {
  return sock.sslhandshake(undefined, serverName, verify);
}

/**
 * TLS on a fresh connection (a pooled one did it when it was fresh), on the
 * client's own socket: lua-resty-redis 0.27 has no ssl option, and this way
 * both clients behave the same. Never plaintext: any failure is an error and
 * the connection is closed, never pooled. lua-resty-core 0.1.25's sslhandshake
 * sometimes raises on a verification failure instead of returning an error,
 * and has been seen to report success on a failed one: hence the pcall, and a
 * PING before the connection is used. ssl_verify checks the chain against
 * lua_ssl_trusted_certificate and the name against server_name.
 */
function handshake(red: RestyRedis, conf: RedisConf): string | undefined {
  // Both 0.27 and 0.28 keep their cosocket in the `_sock` field.
  const sock = rawget(red as unknown as { _sock: NgxTcpSocket | undefined }, "_sock");
  if (sock === undefined) {
    return "dlock: redis " + conf.endpoint + ": TLS: the Redis client has no socket";
  }
  const [ok, session, err] = pcall(shake, sock, conf.server_name, conf.ssl_verify);
  if (!ok || session === undefined) {
    // A raise leaves its message where the session would be.
    let why: unknown = session;
    if (ok) why = err;
    return "dlock: redis " + conf.endpoint + ": TLS handshake failed: " + check.text(why);
  }
  const [pong, perr] = red.ping();
  if (pong !== "PONG") {
    return "dlock: redis " + conf.endpoint + ": TLS handshake failed: " + tostring(perr ?? pong);
  }
  return undefined;
}

/** AUTH and SELECT, once per fresh connection (pooled ones are already set up). */
function init(red: RestyRedis, conf: RedisConf): string | undefined {
  if (conf.password !== undefined) {
    // Two-argument AUTH is the ACL form (Redis >= 6); one argument is requirepass.
    const args = conf.username !== undefined ? [conf.username, conf.password] : [conf.password];
    const [ok, err] = red.auth(...args);
    if (!ok) {
      // The user, never the password: which of several credentials is wrong.
      return "dlock: redis " + conf.endpoint + ": authentication failed for user " + (conf.username ?? "default") +
        ": " + tostring(err);
    }
  }
  if (conf.db !== 0) {
    const [ok, err] = red.select(conf.db);
    if (!ok) {
      return "dlock: redis " + conf.endpoint + ": SELECT " + conf.db + " failed: " + tostring(err);
    }
  }
  return undefined;
}

/**
 * Hand the connection back. After a network error lua-resty-redis has already
 * closed the socket (a read timeout closes it), so only healthy ones are pooled.
 */
export function done(red: RestyRedis, conf: RedisConf, healthy: boolean): void {
  if (healthy) {
    red.set_keepalive(conf.keepalive_timeout, conf.pool_size);
  } else {
    red.close();
    stale(conf);
  }
}

/**
 * The server may no longer be the master (a connection error, READONLY,
 * LOADING): with Sentinel, ask the sentinels again on the next connection.
 */
export function stale(conf: RedisConf): void {
  if (conf.sentinel !== undefined) {
    sentinel.forget(conf.pool);
  }
}

/** ROLE on a fresh connection to the master Sentinel named: a just-demoted one must not take locks. */
function isMaster(red: RestyRedis, conf: RedisConf, host: string, port: number): string | undefined {
  const [role, err] = red.role();
  if (type(role) === "table" && (role as LuaTable<number, unknown>).get(1) === "master") {
    return undefined;
  }
  sentinel.forget(conf.pool);
  const what = type(role) === "table" ? "a " + tostring((role as LuaTable<number, unknown>).get(1)) : tostring(err);
  return "dlock: redis " + conf.endpoint + ": " + host + ":" + port + " is " + what +
    ", not the master (a failover is under way); asking the sentinels again";
}
