// The one way a connection to Redis is made and handed back: the client
// library, the pool, a fresh connection's setup (TLS, AUTH, SELECT: setup.ts;
// ROLE behind Sentinel: master.ts; the eviction check), and the client's socket, which
// the transport (roundtrip.ts, pipeline.ts) and the wake-up subscriber read
// and write themselves. Sentinels are reached through open() below.

import * as clock from "../core/clock";
import * as schema from "../core/schema";
import * as redis from "./client";
import * as eviction from "./eviction";
import * as hints from "./hints";
import * as master from "./master";
import * as sentinel from "./sentinel";
import * as setup from "./setup";

const client = redis.library;
const hasTimeouts = redis.hasTimeouts;
const lua_tostring = tostring;
const lua_rawget = rawget;
const sentinel_cached = sentinel.cached;
const sentinel_discover = sentinel.discover;
const sentinel_forget = sentinel.forget;
const setup_run = setup.run;
const tls_port = hints.tlsPort;
const unconnected = hints.unconnected;
const unreachableSocket = hints.unreachableSocket;
const announced_by = hints.announced;
const eviction_check = eviction.check;
const named = schema.named;
const thread_spawn = ngx.thread.spawn;
const thread_wait = ngx.thread.wait;
const thread_kill = ngx.thread.kill;
const lua_pcall = pcall;
const clock_now = clock.now;
const semaphore = require("ngx.semaphore") as NgxSemaphoreModule;
const sem_new = semaphore.new;

/**
 * Per pool (an address and how it is reached) or sentinel, when a connect to
 * it was last refused. For REFUSED s after that the same refusal is answered
 * without dialing: a server that is gone is not dialed again by every call (dozens
 * a millisecond, each an [error] line of nginx's). Only a refusal counts: a
 * timeout took its time already, and a guard's breaker takes it from there.
 */
const refusedAt = new LuaTable<string, number>();
const REFUSED = 0.1;
const REFUSED_ERR = "connection refused";

/** Did `at` refuse a connect less than REFUSED s ago? (An older refusal is forgotten.) */
function refusedLately(at: string): boolean {
  const refused = refusedAt.get(at);
  if (refused === undefined) return false;
  if (clock_now() - refused < REFUSED) return true;
  refusedAt.delete(at);
  return false;
}

/**
 * The server may no longer be the master (a connection error, READONLY,
 * LOADING): with Sentinel, ask the sentinels again on the next connection.
 */
function stale(conf: redis.RedisConf): void {
  if (conf.sentinel !== undefined) {
    sentinel_forget(conf.pool);
  }
}

/**
 * The client's cosocket. Both lua-resty-redis 0.27 and 0.33 keep it in the
 * private `_sock` field; this is the one place that knows.
 */
function socket(red: RestyRedis): NgxTcpSocket | undefined {
  // A local, then the return: a trace that starts here cannot return through a
  // tail call into a builtin, and LuaJIT would blacklist this (core/clock.ts).
  const sock = lua_rawget(red as unknown as { _sock: NgxTcpSocket | undefined }, "_sock");
  return sock;
}

type Connected = LuaMultiReturn<[1 | undefined, string | undefined]>;

function connectThen(this: void, red: RestyRedis, target: string, portOrOpts: number | RedisConnectOptions,
  opts: RedisConnectOptions | undefined, done: NgxSemaphore): Connected {
  const [ok, err] = red.connect(target, portOrOpts, opts);
  done.post(1);
  return $multi(ok, err);
}

// Semaphores of connects that ended in time, each with no resource left.
const spare = new LuaTable<number, NgxSemaphore>();
let spares = 0;
const SPARES = 64;

/**
 * red.connect, bounded by `timeout` (ms) as a whole where nginx resolves the
 * host: its resolver waits up to resolver_timeout (30 s unless set), which
 * the socket's connect timeout does not cover, so a DNS server that stops
 * answering would hold each fresh connection, and the request behind it, that
 * long. The connect runs in a light thread, killed at the timeout (nginx then
 * drops the query). A pooled connection, found before any resolving, comes
 * back before the thread yields; an address connects as it is.
 */
function dial(red: RestyRedis, target: string, portOrOpts: number | RedisConnectOptions, opts: RedisConnectOptions | undefined,
  timeout: number): Connected {
  if (!named(target)) return red.connect(target, portOrOpts, opts);
  let done: NgxSemaphore | undefined;
  if (spares > 0) {
    done = spare.get(spares);
    spare.delete(spares);
    spares--;
  } else {
    [done] = sem_new(0);
  }
  // ngx.thread.spawn raises where there are no light threads: connect unbounded there.
  const [spawned, co] = lua_pcall(thread_spawn, connectThen, red, target, portOrOpts, opts, done!);
  if (!spawned) return red.connect(target, portOrOpts, opts);
  const thread = co as NgxThread;
  const [posted] = done!.wait(timeout / 1000);
  if (!posted) {
    const [killed] = thread_kill(thread);
    if (killed !== undefined) {
      return $multi(undefined, "timeout: " + target + " was not resolved and connected within connect_timeout (" +
        lua_tostring(timeout) + " ms): nginx's resolver may not be answering (it waits up to its resolver_timeout)");
    }
    // It ended as the wait did: its outcome stands, and its post is left on the semaphore.
    done = undefined;
  }
  if (done !== undefined && spares < SPARES) {
    spares++;
    spare.set(spares, done);
  }
  const [ran, ok, err] = thread_wait(thread);
  // A raise in the thread leaves its message where the result would be.
  if (!ran) return $multi(undefined, lua_tostring(ok));
  return $multi(ok as 1 | undefined, err as string | undefined);
}

