// TypeScript declarations of lua-resty-dlock's Lua API, for TypeScriptToLua
// projects: `import * as dlock from "resty.dlock"` compiles to
// `local dlock = require("resty.dlock")`. They describe the Lua side as nginx
// loads it from dist/: module functions take no self (this: void), objects'
// methods are called with ':' (this: the object). Option tables are typed so a
// misspelt option or a value of the wrong type fails to type-check; the Lua
// side still checks them at run time (ranges, combinations).
// The ngx global is opt-in: add "lua-resty-dlock/ngx" to compilerOptions.types.

/// <reference types="@typescript-to-lua/language-extensions" />

declare module "resty.dlock" {
  /** "host:port" or "[v6]:port". */
  export type Node = string;

  /** Options every Redis topology takes; they apply to each data node. */
  export interface RedisCommon {
    username?: string;
    password?: string;
    connect_timeout?: number;
    read_timeout?: number;
    pool_size?: number;
    keepalive_timeout?: number;
    backlog?: number;
    /** Calls of concurrent requests of a worker share round trips (default true). */
    auto_pipeline?: boolean;
    ssl?: boolean;
    ssl_verify?: boolean;
    /** The name sent (SNI) and checked under ssl_verify; default: each server's host name (none for an address). */
    server_name?: string;
    /**
     * The client certificate (chain) a TLS handshake shows, for servers that ask for one
     * (redis-server does unless tls-auth-clients is no): a PEM file's path or the PEM text.
     * With ssl_client_priv_key, its unencrypted key; both read when the factory is made.
     */
    ssl_client_cert?: string;
    ssl_client_priv_key?: string;
  }

  /** Writes acknowledged by replicas (WAIT): not with Redlock. */
  export interface Replicated {
    replicas?: number;
    replicas_timeout?: number;
  }

  export interface SentinelOptions {
    master: string;
    nodes: Node[];
    /** The sentinels' own credentials. */
    username?: string;
    password?: string;
    /** TLS to the sentinels; unset: as the factory's `ssl`. */
    ssl?: boolean;
  }

  export interface ClusterOptions {
    /** Seed nodes. */
    nodes: Node[];
    max_redirects?: number;
  }

  interface NoTopology {
    host?: never;
    port?: never;
    path?: never;
    sentinel?: never;
    cluster?: never;
    redlock?: never;
  }

  /** One server over TCP (the default: 127.0.0.1:6379). */
  export interface StandaloneRedis extends RedisCommon, Replicated, Omit<NoTopology, "host" | "port"> {
    host?: string;
    port?: number;
    db?: number;
  }
  export interface UnixRedis extends RedisCommon, Replicated, Omit<NoTopology, "path"> {
    /** "unix:/run/redis.sock" */
    path: string;
    db?: number;
  }
  export interface SentinelRedis extends RedisCommon, Replicated, Omit<NoTopology, "sentinel"> {
    sentinel: SentinelOptions;
    db?: number;
  }
  /** A cluster has one database: no db. */
  export interface ClusterRedis extends RedisCommon, Replicated, Omit<NoTopology, "cluster"> {
    cluster: ClusterOptions;
  }
  /** A majority of at least 3 independent masters; no replicas, fencing or semaphores. */
  export interface RedlockRedis extends RedisCommon, Omit<NoTopology, "redlock"> {
    redlock: Node[];
    db?: number;
  }
  /** The five ways to reach Redis exclude each other. */
  export type RedisOptions = StandaloneRedis | UnixRedis | SentinelRedis | ClusterRedis | RedlockRedis;

  /** What locks and semaphores take alike. */
  export interface StoreOptions {
    /** lua_shared_dict for local bookkeeping (required). */
    dict: string;
    redis?: RedisOptions;
    /** Redis key namespace ("" allowed: keys under their own names). */
    prefix?: string;
    /** Default lease, ms (1 ms to 1 day). */
    ttl?: number;
    /** Default wait, ms. */
    wait?: number;
  }

