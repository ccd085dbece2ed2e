// Declarations for the parts of ngx_lua (lua-nginx-module 0.10.23 + lua-resty-core)
// that lua-resty-dlock calls. A global script file: no import/export.
//
// Objects that Lua calls with ':' (shared dicts, cosockets, semaphores) are plain
// interfaces; API tables called with '.' are annotated so TSTL passes no self.

/** ngx.null: the lightuserdata that stands for a Redis nil / JSON null. Never equal to nil. */
interface NgxNull {
  readonly __ngxNullBrand: unique symbol;
}

type NgxLogLevel = number & { readonly __ngxLogLevel: unique symbol };

type NgxDictValue = string | number | boolean;

interface NgxSharedDict {
  get(key: string): LuaMultiReturn<[NgxDictValue | undefined, number | string | undefined]>;
  set(key: string, value: NgxDictValue | undefined, exptime?: number, flags?: number): LuaMultiReturn<[boolean, string | undefined, boolean]>;
  safe_set(key: string, value: NgxDictValue, exptime?: number, flags?: number): LuaMultiReturn<[boolean | undefined, string | undefined]>;
  add(key: string, value: NgxDictValue, exptime?: number, flags?: number): LuaMultiReturn<[boolean, string | undefined, boolean]>;
  safe_add(key: string, value: NgxDictValue, exptime?: number, flags?: number): LuaMultiReturn<[boolean | undefined, string | undefined]>;
  delete(key: string): void;
  incr(key: string, value: number, init?: number, initTtl?: number): LuaMultiReturn<[number | undefined, string | undefined, boolean | undefined]>;
  get_keys(maxCount?: number): LuaTable<number, string>;
  ttl(key: string): LuaMultiReturn<[number | undefined, string | undefined]>;
  expire(key: string, exptime: number): LuaMultiReturn<[boolean | undefined, string | undefined]>;
  capacity(): number;
  free_space(): number;
}

interface NgxTcpSocket {
  connect(host: string, port: number): LuaMultiReturn<[1 | undefined, string | undefined]>;
  settimeout(ms: number): void;
  settimeouts(connectMs: number, sendMs: number, readMs: number): void;
  /** data: a string, or an array of string fragments (sent as one write, never joined in Lua). */
  send(data: string | LuaTable<number, string>): LuaMultiReturn<[number | undefined, string | undefined]>;
  receive(pattern?: string | number): LuaMultiReturn<[string | undefined, string | undefined, string | undefined]>;
  /** Whatever has arrived, up to max bytes (waits for at least one). */
  receiveany(max: number): LuaMultiReturn<[string | undefined, string | undefined]>;
  close(): LuaMultiReturn<[1 | undefined, string | undefined]>;
  /** reused: a session to resume, false (no session object back) or nil (a session object back). */
  sslhandshake(reused: boolean | undefined, serverName: string | undefined, verify: boolean): LuaMultiReturn<[unknown, string | undefined]>;
  /** The next handshake's client certificate chain and key (ngx.ssl.parse_pem_cert and parse_pem_priv_key's cdata); lua-resty-core 0.1.25+. */
  setclientcert?(cert: unknown, key: unknown): LuaMultiReturn<[true | undefined, string | undefined]>;
}

/** Opaque handle returned by ngx.thread.spawn. */
interface NgxThread {
  readonly __ngxThreadBrand: unique symbol;
}

/** Opaque handle returned by ngx.timer.every (ngx_lua >= 0.10.9 returns true). */
type NgxTimerHandle = true;

/** @noSelf */
interface NgxTimer {
  at<A extends unknown[]>(delay: number, callback: (this: void, premature: boolean, ...args: A) => void, ...args: A): LuaMultiReturn<[NgxTimerHandle | undefined, string | undefined]>;
  every<A extends unknown[]>(delay: number, callback: (this: void, premature: boolean, ...args: A) => void, ...args: A): LuaMultiReturn<[NgxTimerHandle | undefined, string | undefined]>;
  running_count(): number;
  pending_count(): number;
}

/** @noSelf */
interface NgxWorkerApi {
  pid(): number;
  id(): number | undefined;
  count(): number;
  exiting(): boolean;
}

