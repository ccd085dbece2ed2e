// The `redis` option table: what a factory's Redis is and how to reach it (a RedisConf),
// and the client library. Configurations derived from it: derived.ts; connections:
// connection.ts; the backend, once: backend.ts.

import type { Backend } from "./backend";
import * as check from "../core/check";
import * as clientcert from "./clientcert";
import * as derived from "./derived";
import * as setup from "./setup";
import * as schema from "../core/schema";
import * as sentinel from "./sentinel";

const lua_tostring = tostring;
const lua_require = require;
const lua_pcall = pcall;
const lua_rawget = rawget;
const lua_type = type;
const literal = schema.literal;
const tbl_concat = table.concat;
const str_format = string.format;
const crc32_long = ngx.crc32_long;

function loadClient(this: void): RestyRedisModule | undefined {
  // OpenResty ships resty.redis; Debian ships the same library (0.27) as nginx.redis.
  const names = ["resty.redis", "nginx.redis"];
  for (const i of $range(1, names.length)) {
    const [ok, mod] = lua_pcall(lua_require, names[i - 1]!);
    if (ok && lua_type(mod) === "table") return mod as RestyRedisModule;
  }
  return undefined;
}

/** The client library (connection.ts uses it); nil when neither is installed. */
export const library = loadClient();
// set_timeouts arrived in lua-resty-redis 0.28 (with its `ssl` options, which 0.27
// silently ignores: TLS is done on the socket, in setup.ts, for both).
export const hasTimeouts = library !== undefined && lua_rawget(library, "set_timeouts") !== undefined;

export interface RedisConf {
  readonly host: string;
  readonly port: number;
  readonly path: string | undefined;
  /** AUTH's user and a digest; the password is kept by redis/setup.ts. */
  readonly credentials: setup.Credentials | undefined;
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
  /** The certificate TLS handshakes present (redis.ssl_client_cert and ssl_client_priv_key), if any. */
  readonly client_cert: clientcert.ClientCert | undefined;
  /** Calls of concurrent requests of a worker share round trips (pipeline.ts). */
  readonly auto_pipeline: boolean;
  /** Pool name: endpoint, db, TLS and a credentials digest, so pools never mix. */
  readonly pool: string;
  /**
   * Which Redis keyspace (endpoint, db and TLS server name, "<8 hex>|"): the shared dict's
   * records of leases put it in front of their Redis key, so that two factories
   * with one dict and prefix on two servers or dbs never take each other's
   * record for their own (core/ledger.ts).
   */
  readonly keyspace: string;
  /** "host:port" or the socket path, for messages. */
  readonly endpoint: string;
  /** Who gave host and port when the servers did, not the operator (hints.BY_CLUSTER), for messages. */
  readonly announced: string | undefined;
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
  /** Keys a script touches must share a slot: a cluster, or one of its nodes. */
  readonly slotted: boolean;
  /** Auto-pipelining senders per worker for this server (pipeline.ts): 2 for a lone server, 1 for each master of a set. */
  readonly senders: number;
  /** What serves this configuration, chosen once by backend.parse (nil for a server of a cluster or Redlock set). */
  readonly backend: Backend | undefined;
}

export type Topology = "standalone" | "unix" | "sentinel" | "cluster" | "redlock";

const MAX_MS = 3600000;
/** Cluster: MOVED/ASK redirections followed per call when redis.cluster.max_redirects is not given. */
const MAX_REDIRECTS = 5;

interface ClusterOptions {
  readonly nodes: schema.Node[];
  readonly max_redirects: number;
}

/** What the `redis` schema hands back, before parse() derives the topology, pools and nodes. */
interface Options {
  readonly sentinel: sentinel.SentinelConf | undefined;
  readonly cluster: ClusterOptions | undefined;
  readonly redlock: schema.Node[] | undefined;
  readonly path: string | undefined;
  readonly host: string;
  readonly port: number;
  readonly username: string | undefined;
  readonly password: string | undefined;
  readonly db: number;
  readonly connect_timeout: number;
  readonly read_timeout: number;
  readonly pool_size: number;
  readonly keepalive_timeout: number;
  readonly backlog: number | undefined;
  readonly replicas: number;
  readonly replicas_timeout: number;
  readonly ssl: boolean;
  readonly ssl_verify: boolean;
  readonly server_name: string | undefined;
  readonly ssl_client_cert: string | undefined;
  readonly ssl_client_priv_key: string | undefined;
  readonly auto_pipeline: boolean;
}

