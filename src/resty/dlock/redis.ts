// Redis connections: option parsing, the client library, pooling, AUTH/SELECT.
// Every Redis round trip in lua-resty-dlock goes through connect()/done().

import * as check from "./check";

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
// set_timeouts and TLS arrived together in lua-resty-redis 0.28; 0.27 silently
// ignores `ssl = true` and would connect in plaintext.
const clientHasTls = client !== undefined && rawget(client, "set_timeouts") !== undefined;

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
  readonly keepalive_timeout: number;
  readonly ssl: boolean;
  readonly ssl_verify: boolean;
  readonly server_name: string | undefined;
  /** Pool name: endpoint, db, TLS and a credentials digest, so pools never mix. */
  readonly pool: string;
  /** "host:port" or the socket path, for messages. */
  readonly endpoint: string;
  /** Where the eviction check shares its finding with the other workers (see checkEviction). */
  readonly dict: NgxSharedDict | undefined;
}

const REDIS_OPTIONS = check.set(
  "host", "port", "path", "username", "password", "db",
  "connect_timeout", "read_timeout", "pool_size", "backlog", "keepalive_timeout",
  "ssl", "ssl_verify", "server_name",
);
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
  if (o.get("path") !== undefined) {
    if (o.get("host") !== undefined || o.get("port") !== undefined) {
      return check.fail("redis.path excludes redis.host and redis.port", o.get("path"));
    }
    const [p, err] = check.str("redis.path", o.get("path"), 4096);
    if (p === undefined) return $multi(undefined, err);
    if (string.sub(p, 1, 5) !== "unix:") {
      return check.fail("redis.path must start with \"unix:\"", p);
    }
    path = p;
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
  if (ssl && !clientHasTls) {
    return $multi(undefined, "dlock: redis.ssl = true needs lua-resty-redis >= 0.28 (resty.redis); the loaded client " +
      (client._VERSION ?? "?") + " would silently connect in plaintext");
  }
  if (!ssl && (sslVerify || serverName !== undefined)) {
    return $multi(undefined, "dlock: redis.ssl_verify and redis.server_name need redis.ssl = true");
  }

  const endpoint = path ?? host + ":" + port;
  const db = ints.get("db");
  let pool = "dlock:" + (ssl ? "tls:" : "") + endpoint + ":" + db;
  if (password !== undefined) {
    // A digest, not the secret, ends up in the pool name (it shows in debug logs).
    pool = pool + ":" + string.sub(ngx.md5((username ?? "") + "\0" + password), 1, 16);
  }
  return $multi({
    host, port, path, username, password, db,
    connect_timeout: ints.get("connect_timeout"),
    read_timeout: ints.get("read_timeout"),
    pool_size: ints.get("pool_size"),
    backlog,
    keepalive_timeout: ints.get("keepalive_timeout"),
    ssl, ssl_verify: sslVerify, server_name: serverName,
    pool, endpoint, dict,
  }, undefined);
}

// Eviction. With maxmemory set and any policy but noeviction, Redis deletes keys
// that have a ttl when it runs out of memory, and every lock key has one: an
// evicted lock lets a second holder in, silently. Each worker asks each pool's
// Redis once, on the pool's first fresh connection (a pool is an endpoint, db
// and credentials: another user may not be allowed to ask), and logs what it
// found once per endpoint. The finding is also kept in the factory's shared
// dict (the "dlock" dict for a conf parsed without one), so the status page of
// any worker shows it:
//   "redis:ep:<endpoint>"  "1 <checked_at_ms> <maxmemory> <policy>"  or  "0 <checked_at_ms> <why not>"
//   "redis:n"              how many endpoints are recorded
//   "redis:i:<n>"          the n-th endpoint (status reads these, it never walks the dict)
// A Redis whose policy changes is checked again after an nginx reload.

// Extra lua-resty-redis commands the check sends (any command name works on both
// 0.27 and 0.28: unknown names become commands through the module's __index).
declare global {
  interface RestyRedis {
    info(section: string): RedisResult<string>;
    config(subcommand: string, ...args: string[]): RedisResult;
  }
}

/** What one Redis endpoint's memory settings mean for lock keys. */
export interface Eviction {
  /** False when neither INFO memory nor CONFIG GET answered (ACL, renamed commands). */
  readonly checked: boolean;
  readonly policy: string;
  /** Bytes; 0 is no limit. */
  readonly maxmemory: number;
  /** The policy evicts keys with a ttl: every policy but noeviction (unknown future ones included). */
  readonly policyEvicts: boolean;
  /** policyEvicts and maxmemory is set: Redis drops lock keys once it is full. */
  readonly canEvict: boolean;
  /** Why it could not be checked (empty when checked). */
  readonly why: string;
  /** Epoch seconds. */
  readonly checkedAt: number;
}

const EVICTION_KEY = "redis:ep:";
const EVICTION_COUNT = "redis:n";
const EVICTION_INDEX = "redis:i:";

