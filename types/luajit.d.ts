// The few LuaJIT FFI pieces lua-resty-dlock uses, reached through require "ffi"
// (ffi is not a global inside nginx).

/** A cdata buffer, e.g. ffi.new("uint8_t[?]", n). */
interface FfiBuffer {
  readonly __ffiBufferBrand: unique symbol;
}

/** Pointer arithmetic on a cdata buffer: `offset(buf, n)` is Lua's `buf + n`. */
declare const offset: LuaAddition<FfiBuffer, number, FfiBuffer>;

/** @noSelf */
interface LibC {
  getrandom(buf: FfiBuffer, len: number, flags: number): number;
  gethostname(buf: FfiBuffer, len: number): number;
  /** nginx's own (the nginx binary exports it): hex digits of src into dst. */
  ngx_hex_dump(dst: FfiBuffer, src: string | FfiBuffer, len: number): FfiBuffer;
  /** lua-nginx-module's (lua-resty-core's ngx.sha1_bin): the 20-byte SHA-1 of src into dst; 1 when done. */
  ngx_http_lua_ffi_sha1_bin(src: string, len: number, dst: FfiBuffer): number;
}

/** @noSelf */
interface FfiModule {
  cdef(defs: string): void;
  readonly C: LibC;
  "new"(ct: string, n: number): FfiBuffer;
  string(buf: FfiBuffer, len?: number): string;
  copy(dst: FfiBuffer, src: string, len: number): void;
}

/** LuaJIT's bit module, reached through require "bit". @noSelf */
interface BitModule {
  band(...x: number[]): number;
  bor(...x: number[]): number;
  bxor(...x: number[]): number;
  lshift(x: number, n: number): number;
  rshift(x: number, n: number): number;
}
