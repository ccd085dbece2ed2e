// The Redis key of a client-controlled request key: the prefix, then the hex
// SHA-1 of the key, so any size and any bytes map to a bounded key. Built in
// C buffers: the digest, its hex after the prefix, one Lua string in all.
// Hashed in Lua it took three (the digest, its hex, the joined key), and
// interning each new string cost the worker more than hashing the key
// (bench/README.md, where an uncontended lock's time goes).

import * as token from "../core/token";

const ffi = require("ffi") as FfiModule;

// lua-resty-core declares it already; the pcall makes us independent of the order.
pcall(ffi.cdef, "int ngx_http_lua_ffi_sha1_bin(const unsigned char *src, size_t len, unsigned char *dst);");

const sha1_bin = ngx.sha1_bin;
const hex = token.hex;
const ffi_C = ffi.C;
const ffi_string = ffi.string;
const ffi_copy = ffi.copy;
const lua_pcall = pcall;

/** Longest prefix built in the buffer; a longer one is joined in Lua. */
const PREFIX_MAX = 512;
const SHA1_HEX = 40;
const out = ffi.new("uint8_t[?]", PREFIX_MAX + SHA1_HEX);
const digest = ffi.new("uint8_t[?]", 20);

function lookup(this: void): boolean {
  return ffi_C.ngx_http_lua_ffi_sha1_bin !== undefined && ffi_C.ngx_hex_dump !== undefined;
}
const [found, both] = lua_pcall(lookup);
const inC = found && both === true;

/** The prefix `out` starts with now: guards hash one after another, each copies its own once. */
let copied: string | undefined;

/** prefix .. the lower-case hex SHA-1 of raw, as one new string. */
export function key(prefix: string, raw: string): string {
  const n = prefix.length;
  if (inC && n <= PREFIX_MAX && ffi_C.ngx_http_lua_ffi_sha1_bin(raw, raw.length, digest) === 1) {
    if (copied !== prefix) {
      ffi_copy(out, prefix, n);
      copied = prefix;
    }
    ffi_C.ngx_hex_dump(offset(out, n), digest, 20);
    return ffi_string(out, n + SHA1_HEX);
  }
  return prefix + hex(sha1_bin(raw));
}