/**
 * A fresh, unpooled connection to a sentinel (sentinel.ts sets it up with the
 * sentinels' own credentials): the client and its socket, or the error.
 */
function open(this: void, host: string, port: number, timeout: number): LuaMultiReturn<[RestyRedis | undefined, NgxTcpSocket | undefined, string | undefined]> {
  const at = "sentinel " + host + ":" + lua_tostring(port);
  if (refusedLately(at)) return $multi(undefined, undefined, unconnected(REFUSED_ERR));
  const [red, nerr] = (client as RestyRedisModule).new();
  if (red === undefined) return $multi(undefined, undefined, lua_tostring(nerr));
  red.set_timeout(timeout);
  const [ok, err] = dial(red, host, port, undefined, timeout);
  if (ok === undefined) {
    if (err === REFUSED_ERR) refusedAt.set(at, clock_now());
    return $multi(undefined, undefined, unconnected(err));
  }
  return $multi(red, socket(red), undefined);
}

/** A connect to host:port failed with err: the error that names the endpoint (and, behind Sentinel, the master). */
function unreached(conf: redis.RedisConf, host: string, port: number, err: string | undefined): LuaMultiReturn<[undefined, string]> {
  stale(conf);
  const why = unconnected(err);
  if (conf.sentinel !== undefined) {
    // The master the sentinels named: which one, for an operator reading this during a failover.
    return $multi(undefined, "dlock: redis " + conf.endpoint + ": master " + host + ":" + lua_tostring(port) + ": " + why +
      announced_by(why, hints.BY_SENTINELS));
  }
  return $multi(undefined, "dlock: redis " + conf.endpoint + ": " + why + announced_by(why, conf.announced));
}

/**
 * A ready connection from the pool (or a fresh one, authenticated and with the
 * db selected). Errors name the endpoint: "dlock: redis 127.0.0.1:6379: connection refused".
 */
export function connect(conf: redis.RedisConf): LuaMultiReturn<[RestyRedis | undefined, string | undefined]> {
  let host = conf.host;
  let port = conf.port;
  let pool = conf.pool;
  if (conf.sentinel !== undefined) {
    let m = sentinel_cached(conf.pool);
    if (m === undefined) {
      const [found, serr] = sentinel_discover(conf.pool, conf.sentinel, open, conf.connect_timeout, conf);
      if (found === undefined) return $multi(undefined, serr);
      m = found;
    }
    host = m.host;
    port = m.port;
    // One pool per master: connections to a demoted one are never handed out again.
    pool = conf.pool + "@" + host + ":" + lua_tostring(port);
  }
  if (refusedLately(pool)) return unreached(conf, host, port, REFUSED_ERR);
  const [red, nerr] = (client as RestyRedisModule).new();
  if (red === undefined) {
    return $multi(undefined, "dlock: redis client: " + lua_tostring(nerr));
  }
  // Never touch red.set_timeouts on 0.27: its __index would turn the name into a Redis command.
  if (hasTimeouts) {
    red.set_timeouts!(conf.connect_timeout, conf.read_timeout, conf.read_timeout);
  } else {
    red.set_timeout(conf.connect_timeout);
  }
  const opts: RedisConnectOptions = { pool, pool_size: conf.pool_size, backlog: conf.backlog };
  let ok: 1 | undefined;
  let err: string | undefined;
  if (conf.path !== undefined) {
    [ok, err] = red.connect(conf.path, opts);
    if (ok === undefined) return $multi(undefined, "dlock: redis " + conf.endpoint + ": " + unreachableSocket(err));
  } else {
    [ok, err] = dial(red, host, port, opts, conf.connect_timeout);
  }
  if (ok === undefined) {
    if (err === REFUSED_ERR) refusedAt.set(pool, clock_now());
    return unreached(conf, host, port, err);
  }
  if (!hasTimeouts) {
    red.set_timeout(conf.read_timeout);
  }
  const [reused] = red.get_reused_times();
  if (reused === 0) {
    // TLS, AUTH and SELECT first: a server with a password answers anything else with NOAUTH.
    let ierr = setup_run(red, socket(red), conf.sentinel !== undefined ? master.setupOf(conf, host, port) : conf);
    if (ierr === undefined && conf.sentinel !== undefined) ierr = master.isMaster(red, conf, host, port);
    // With Sentinel, each master it names is checked on its own: a failover can
    // land on a server configured differently.
    if (ierr === undefined) ierr = eviction_check(red, conf.sentinel !== undefined ? master.confOf(conf, host, port) : conf);
    if (ierr !== undefined) {
      red.close();
      return $multi(undefined, ierr + tls_port(ierr, conf.ssl, "redis.ssl"));
    }
  }
  return $multi(red, undefined);
}

/** Let the next read on red wait `ms` longer than read_timeout: a WAIT blocks in Redis for up to replicas_timeout. */
export function readLonger(red: RestyRedis, conf: redis.RedisConf, ms: number): void {
  if (hasTimeouts) red.set_timeouts!(conf.connect_timeout, conf.read_timeout, conf.read_timeout + ms);
  else red.set_timeout(conf.read_timeout + ms);
}

/**
 * Hand the connection back. After a network error lua-resty-redis has already
 * closed the socket (a read timeout closes it), so only healthy ones are pooled.
 */
export function done(red: RestyRedis, conf: redis.RedisConf, healthy: boolean): void {
  if (healthy) {
    red.set_keepalive(conf.keepalive_timeout, conf.pool_size);
  } else {
    red.close();
    stale(conf);
  }
}

// Exported by name: this module's own uses of them are locals, not lookups in its exports table.
export { socket, stale };