  export interface Options extends StoreOptions {
    owner?: "random" | "worker";
    /** Every lease gets lease.fence. */
    fencing?: boolean;
    /** A caller holding a key gets nested leases on it. */
    reentrant?: boolean;
  }

  /** Told once, in the watchdog's timer, when a renewed lease is lost. */
  export type OnLost = (this: void, lease: Lease, why: string) => void;

  export interface AcquireOptions {
    ttl?: number;
    wait?: number;
    /** Renewed by the watchdog until released. */
    renew?: boolean;
    /** Needs renew = true. */
    on_lost?: OnLost;
  }

  /** A lock's acquire options. */
  export interface LockAcquireOptions extends AcquireOptions {
    /**
     * Take the key as one of its readers: readers share it, a writer (any other
     * lease) excludes everyone, a waiting writer holds back later readers.
     * Refused with redis.redlock and by reentrant factories.
     */
    shared?: boolean;
  }

  /** true; or nil, "not_owner"; or nil, "dlock: ..." (Redis failed: still yours, call again). */
  export type Outcome = LuaMultiReturn<[true | undefined, string | undefined]>;

  export interface Lease {
    readonly key: string;
    readonly token: string;
    /** ms, as last acquired or extended. */
    readonly ttl: number;
    /** With fencing: larger than the fence of every earlier holder of the key. */
    readonly fence: number | undefined;
    /** Taken with shared = true: one of the key's readers (false for writers and permits). */
    readonly shared: boolean;
    release(this: Lease): Outcome;
    /** Reset to ttl ms from now (default: its current ttl). */
    extend(this: Lease, ttl?: number): Outcome;
    /** May the holder still act on it? No round trip. */
    valid(this: Lease): boolean;
  }

  /**
   * lease; or nil, "busy" | "timeout", retry_after (ms until the holder's
   * lease ends, when known); or nil, "dlock: ..." on bad input or a Redis failure.
   */
  export type AcquireResult = LuaMultiReturn<[Lease | undefined, string | undefined, number | undefined]>;

  /** A lease this nginx holds, from the shared dict. */
  export interface HeldLease {
    readonly key: string;
    readonly token: string;
    readonly pid: number;
    /** Epoch seconds. */
    readonly expires_at: number;
    /** ms left. */
    readonly ttl: number;
  }

  /** What locks and semaphores have in common. */
  export interface Acquirer {
    readonly prefix: string;
    readonly ttl: number;
    readonly wait: number;
    acquire(this: Acquirer, key: string, opts?: AcquireOptions): AcquireResult;
    held(this: Acquirer): HeldLease[];
    /**
     * fn(...args) under the lease, released whatever fn does: fn's results, or
     * nil, err (not acquired, fn raised, or the release failed) and retry_after.
     */
    with<A extends unknown[]>(this: Acquirer, key: string, opts: AcquireOptions | undefined,
      fn: (this: void, ...args: A) => unknown, ...args: A): LuaMultiReturn<unknown[]>;
  }

  /** acquire_all's options: a lock's, with shared refused when true (a set is taken exclusive). */
  export interface AcquireAllOptions extends AcquireOptions {
    shared?: false;
  }

  /** Several keys held as one: every key or none. */
  export interface MultiLease {
    /** The first of keys. */
    readonly key: string;
    /** The keys, in the caller's order. */
    readonly keys: string[];
    /** One token for every key. */
    readonly token: string;
    /** ms, as last acquired or extended. */
    readonly ttl: number;
    /** With fencing: the first key's fence. */
    readonly fence: number | undefined;
    /** With fencing: one per key, aligned with keys; each larger than every earlier holder's of that key. */
    readonly fences: number[] | undefined;
    readonly shared: false;
    /** Every key; nil, "not_owner" when one was no longer ours (the others are released all the same). */
    release(this: MultiLease): Outcome;
    /** Every key to ttl ms from now; nil, "not_owner" when one is gone (the rest is then released). */
    extend(this: MultiLease, ttl?: number): Outcome;
    /** Is every key still ours? No round trip. */
    valid(this: MultiLease): boolean;
  }