/** Pools this worker has checked (or is checking). */
const checkedPools = new LuaSet<string>();
/** This worker's findings, per endpoint. */
const findings = new LuaTable<string, Eviction>();
/** "<endpoint> <kind>" this worker has logged. */
const logged = new LuaSet<string>();
/** Per shared dict: the finding (per endpoint) this worker last put there. */
const sharedTo = new LuaTable<NgxSharedDict, LuaTable<string, Eviction>>();

function finding(checked: boolean, policy: string, maxmemory: number, why: string, checkedAt: number): Eviction {
  const policyEvicts = checked && policy !== "noeviction";
  return { checked, policy, maxmemory, policyEvicts, canEvict: policyEvicts && maxmemory > 0, why, checkedAt };
}

/** Keep the finding for this worker; log it once per endpoint and worker. */
function remember(conf: RedisConf, e: Eviction): void {
  const ep = conf.endpoint;
  const old = findings.get(ep);
  // Another pool of the same server may not be allowed to ask: never let that hide an answer.
  if (e.checked || old === undefined || !old.checked) {
    findings.set(ep, e);
  }
  let kind = "ok";
  if (!e.checked) {
    kind = "unknown";
  } else if (e.canEvict) {
    kind = "evicts";
  } else if (e.policyEvicts) {
    kind = "dormant";
  }
  if (kind !== "ok" && !logged.has(ep + " " + kind)) {
    logged.add(ep + " " + kind);
    if (kind === "evicts") {
      ngx.log(ngx.ERR, "dlock: redis ", ep, " can evict lock keys (maxmemory-policy ", e.policy, ", maxmemory ",
        e.maxmemory, "): an evicted lock lets a second holder in; set maxmemory-policy noeviction, or give locks a Redis of their own");
    } else if (kind === "dormant") {
      ngx.log(ngx.WARN, "dlock: redis ", ep, " has maxmemory-policy ", e.policy, " but no maxmemory: lock keys cannot be ",
        "evicted yet, they can as soon as maxmemory is set; set maxmemory-policy noeviction, or give locks a Redis of their own");
    } else {
      ngx.log(ngx.NOTICE, "dlock: redis ", ep, ": could not check whether it can evict lock keys (", e.why,
        "); make sure its maxmemory-policy is noeviction");
    }
  }
}

/**
 * Put this worker's finding about conf's endpoint into conf's shared dict, when
 * that dict does not have it yet. Runs on fresh connections only: the check of a
 * pool runs once, but another factory (another dict) may share its pool.
 */
function share(conf: RedisConf): void {
  const ep = conf.endpoint;
  const e = findings.get(ep);
  // Factories get their dict from lease.parseStore; "dlock" is the default dict of status and the gateway.
  const dict = conf.dict ?? ngx.shared.get("dlock");
  if (e === undefined || dict === undefined) {
    return;
  }
  let done = sharedTo.get(dict);
  if (done === undefined) {
    done = new LuaTable<string, Eviction>();
    sharedTo.set(dict, done);
  }
  if (done.get(ep) === e) {
    return;
  }
  const at = math.floor(e.checkedAt * 1000);
  let v = "0 " + at + " " + e.why;
  if (e.checked) {
    v = "1 " + at + " " + e.maxmemory + " " + e.policy;
  }
  // safe_*: a full dict must not evict lease records for this (and then the next fresh connection tries again).
  const [added, err] = dict.safe_add(EVICTION_KEY + ep, v);
  let stored = added === true;
  if (added) {
    const [n] = dict.incr(EVICTION_COUNT, 1, 0);
    if (n !== undefined) {
      dict.safe_set(EVICTION_INDEX + n, ep);
    }
  } else if (err === "exists") {
    // An answer replaces what is there (an older answer, or another worker's "could not check");
    // "could not check" never replaces anything.
    stored = !e.checked || dict.safe_set(EVICTION_KEY + ep, v)[0] === true;
  }
  if (stored) {
    done.set(ep, e);
  }
}

/**
 * Ask Redis for maxmemory and maxmemory-policy, log and record the finding.
 * Returns an error only when the connection failed (then the next fresh connection asks again).
 */