/** @noSelf */
interface NgxThreadApi {
  spawn<A extends unknown[], R extends unknown[]>(fn: (this: void, ...args: A) => LuaMultiReturn<R> | void, ...args: A): NgxThread;
  wait(...threads: NgxThread[]): LuaMultiReturn<[boolean, ...unknown[]]>;
  kill(thread: NgxThread): LuaMultiReturn<[boolean | undefined, string | undefined]>;
}

/** @noSelf */
interface NgxSocketApi {
  tcp(): NgxTcpSocket;
}

/** @noSelf */
interface NgxReqApi {
  get_headers(max?: number): LuaTable<string, string | LuaTable<number, string>>;
  get_method(): string;
}

/** @noSelf */
interface NgxConfigApi {
  readonly ngx_lua_version: number;
  readonly nginx_version: number;
  readonly subsystem: string;
  prefix(): string;
}

/** @noSelf */
interface Ngx {
  readonly null: NgxNull;

  readonly STDERR: NgxLogLevel;
  readonly EMERG: NgxLogLevel;
  readonly ALERT: NgxLogLevel;
  readonly CRIT: NgxLogLevel;
  readonly ERR: NgxLogLevel;
  readonly WARN: NgxLogLevel;
  readonly NOTICE: NgxLogLevel;
  readonly INFO: NgxLogLevel;
  readonly DEBUG: NgxLogLevel;

  readonly OK: number;
  readonly ERROR: number;
  readonly HTTP_OK: number;
  readonly HTTP_BAD_REQUEST: number;
  readonly HTTP_CONFLICT: number;
  readonly HTTP_TOO_MANY_REQUESTS: number;
  readonly HTTP_SERVICE_UNAVAILABLE: number;
  readonly HTTP_INTERNAL_SERVER_ERROR: number;

  readonly shared: LuaTable<string, NgxSharedDict | undefined>;
  readonly worker: NgxWorkerApi;
  readonly timer: NgxTimer;
  readonly thread: NgxThreadApi;
  readonly socket: NgxSocketApi;
  readonly req: NgxReqApi;
  readonly config: NgxConfigApi;

  /** ngx.var.NAME: nginx variables of the current request (strings, or nil when unset). */
  readonly var: LuaTable<string, string | undefined>;
  /** Per-request Lua table. */
  readonly ctx: LuaTable<string, unknown>;
  /** Response headers of the current request. */
  readonly header: LuaTable<string, string | number | undefined>;
  status: number;

  now(): number;
  update_time(): void;
  time(): number;
  sleep(seconds: number): void;
  log(level: NgxLogLevel, ...args: (string | number | boolean | undefined)[]): void;
  get_phase(): string;
  exit(status: number): never;
  send_headers(): LuaMultiReturn<[1 | undefined, string | undefined]>;
  say(...args: (string | number)[]): LuaMultiReturn<[1 | undefined, string | undefined]>;
  print(...args: (string | number)[]): LuaMultiReturn<[1 | undefined, string | undefined]>;
  on_abort(callback: (this: void) => void): LuaMultiReturn<[1 | undefined, string | undefined]>;

  sha1_bin(s: string): string;
  md5(s: string): string;
  encode_base64(s: string, noPadding?: boolean): string;
  crc32_long(s: string): number;
  quote_sql_str(s: string): string;
}

declare const ngx: Ngx;

/** require "ngx.semaphore" (lua-resty-core). */
interface NgxSemaphore {
  wait(timeoutSeconds: number): LuaMultiReturn<[boolean | undefined, string | undefined]>;
  post(n?: number): void;
  count(): number;
}

/** @noSelf */
interface NgxSemaphoreModule {
  "new"(n?: number): LuaMultiReturn<[NgxSemaphore | undefined, string | undefined]>;
}

/** @noSelf */
interface CjsonSafeModule {
  encode(value: unknown): LuaMultiReturn<[string | undefined, string | undefined]>;
  decode(text: string): LuaMultiReturn<[unknown, string | undefined]>;
  encode_empty_table_as_object(flag: boolean): void;
  readonly empty_array: unknown;
}