  /** As AcquireResult: busy and timeout name the first busy key's holder's time left. */
  export type AcquireAllResult = LuaMultiReturn<[MultiLease | undefined, string | undefined, number | undefined]>;

  export interface Locks extends Acquirer {
    readonly owner: "random" | "worker";
    readonly reentrant: boolean;
    acquire(this: Locks, key: string, opts?: LockAcquireOptions): AcquireResult;
    /**
     * 1 to 64 distinct keys, all or nothing, without deadlock whatever order
     * callers name them in. Refused by reentrant factories.
     */
    acquire_all(this: Locks, keys: string[], opts?: AcquireAllOptions): AcquireAllResult;
    with<A extends unknown[]>(this: Locks, key: string, opts: LockAcquireOptions | undefined,
      fn: (this: void, ...args: A) => unknown, ...args: A): LuaMultiReturn<unknown[]>;
  }

  export const _VERSION: string;
  /** Longest key, bytes (before the prefix). */
  export const MAX_KEY_LEN: number;
  /** Longest lease, ms (one day). */
  export const MAX_TTL: number;

  /** A lock factory, or nil and an error naming the bad option. */
  function create(this: void, opts: Options): LuaMultiReturn<[Locks | undefined, string | undefined]>;
  export { create as new };

  /** In init_worker_by_lua: release the leases of a worker that died. */
  export function init_worker(this: void): LuaMultiReturn<[true | undefined, string | undefined]>;
}

declare module "resty.dlock.semaphore" {
  import type { Acquirer, StoreOptions, SentinelRedis, StandaloneRedis, UnixRedis, ClusterRedis } from "resty.dlock";

  export interface Options extends StoreOptions {
    /** Holders per key. */
    permits: number;
    /** Not Redlock: a majority of per-master permit sets does not bound holders. */
    redis?: StandaloneRedis | UnixRedis | SentinelRedis | ClusterRedis;
  }

  export interface Semaphore extends Acquirer {
    readonly permits: number;
  }

  export const _VERSION: string;
  export const MAX_PERMITS: number;

  function create(this: void, opts: Options): LuaMultiReturn<[Semaphore | undefined, string | undefined]>;
  export { create as new };
}

declare module "resty.dlock.gateway" {
  import type { RedisOptions } from "resty.dlock";

  /** nginx variables with literals ("$http_idempotency_key", "$remote_addr:$uri"), or a function of the request. */
  export type Key = string | ((this: void) => string | undefined);

  interface Common {
    /** Name in logs, status and metrics: letters, digits, '_', '-', '.'. */
    name?: string;
    key: Key;
    on_missing?: "pass" | "reject";
    error_status?: number;
    /** Extra response headers on every refusal. */
    headers?: { [name: string]: string };
    breaker_failures?: number;
    breaker_cooldown?: number;
    dict?: string;
    redis?: RedisOptions;
    prefix?: string;
  }

  /** Redis unavailable: let the request through, or answer error_status. */
  interface OpenOrClosed {
    on_error: "allow" | "deny";
    fleet?: never;
  }
  /**
   * Concurrency, mutex and rate guards may also fall back on this nginx's
   * share of the limit while Redis cannot decide: `fleet` nginx share it.
   */
  type Fallback = OpenOrClosed | { on_error: "local"; fleet: number };

  interface Refusing extends Common {
    reject_status?: number;
    missing_status?: number;
  }

  /** Modes that hold a lease while the request runs. */
  interface Leasing extends Refusing {
    /** Lease ms, renewed every ttl/3 while the request is in flight. */
    ttl?: number;
  }

