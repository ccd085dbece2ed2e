// A client certificate for TLS to Redis. A redis-server with TLS asks every
// client for one unless told otherwise (`tls-auth-clients yes` is its
// default), and so do sentinels and cluster nodes set up the same way.
//
// Read, parsed and checked against its key once, when the factory is made:
// init_by_lua runs as the master's user, so a key file only root may read
// works, as nginx's own ssl_certificate_key does, and a key that belongs to
// another certificate is refused there rather than at every handshake. Each
// fresh connection hands both to its handshake (setup.ts). The parsed key
// stays in this module: no table a caller can reach holds it.

const ffi = require("ffi") as FfiModule;

const io_open = io.open;
const lua_pcall = pcall;
const lua_require = require;
const lua_setmetatable = setmetatable;
const lua_tostring = tostring;
const lua_type = type;
const ngx_md5 = ngx.md5;
const str_find = string.find;
const str_sub = string.sub;

export interface ClientCert {
  /** A digest of the certificate, for pool names: a connection made with one certificate never serves another. */
  readonly digest: string;
}

interface Parsed {
  readonly chain: unknown;
  readonly key: unknown;
}

const parsed = lua_setmetatable(new LuaTable<ClientCert, Parsed>(), { __mode: "k" });

/** The PEM text an option gives: the value itself when it is PEM, else the file it names; or why not. */
function pem(name: string, v: string): LuaMultiReturn<[string | undefined, string | undefined]> {
  if (str_find(v, "-----BEGIN ", 1, true)[0] !== undefined) return $multi(v, undefined);
  const [f, err] = io_open(v, "rb");
  if (f === undefined) {
    let hint = "";
    if (str_find(lua_tostring(err), "Permission denied", 1, true)[0] !== undefined) {
      hint = " (it is read when the factory is made: make it in init_by_lua, which runs as the master's user, " +
        "or let the workers' user read the file)";
    }
    return $multi(undefined, "dlock: redis." + name + ": cannot read " + lua_tostring(err) + hint);
  }
  const text = f.read("*a");
  f.close();
  return $multi(lua_type(text) === "string" ? (text as string) : "", undefined);
}

/** Where a value came from, for messages: its path, never the PEM text (a key's is a secret). */
function origin(v: string): string {
  return str_find(v, "-----BEGIN ", 1, true)[0] !== undefined ? "the PEM text given" : v;
}

interface OpenSsl {
  OPENSSL_sk_value(this: void, stack: unknown, i: number): unknown;
  X509_check_private_key(this: void, cert: unknown, key: unknown): number;
}

// nginx links OpenSSL, so its functions are in the process (Debian's nginx and OpenResty both).
lua_pcall(ffi.cdef, "void *OPENSSL_sk_value(const void *st, int i); int X509_check_private_key(const void *x, const void *k);");

function lookupOpenSsl(this: void): OpenSsl {
  const c = ffi.C as unknown as OpenSsl;
  // Indexing ffi.C raises for a symbol the process lacks: look both up here.
  return { OPENSSL_sk_value: c.OPENSSL_sk_value, X509_check_private_key: c.X509_check_private_key };
}
const [hasOpenSsl, openssl] = lua_pcall(lookupOpenSsl);

/** Does key belong to the first certificate of chain? True when it cannot be told. */
function belongs(chain: unknown, key: unknown): boolean {
  if (!hasOpenSsl) return true;
  const o = openssl as OpenSsl;
  return o.X509_check_private_key(o.OPENSSL_sk_value(chain, 0), key) === 1;
}

interface NgxSsl {
  parse_pem_cert(this: void, pem: string): LuaMultiReturn<[unknown, string | undefined]>;
  parse_pem_priv_key(this: void, pem: string): LuaMultiReturn<[unknown, string | undefined]>;
}

/**
 * The client certificate of redis.ssl_client_cert and redis.ssl_client_priv_key
 * (each a PEM file's path or PEM text), or why it cannot be used.
 */
export function load(cert: string, key: string): LuaMultiReturn<[ClientCert | undefined, string | undefined]> {
  const [ok, mod] = lua_pcall(lua_require, "ngx.ssl");
  if (!ok || lua_type(mod) !== "table") {
    return $multi(undefined, "dlock: redis.ssl_client_cert needs lua-resty-core's ngx.ssl: " + lua_tostring(mod));
  }
  const ssl = mod as NgxSsl;
  const [certPem, cerr] = pem("ssl_client_cert", cert);
  if (certPem === undefined) return $multi(undefined, cerr);
  const [keyPem, kerr] = pem("ssl_client_priv_key", key);
  if (keyPem === undefined) return $multi(undefined, kerr);
  const [chain, perr] = ssl.parse_pem_cert(certPem);
  if (chain === undefined) {
    return $multi(undefined, "dlock: redis.ssl_client_cert: no PEM certificate in " + origin(cert) + " (" + lua_tostring(perr) + ")");
  }
  const [pkey, pkerr] = ssl.parse_pem_priv_key(keyPem);
  if (pkey === undefined) {
    return $multi(undefined, "dlock: redis.ssl_client_priv_key: no unencrypted PEM private key in " + origin(key) +
      " (" + lua_tostring(pkerr) + ")");
  }
  if (!belongs(chain, pkey)) {
    return $multi(undefined, "dlock: redis.ssl_client_priv_key: the key in " + origin(key) +
      " does not belong to the certificate in " + origin(cert));
  }
  const c: ClientCert = { digest: str_sub(ngx_md5(certPem), 1, 16) };
  parsed.set(c, { chain, key: pkey });
  return $multi(c, undefined);
}

/** Hand c's certificate and key to sock's coming handshake; nil, or why not. */
export function apply(sock: NgxTcpSocket, c: ClientCert): string | undefined {
  const p = parsed.get(c)!;
  if (sock.setclientcert === undefined) {
    return "this nginx's lua module has no tcpsock:setclientcert (it needs lua-nginx-module 0.10.23 and lua-resty-core 0.1.25 or newer)";
  }
  const [ok, err] = sock.setclientcert(p.chain, p.key);
  if (ok === undefined) return lua_tostring(err);
  return undefined;
}