function checkEviction(red: RestyRedis, conf: RedisConf): string | undefined {
  // Marked before the round trip: other requests of this worker opening fresh connections meanwhile skip it.
  checkedPools.add(conf.pool);
  let policy: string | undefined;
  let maxmemory: number | undefined;
  const [info, ierr] = red.info("memory");
  if (info === undefined) {
    checkedPools.delete(conf.pool);
    return "dlock: redis " + conf.endpoint + ": " + tostring(ierr) + " during the eviction check";
  }
  if (type(info) === "string") {
    const [p] = string.match(info as string, "[\r\n]maxmemory_policy:([%w%-]+)");
    const [m] = string.match(info as string, "[\r\n]maxmemory:(%d+)");
    policy = p;
    maxmemory = tonumber(m);
  }
  let why = "";
  if (policy === undefined || maxmemory === undefined) {
    // INFO refused (ACL) or without the fields: CONFIG GET, unless renamed or refused too.
    why = "INFO memory: " + (info === false ? tostring(ierr) : "no maxmemory fields");
    const [cfg, cerr] = red.config("get", "maxmemory*");
    if (cfg === undefined) {
      checkedPools.delete(conf.pool);
      return "dlock: redis " + conf.endpoint + ": " + tostring(cerr) + " during the eviction check";
    }
    if (type(cfg) === "table") {
      const t = cfg as LuaTable<number, string>;
      for (const i of $range(1, t.length() - 1, 2)) {
        if (t.get(i) === "maxmemory-policy") policy = tostring(t.get(i + 1));
        if (t.get(i) === "maxmemory") maxmemory = tonumber(t.get(i + 1));
      }
    }
    if (policy === undefined || maxmemory === undefined) {
      why = why + "; CONFIG GET: " + (cfg === false ? tostring(cerr) : "no maxmemory fields");
    }
  }
  if (policy !== undefined && maxmemory !== undefined) {
    remember(conf, finding(true, policy, maxmemory, "", ngx.now()));
  } else {
    remember(conf, finding(false, "", 0, why, ngx.now()));
  }
  return undefined;
}

function decode(v: unknown): Eviction | undefined {
  if (type(v) !== "string") {
    return undefined;
  }
  const [at, maxmemory, policy] = string.match(v as string, "^1 (%d+) (%d+) (%S+)$");
  if (policy !== undefined) {
    return finding(true, policy, tonumber(maxmemory) ?? 0, "", (tonumber(at) ?? 0) / 1000);
  }
  const [uat, why] = string.match(v as string, "^0 (%d+) (.*)$");
  if (why !== undefined) {
    return finding(false, "", 0, why, (tonumber(uat) ?? 0) / 1000);
  }
  return undefined;
}

/** Prefer an answer over "could not check", then the newest. */
function better(a: Eviction, b: Eviction | undefined): boolean {
  if (b === undefined) return true;
  if (a.checked !== b.checked) return a.checked;
  return a.checkedAt > b.checkedAt;
}

/**
 * Eviction findings per endpoint: this worker's and those other workers shared
 * in `dicts`. Reads a few keys per endpoint, never walks a dict.
 */
export function evictions(dicts: NgxSharedDict[]): LuaTable<string, Eviction> {
  const out = new LuaTable<string, Eviction>();
  for (const [ep, e] of findings) {
    out.set(ep, e);
  }
  for (const dict of dicts) {
    const [n] = dict.get(EVICTION_COUNT);
    if (type(n) === "number") {
      for (const i of $range(1, n as number)) {
        const [ep] = dict.get(EVICTION_INDEX + i);
        if (type(ep) === "string") {
          const e = decode(dict.get(EVICTION_KEY + (ep as string))[0]);
          if (e !== undefined && better(e, out.get(ep as string))) {
            out.set(ep as string, e);
          }
        }
      }
    }
  }
  return out;
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
  if (clientHasTls) {
    red.set_timeouts!(conf.connect_timeout, conf.read_timeout, conf.read_timeout);
  } else {
    red.set_timeout(conf.connect_timeout);
  }
  const opts: RedisConnectOptions = { pool: conf.pool, pool_size: conf.pool_size, backlog: conf.backlog };
  if (conf.ssl) {
    opts.ssl = true;
    opts.ssl_verify = conf.ssl_verify;
    opts.server_name = conf.server_name;
  }
  const [ok, err] = red.connect(conf.path ?? conf.host, conf.path !== undefined ? opts : conf.port, opts);
  if (ok === undefined) {
    return $multi(undefined, "dlock: redis " + conf.endpoint + ": " + tostring(err));
  }
  if (!clientHasTls) {
    red.set_timeout(conf.read_timeout);
  }
  const [reused] = red.get_reused_times();
  if (reused === 0) {
    let ierr = init(red, conf);
    if (ierr === undefined && !checkedPools.has(conf.pool)) {
      ierr = checkEviction(red, conf);
    }
    if (ierr !== undefined) {
      red.close();
      return $multi(undefined, ierr);
    }
    share(conf);
  }
  return $multi(red, undefined);
}

/** AUTH and SELECT, once per fresh connection (pooled ones are already set up). */
function init(red: RestyRedis, conf: RedisConf): string | undefined {
  if (conf.password !== undefined) {
    // Two-argument AUTH is the ACL form (Redis >= 6); one argument is requirepass.
    const args = conf.username !== undefined ? [conf.username, conf.password] : [conf.password];
    const [ok, err] = red.auth(...args);
    if (!ok) {
      return "dlock: redis " + conf.endpoint + ": authentication failed: " + tostring(err);
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
  }
}