  export interface DedupOptions extends Leasing, OpenOrClosed {
    mode: "dedup";
    /** ms the key stays taken after a 2xx. */
    hold?: number;
    renew?: boolean;
    read_body?: boolean;
  }
  export type ConcurrencyOptions = Leasing & Fallback & {
    mode: "concurrency";
    permits: number;
    wait?: number;
    renew?: boolean;
    read_body?: boolean;
  };
  export interface ThrottleOptions extends Leasing, OpenOrClosed {
    mode: "throttle";
  }
  export type MutexOptions = Leasing & Fallback & {
    mode: "mutex";
    wait?: number;
    renew?: boolean;
    read_body?: boolean;
    /** Methods whose requests take the lock shared ({ "GET", "HEAD" }): they run side by side, others alone. */
    shared?: string[];
  };

  /** One limit of several (limits = { ... }): rate requests per period ms, burst at once. */
  export interface Limit {
    rate: number;
    period?: number;
    burst?: number;
    /** The policy's name in the RateLimit fields (default like "10-per-1s"). */
    name?: string;
  }
  /** One limit (rate, period, burst), or several (limits), not both. */
  export type Limits =
    | { rate: number; period?: number; burst?: number; limits?: never }
    | { limits: Limit[]; rate?: never; period?: never; burst?: never };

  export type RateOptions = Refusing & Fallback & Limits & {
    mode: "rate";
    /** Units each request takes (at most the smallest burst). */
    cost?: number;
    /** Send RateLimit-Policy and RateLimit. */
    ratelimit_headers?: boolean;
  };

  export interface IdempotencyOptions extends Common, OpenOrClosed {
    mode: "idempotency";
    /** Tenant part of the lookup (variables or a function), hashed with the key; false: one scope for every client. */
    scope: Key | false;
    methods?: string[];
    /** ms of the in-flight claim. */
    lease?: number;
    wait?: number;
    max_body?: number;
    max_request_body?: number;
    /** Statuses stored: numbers and classes ("2xx"). */
    store?: (number | string)[];
    /** Response headers stored besides the default (set-cookie is not, unless listed). */
    store_headers?: string[];
    /** ms a completed response is replayed. */
    ttl?: number;
  }
  export type Options = DedupOptions | ConcurrencyOptions | ThrottleOptions | MutexOptions | IdempotencyOptions | RateOptions;

  export interface Guard {
    readonly name: string;
    readonly mode: Options["mode"];
    /** In access_by_lua: let the request through, or end it with the guard's status. */
    access(this: Guard): void;
    /** In a location's own log_by_lua: end this guard's lease. */
    log(this: Guard): void;
  }

  export const _VERSION: string;

  /** In init_by_lua: a guard, or nil and an error naming the bad option. */
  function create(this: void, opts: Options): LuaMultiReturn<[Guard | undefined, string | undefined]>;
  export { create as new };

  /** log_by_lua at http level: ends the leases of every guard the request passed. */
  export function log(this: void): void;
  /** header_filter_by_lua at http level (idempotency guards). */
  export function header_filter(this: void): void;
  /** body_filter_by_lua at http level (idempotency guards). */
  export function body_filter(this: void): void;
}

declare module "resty.dlock.status" {
  export interface MetricsOptions {
    /** lua_shared_dict names reported besides the guards' own. */
    dicts?: string[];
  }
  export interface ReportOptions extends MetricsOptions {
    /** Held leases listed (default 100, at most 10000). */
    limit?: number;
  }

  export interface HeldView {
    readonly dict: string;
    readonly key: string;
    readonly pid: number;
    readonly ttl: number;
    readonly expires_at: number;
  }

  /** What serve() shows as JSON (tokens are never listed). */
  export interface Report {
    readonly dicts: string[];
    readonly held: HeldView[];
    readonly held_listed: number;
    readonly held_limit: number;
    readonly held_truncated: boolean;
    readonly unrecorded: LuaTable<string, number>;
    readonly shortfalls: LuaTable<string, number>;
    readonly redis: LuaTable<string, LuaTable<string, unknown>>;
    readonly topology: LuaTable<string, LuaTable<string, unknown>>;
    readonly guards: LuaTable<string, LuaTable<string, unknown>>;
  }

