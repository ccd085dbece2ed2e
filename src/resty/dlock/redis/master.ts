// A master the sentinels named, as a server of its own: how a fresh connection
// to it is set up (its messages name it, "sentinel <name>: master host:port",
// and its hints the master's options, not the sentinels'), its configuration
// for the eviction check, and ROLE on it (a just-demoted master must not take
// locks). connection.ts calls these on a fresh connection behind Sentinel.

import type * as redis from "./client";
import * as derived from "./derived";
import * as hints from "./hints";
import * as sentinel from "./sentinel";
import type * as setup from "./setup";

const lua_tostring = tostring;
const lua_type = type;
const ngx_log = ngx.log;
const NOTICE = ngx.NOTICE;
const str_match = string.match;
const sentinel_forget = sentinel.forget;

/** Per Sentinel pool and master address: how a fresh connection to it is set up, its messages naming it. */
const masterSetups = new LuaTable<string, setup.Setup>();

/** The setup of a connection to the master host:port the sentinels of conf named: "sentinel <name>: master host:port". */
function setupOf(conf: redis.RedisConf, host: string, port: number): setup.Setup {
  const name = conf.pool + "@" + host + ":" + lua_tostring(port);
  let s = masterSetups.get(name);
  if (s === undefined) {
    s = {
      endpoint: conf.endpoint + ": master " + host + ":" + lua_tostring(port), host, ssl: conf.ssl, ssl_verify: conf.ssl_verify,
      server_name: conf.server_name, client_cert: conf.client_cert, credentials: conf.credentials, db: conf.db,
      announced: hints.BY_SENTINELS,
    };
    masterSetups.set(name, s);
  }
  return s;
}

/** Per Sentinel pool and master address: that master as a server of its own (for the eviction check). */
const sentinelMasters = new LuaTable<string, redis.RedisConf>();

function confOf(conf: redis.RedisConf, host: string, port: number): redis.RedisConf {
  const name = conf.pool + "@" + host + ":" + lua_tostring(port);
  let m = sentinelMasters.get(name);
  if (m === undefined) {
    m = derived.node(conf, host, port);
    sentinelMasters.set(name, m);
  }
  return m;
}

/**
 * Masters ("<credentials digest>@host:port") whose user may not run ROLE: an
 * ACL without `@admin` or `@dangerous` (a lock user's usual rights), or ROLE
 * renamed away. Asked once, whichever pool (the locks', the wake-ups') asks.
 */
const roleRefused = new LuaTable<string, boolean>();

/** An error reply that every later ROLE on that server would get too. */
function refusedForGood(err: string | undefined): boolean {
  const [code] = str_match(lua_tostring(err), "^(%u+)");
  return code === "NOPERM" || str_match(lua_tostring(err), "^ERR unknown command")[0] !== undefined;
}

/**
 * ROLE on a fresh connection to the master Sentinel named: a just-demoted one
 * must not take locks. A server that refuses ROLE to this user is taken on the
 * sentinels' word: a demoted master is a read-only replica, which refuses
 * every lock write with READONLY, and that has the sentinels asked again.
 */
function isMaster(red: RestyRedis, conf: redis.RedisConf, host: string, port: number): string | undefined {
  const who = (conf.credentials !== undefined ? conf.credentials.digest : "") + "@" + host + ":" + lua_tostring(port);
  if (roleRefused.has(who)) return undefined;
  const [role, err] = red.role();
  if (lua_type(role) === "table" && (role as LuaTable<number, unknown>).get(1) === "master") {
    return undefined;
  }
  if (role === false && refusedForGood(err)) {
    // Said once: another connection's ROLE may have been refused while this one's was on its way.
    if (roleRefused.has(who)) return undefined;
    roleRefused.set(who, true);
    ngx_log(NOTICE, "dlock: redis ", conf.endpoint, ": ROLE on ", host, ":", port, " refused (", err,
      "): taking the sentinels' word that it is the master (a demoted one refuses lock writes: READONLY)");
    return undefined;
  }
  sentinel_forget(conf.pool);
  const away = hints.turnedAway(setupOf(conf, host, port).endpoint, err as string | undefined);
  if (away !== undefined) return away;
  if (lua_type(role) !== "table") {
    return "dlock: redis " + conf.endpoint + ": ROLE on " + host + ":" + lua_tostring(port) + " failed: " + lua_tostring(err) +
      "; asking the sentinels again";
  }
  return "dlock: redis " + conf.endpoint + ": " + host + ":" + lua_tostring(port) + " is a " + lua_tostring((role as LuaTable<number, unknown>).get(1)) +
    ", not the master (a failover is under way); asking the sentinels again";
}

// Exported by name: this module's own uses of them are locals, not lookups in its exports table.
export { confOf, isMaster, setupOf };