/** The `redis.cluster` table (README's tables are checked against these: spec/options_spec.lua). */
export const CLUSTER: schema.Spec[] = [
  { name: "nodes", kind: "nodes", required: true },
  { name: "max_redirects", kind: "integer", min: 1, max: 16, unit: "a positive integer", default: MAX_REDIRECTS },
];
const clusterOptions = schema.compile<ClusterOptions>("redis.cluster", CLUSTER);

/** ssl_verify and server_name mean nothing without TLS: one message for both. */
const NEEDS_SSL: schema.Rule = { option: "ssl", must: "true", shared: ["ssl_verify", "server_name"] };
/** A client certificate is presented in a TLS handshake: none without TLS. */
const CERT_NEEDS_SSL: schema.Rule = { option: "ssl", must: "true", shared: ["ssl_client_cert", "ssl_client_priv_key"] };
/** Longest PEM text (or path) of a certificate chain or a key. */
const MAX_PEM = 1048576;

// One address per factory: host and port, a socket path, sentinels, a cluster or Redlock masters.
export const REDIS: schema.Spec[] = [
  { name: "sentinel", kind: "table", table: sentinel.parse, excludes: ["host", "port", "path", "cluster", "redlock"] },
  { name: "cluster", kind: "table", table: clusterOptions, excludes: ["host", "port", "path", "sentinel", "redlock"] },
  {
    name: "redlock", kind: "nodes", min: 3, unit: "independent masters",
    excludes: ["host", "port", "path", "sentinel", "cluster"],
  },
  { name: "path", kind: "string", maxLen: 4096, prefix: "unix:", excludes: ["host", "port"], excludesAsOne: true },
  { name: "host", kind: "string", maxLen: 255, host: true, default: "127.0.0.1" },
  { name: "port", kind: "integer", min: 1, max: 65535, unit: "an integer port number", default: 6379 },
  { name: "username", kind: "string", maxLen: 1024, requires: [{ option: "password", must: "set" }] },
  { name: "password", kind: "string", secret: true },
  {
    name: "db", kind: "integer", min: 0, max: 1000000, unit: "a non-negative integer", default: 0, idle: 0,
    requires: [{ option: "cluster", must: "unset", why: "Redis Cluster has one database" }],
  },
  { name: "connect_timeout", kind: "integer", min: 1, max: MAX_MS, unit: "a positive integer of ms", default: 1000 },
  { name: "read_timeout", kind: "integer", min: 1, max: MAX_MS, unit: "a positive integer of ms", default: 1000 },
  { name: "pool_size", kind: "integer", min: 1, max: 100000, unit: "a positive integer", default: 64 },
  { name: "keepalive_timeout", kind: "integer", min: 0, max: MAX_MS, unit: "a non-negative integer of ms", default: 60000 },
  { name: "backlog", kind: "integer", min: 0, max: 100000, unit: "a non-negative integer" },
  {
    name: "replicas", kind: "integer", min: 0, max: 100, unit: "a non-negative integer", default: 0, idle: 0,
    requires: [{ option: "redlock", must: "unset", why: "a Redlock majority is its replication: WAIT does not apply" }],
  },
  {
    name: "replicas_timeout", kind: "integer", min: 1, max: MAX_MS, unit: "a positive integer of ms", default: 50,
    requires: [{ option: "replicas", must: "positive" }],
  },
  { name: "auto_pipeline", kind: "boolean", default: true },
  { name: "ssl", kind: "boolean", default: false },
  { name: "ssl_verify", kind: "boolean", default: false, idle: false, requires: [NEEDS_SSL] },
  { name: "server_name", kind: "string", maxLen: 255, requires: [NEEDS_SSL], doc: "the host name" },
  {
    name: "ssl_client_cert", kind: "string", maxLen: MAX_PEM,
    requires: [{ option: "ssl_client_priv_key", must: "set" }, CERT_NEEDS_SSL],
  },
  {
    name: "ssl_client_priv_key", kind: "string", maxLen: MAX_PEM, secret: true,
    requires: [{ option: "ssl_client_cert", must: "set" }, CERT_NEEDS_SSL],
  },
];
const redisOptions = schema.compile<Options>("redis", REDIS);

/** Per endpoint, the first configuration seen for it: what status pages show of the topology. */
const known = new LuaTable<string, RedisConf>();

/**
 * Validate the `redis` option table of dlock.new and friends. `dict` is the
 * factory's lua_shared_dict: the eviction finding is shared there.
 */