  export const _VERSION: string;
  export const DEFAULT_LIMIT: number;
  export const MAX_LIMIT: number;

  export function report(this: void, opts?: ReportOptions): LuaMultiReturn<[Report | undefined, string | undefined]>;
  /** content_by_lua: the report as JSON (?limit=N); true, or nil, err (bad options, a phase with no response to write). */
  export function serve(this: void, opts?: ReportOptions): LuaMultiReturn<[true | undefined, string | undefined]>;
  /** The metrics in the Prometheus text format. */
  export function metrics_text(this: void, opts?: MetricsOptions): LuaMultiReturn<[string | undefined, string | undefined]>;
  /** content_by_lua: metrics_text() as the response; true, or nil, err. */
  export function metrics(this: void, opts?: MetricsOptions): LuaMultiReturn<[true | undefined, string | undefined]>;
}

declare module "resty.dlock.compat" {
  import type { RedisOptions } from "resty.dlock";

  /** lua-resty-lock's options, in seconds. step, ratio and max_step are checked and not needed (waiters are woken). */
  export interface Options {
    exptime?: number;
    timeout?: number;
    step?: number;
    ratio?: number;
    max_step?: number;
  }

  export interface ConfigureOptions {
    redis?: RedisOptions;
    prefix?: string;
    name?: string;
  }

  export interface Lock {
    /** Seconds waited (0: taken at once); nil and "timeout", "locked", "nil key" or "dlock: ...". */
    lock(key: string): LuaMultiReturn<[number | undefined, string | undefined]>;
    /** 1; nil and "unlocked", "not_owner" or "dlock: ..." (Redis failed: call again). Without cosockets (log phase): 1, the release on its way. */
    unlock(): LuaMultiReturn<[number | undefined, string | undefined]>;
    /** Reset the expiry to time seconds (default exptime): true; nil and "unlocked", "not_owner" or "dlock: ...". */
    expire(time?: number): LuaMultiReturn<[true | undefined, string | undefined]>;
  }

  export const _VERSION: string;

  /** Where locks live (once, in init_by_lua); the local Redis without it. */
  export function configure(this: void, opts?: ConfigureOptions): LuaMultiReturn<[true | undefined, string | undefined]>;
  /** Called as resty_lock:new(dict_name, opts), like lua-resty-lock. */
  function create(this: unknown, dict_name: string, opts?: Options): LuaMultiReturn<[Lock | undefined, string | undefined]>;
  export { create as new };
}

declare module "resty.dlock.rate" {
  import type { RedisOptions } from "resty.dlock";
  import type { Limits } from "resty.dlock.gateway";

  export type Options = Limits & {
    /** lua_shared_dict (required). */
    dict: string;
    /** Standalone, unix, Sentinel or Cluster; Redlock is refused. */
    redis?: RedisOptions;
    name?: string;
    /** Redis key namespace (default "dlock:rate:<name>:"). */
    prefix?: string;
  };

  export interface Limiter {
    readonly name: string;
    readonly prefix: string;
    /**
     * Admitted: 0 and the requests that remain under the tightest limit.
     * Refused: nil, "rejected", and the ms until this request would be admitted.
     * Redis failed or bad input: nil, "dlock: ...". commit = false charges nothing.
     */
    incoming(this: Limiter, key: string, commit: boolean, cost?: number):
      LuaMultiReturn<[0 | undefined, number | string | undefined, number | undefined]>;
    /** Gives back what a committed incoming took: what remains, or nil, "dlock: ...". */
    uncommit(this: Limiter, key: string, cost?: number): LuaMultiReturn<[number | undefined, string | undefined]>;
  }

  export const _VERSION: string;

  /** A limiter, or nil and an error naming the bad option. */
  function create(this: void, opts: Options): LuaMultiReturn<[Limiter | undefined, string | undefined]>;
  export { create as new };
}
