// Declarations for lua-resty-redis: OpenResty's `resty.redis` (>= 0.28) and
// Debian's `nginx.redis` (0.27). Only what lua-resty-dlock calls; replies carry
// their real types: a nil bulk reply is ngx.null, a Redis error reply is
// `false, "ERR ..."`, a network failure is `nil, "timeout" | "closed" | ...`.

/** One reply value: bulk/status string, integer, nil bulk (ngx.null) or multi-bulk. */
type RedisValue = string | number | NgxNull | LuaTable<number, string | number | NgxNull>;

/** `reply, err`: reply is false on a Redis error reply and nil on a network error. */
type RedisResult<T = RedisValue> = LuaMultiReturn<[T | false | undefined, string | undefined]>;

interface RedisConnectOptions {
  pool?: string;
  pool_size?: number;
  backlog?: number;
  ssl?: boolean;
  ssl_verify?: boolean;
  server_name?: string;
}

/** A client object: every method is called with ':'. */
interface RestyRedis {
  set_timeout(ms: number): void;
  /** Only in lua-resty-redis >= 0.28; in 0.27 the name falls through to a Redis command. */
  set_timeouts?: (this: RestyRedis, connectMs: number, sendMs: number, readMs: number) => void;
  connect(hostOrPath: string, portOrOpts?: number | RedisConnectOptions, opts?: RedisConnectOptions): LuaMultiReturn<[1 | undefined, string | undefined]>;
  set_keepalive(maxIdleMs: number, poolSize: number): LuaMultiReturn<[1 | undefined, string | undefined]>;
  get_reused_times(): LuaMultiReturn<[number | undefined, string | undefined]>;
  close(): LuaMultiReturn<[1 | undefined, string | undefined]>;

  auth(...args: string[]): RedisResult<string>;
  select(db: number): RedisResult<string>;
  set(key: string, value: string, ...args: (string | number)[]): RedisResult<string | NgxNull>;
  get(key: string): RedisResult<string | NgxNull>;
  del(...keys: string[]): RedisResult<number>;
  pttl(key: string): RedisResult<number>;
  eval(script: string, numKeys: number, ...args: (string | number)[]): RedisResult;
  evalsha(sha: string, numKeys: number, ...args: (string | number)[]): RedisResult;
  script(subcommand: string, ...args: string[]): RedisResult;

  /** Queue the following commands instead of sending them (their calls return "OK" at once). */
  init_pipeline(n?: number): void;
  /** Send the queue in one write; replies in order, a failed command as { false, err }. */
  commit_pipeline(): LuaMultiReturn<[LuaTable<number, RedisValue | LuaTable<number, false | string>> | undefined, string | undefined]>;
  /** SENTINEL <subcommand> ... (asked of a sentinel). */
  sentinel(...args: string[]): RedisResult<LuaTable<number, string> | NgxNull>;
  /** ROLE: { "master" | "slave" | "sentinel", ... }. */
  role(): RedisResult<LuaTable<number, unknown>>;
  /** PING (after a TLS handshake, to be sure the socket works before it is pooled). */
  ping(): RedisResult<string>;
  /** WAIT numreplicas timeout: how many replicas acknowledged this connection's writes. */
  wait(replicas: number, timeoutMs: number): RedisResult<number>;
  /** The next reply of a subscribed connection (a read timeout leaves it open). */
  read_reply(): LuaMultiReturn<[unknown, string | undefined]>;
  /** ASKING: the next command may touch a slot this cluster node is importing. */
  asking(): RedisResult<string>;
  /** CLUSTER <subcommand> ... (CLUSTER SLOTS: the slot map). */
  cluster(subcommand: string, ...args: string[]): RedisResult<LuaTable<number, unknown>>;
  /** INFO <section> (the eviction check). */
  info(section: string): RedisResult<string>;
  /** CONFIG GET ... (the eviction check, when INFO is not allowed). */
  config(subcommand: string, ...args: string[]): RedisResult;
}

/** The module table returned by require "resty.redis" / "nginx.redis". */
interface RestyRedisModule {
  readonly _VERSION: string;
  /** Called with ':' in the library's docs (`redis:new()`), and works with '.' as well. */
  /** Present from lua-resty-redis 0.28 on. */
  readonly set_timeouts?: unknown;
  "new"(this: RestyRedisModule): LuaMultiReturn<[RestyRedis | undefined, string | undefined]>;
}