export function parse(v: unknown, dict?: NgxSharedDict): LuaMultiReturn<[RedisConf | undefined, string | undefined]> {
  if (library === undefined) {
    return $multi(undefined, "dlock: no Redis client library: install lua-resty-redis (resty.redis) or Debian's lua-nginx-redis (nginx.redis)");
  }
  const [o, oerr] = redisOptions(v);
  if (o === undefined) return $multi(undefined, oerr);

  let topology: Topology = "standalone";
  let seeds: schema.Node[] | undefined;
  let maxRedirects = MAX_REDIRECTS;
  if (o.cluster !== undefined) {
    topology = "cluster";
    seeds = o.cluster.nodes;
    maxRedirects = o.cluster.max_redirects;
  } else if (o.redlock !== undefined) {
    topology = "redlock";
    seeds = o.redlock;
    // One server named twice would count twice toward a majority it alone decides.
    const seen = new LuaTable<string, boolean>();
    for (const i of $range(1, seeds.length)) {
      const n = seeds[i - 1]!;
      const name = n.host + ":" + lua_tostring(n.port);
      if (seen.has(name)) {
        return check.fail("redis.redlock names " + name + " twice: its masters must be independent", name);
      }
      seen.set(name, true);
    }
  } else if (o.sentinel !== undefined) {
    topology = "sentinel";
  } else if (o.path !== undefined) {
    topology = "unix";
  }

  const sent = o.sentinel;
  // An IPv6 address in brackets, as nginx connects to it and as "host:port" names it.
  const host = literal(o.host);
  let endpoint = o.path ?? host + ":" + lua_tostring(o.port);
  if (sent !== undefined) {
    endpoint = "sentinel " + sent.master;
  } else if (seeds !== undefined) {
    const names: string[] = [];
    for (const i of $range(1, seeds.length)) names.push(seeds[i - 1]!.host + ":" + lua_tostring(seeds[i - 1]!.port));
    endpoint = topology + " " + tbl_concat(names, ",");
  }
  let cert: clientcert.ClientCert | undefined;
  if (o.ssl_client_cert !== undefined) {
    const [c, cerr] = clientcert.load(o.ssl_client_cert, o.ssl_client_priv_key!);
    if (c === undefined) return $multi(undefined, cerr);
    cert = c;
  }
  let pool = "dlock:" + derived.tlsTag(o, cert) + endpoint + ":" + lua_tostring(o.db);
  if (sent !== undefined) {
    pool = pool + ":" + sent.id;
    // Two factories asking the same sentinels with other credentials share no answers.
    if (sent.credentials !== undefined) pool = pool + ":" + sent.credentials.digest;
  }
  const credentials = setup.credentials(o.username, o.password);
  if (credentials !== undefined) {
    // A digest, not the secret, ends up in the pool name (it shows in debug logs).
    pool = pool + ":" + credentials.digest;
  }
  // The server name too: behind a proxy that routes by SNI, one host:port is several Redis.
  let space = endpoint + " " + lua_tostring(o.db);
  if (o.ssl) space = space + " tls=" + (o.server_name ?? "");
  if (sent !== undefined) space = space + " " + sent.id;
  const conf: RedisConf = {
    host, port: o.port, path: o.path, credentials, db: o.db,
    connect_timeout: o.connect_timeout,
    read_timeout: o.read_timeout,
    pool_size: o.pool_size,
    backlog: o.backlog, replicas: o.replicas, replicas_timeout: o.replicas_timeout,
    keepalive_timeout: o.keepalive_timeout,
    ssl: o.ssl, ssl_verify: o.ssl_verify, server_name: o.server_name, client_cert: cert, auto_pipeline: o.auto_pipeline,
    pool, keyspace: str_format("%08x|", crc32_long(space)),
    endpoint, announced: undefined, dict, sentinel: sent,
    topology, nodes: undefined, max_redirects: maxRedirects, slotted: topology === "cluster", backend: undefined,
    senders: 2,
  };
  if (seeds !== undefined) {
    const nodes: RedisConf[] = [];
    for (const i of $range(1, seeds.length)) nodes.push(derived.node(conf, seeds[i - 1]!.host, seeds[i - 1]!.port));
    (conf as { nodes: RedisConf[] | undefined }).nodes = nodes;
  }
  if (!known.has(endpoint)) known.set(endpoint, conf);
  return $multi(conf, undefined);
}

/** The Redis endpoints factories of this worker were made for (bounded by distinct configurations). */
export function endpoints(): LuaTable<string, RedisConf> {
  return known;
}


