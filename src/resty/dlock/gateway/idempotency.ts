// Gateway mode "idempotency": the first request with an Idempotency-Key runs,
// its response is stored in Redis, and every retry with the same key (from any
// nginx sharing the Redis) gets that response back instead of running the
// operation again (draft-ietf-httpapi-idempotency-key-header, Stripe semantics).
//
// One Redis hash per (scope, key), both hashed (see scripts.IDEM_*):
// - access: read the request body, fingerprint the request, and claim the key
//   in one script: SET NX of a "running" record with our token, or the record
//   that is there (running: 409 or wait; done: replay; other fingerprint: 422);
// - while the request runs, the gateway's keeper renews the claim like any
//   lease (inflight.ts), also through internal redirects and reloads;
// - header_filter / body_filter: note the status, headers and body (up to
//   max_body); at the end of the body a timer turns the claim into the stored
//   record, owner-checked (filters have no cosockets). The client may have the
//   response, and retry, before that store lands: so a duplicate that finds the
//   claim running waits for it (wait, at least 1 s, fleet-wide), and on this
//   nginx a mark in the shared dict, set before the last bytes leave, makes it
//   wait for as long as the store may take (up to the lease);
// - log: a request that ended without its full response (client abort while
//   the upstream works, a cut upstream) keeps its claim until the lease runs
//   out, unrenewed: the backend may still be running it.
//
// The parts: idempotency/options.ts (the option table, checked once),
// idempotency/claim.ts (the claim, and duplicates waiting for its response),
// idempotency/capture.ts (the held claim and its filters),
// idempotency/record.ts (the store of its response), idempotency/answers.ts
// (replays and problem+json refusals); this face reads the request and
// decides among them.

import * as check from "../core/check";
import * as inflight from "./inflight";
import * as stats from "./stats";
import * as breaker from "./breaker";
import * as token from "../core/token";
import * as shared from "./common";
import * as digest from "./digest";
import * as answers from "./idempotency/answers";
import * as capture from "./idempotency/capture";
import * as claims from "./idempotency/claim";
import * as options from "./idempotency/options";
import type * as gwoptions from "./options";
import * as keys from "./key";

const lua_tostring = tostring;
const ngx_log = ngx.log;
const ERR = ngx.ERR;
const ngx_var = ngx.var;
const sha1_bin = ngx.sha1_bin;
const req_get_method = ngx.req.get_method;
const req_get_headers = ngx.req.get_headers;
/** Whether nginx joins a header's lines in its $http_ variable (1.23.0 on). */
const JOINS = ngx.config.nginx_version >= 1023000;
const str_sub = string.sub;
const str_gsub = string.gsub;
const lua_type = type;
const lua_tonumber = tonumber;
const lua_setmetatable = setmetatable;
const io_open = io.open;

export type Guard = options.Guard;
export const headerFilter = capture.headerFilter;
export const bodyFilter = capture.bodyFilter;
export const finish = capture.finish;

// The parts of the ngx API only this mode uses.
/** @noSelf */
interface NgxReqBody {
  read_body(): void;
  get_body_data(): string | undefined;
  get_body_file(): string | undefined;
}
const nreq = ngx.req as unknown as NgxReqBody;

/** Longest key accepted, in bytes, after unquoting (Stripe's limit). */
const MAX_KEY = 255;

const found = check.found;

/** The key as sent: an sf-String ("...", \" and \\ escaped) unquoted, or a bare token. nil when invalid. */
function parseKey(raw: string): string | undefined {
  let k: string;
  if (str_sub(raw, 1, 1) === "\"") {
    if (raw.length < 3 || str_sub(raw, -1) !== "\"") return undefined;
    const inner = str_sub(raw, 2, -2);
    // Printable ASCII only; a quote or backslash only as part of an escape pair.
    if (found(inner, "[^\x20-\x7e]")) return undefined;
    const [rest] = str_gsub(inner, "\\[\"\\]", "");
    if (found(rest, "[\"\\]")) return undefined;
    [k] = str_gsub(inner, "\\([\"\\])", "%1");
  } else {
    // tchar (RFC 9110) plus ":" and "/", as sf-Token allows: a bare UUID too.
    if (!found(raw, "^[%w!#%$%%&'%*%+%-%.%^_`|~:/]+$")) return undefined;
    k = raw;
  }
  if (k.length === 0 || k.length > MAX_KEY) return undefined;
  return k;
}

/**
 * Whether the key's header came in more than one line. nginx 1.23 and later join
 * the lines of a $http_ variable with ", ", which parseKey refuses (the draft's
 * key is one sf-Item); 1.22 gives the first line alone, and would claim a key the
 * client never sent alone: asked of the request's headers there, only then.
 */
function sentTwice(t: keys.Template): boolean {
  const only = t.only;
  if (JOINS || only === undefined || str_sub(only, 1, 5) !== "http_") return false;
  const h = req_get_headers() as LuaTable<string, unknown>;
  return lua_type(h.get(str_sub(only, 6))) === "table";
}

/** The request body (read now), or nil and the reason when it is larger than max. */
function body(max: number): LuaMultiReturn<[string | undefined, string | undefined]> {
  const len = lua_tonumber(ngx_var.get("content_length"));
  if (len !== undefined && len > max) return $multi(undefined, "large");
  nreq.read_body();
  const data = nreq.get_body_data();
  if (data !== undefined) {
    if (data.length > max) return $multi(undefined, "large");
    return $multi(data, undefined);
  }
  const file = nreq.get_body_file();
  if (file === undefined) return $multi("", undefined);
  // Buffered to a file (larger than client_body_buffer_size): read it back, bounded.
  const [f] = io_open(file, "rb");
  if (f === undefined) return $multi(undefined, "unreadable");
  const s = f.read(max + 1);
  f.close();
  const text = lua_type(s) === "string" ? (s as string) : "";
  if (text.length > max) return $multi(undefined, "large");
  return $multi(text, undefined);
}

/** Method, path with query as sent, and body: two requests that differ in any of them differ here. */
function fingerprint(method: string, b: string): string {
  return token.hex(sha1_bin(method + "\n" + (ngx_var.get("request_uri") ?? "") + "\n" + sha1_bin(b)));
}

function access(g: Guard): void {
  if (!shared.decides(g.name)) return;
  if (inflight.holds(g._owner, undefined)) {
    // The same request again, after an internal redirect: it holds the claim already.
    return;
  }
  const method = req_get_method();
  if (!g._methods.has(method)) return;
  const [raw, kerr] = keys.value(g._key);
  if (raw === undefined) {
    if (kerr !== undefined) {
      answers.keyFailure(g, kerr);
      return;
    }
    stats.incr(g._dict, g.name, "missing_key");
    keys.note(g, g._key, false);
    if (g._onMissing === "reject") {
      answers.problem(g, 400, "missing-key", "Idempotency-Key missing", "this endpoint requires an Idempotency-Key header");
    }
    return;
  }
  keys.note(g, g._key, true);
  const k = parseKey(raw);
  if (k === undefined || sentTwice(g._key)) {
    stats.incr(g._dict, g.name, "missing_key");
    answers.problem(g, 400, "invalid-key", "Idempotency-Key invalid",
      "the key must be a quoted string or a token of 1 to " + lua_tostring(MAX_KEY) + " printable ASCII characters");
    return;
  }
  const [b, berr] = body(g._maxRequestBody);
  if (b === undefined) {
    if (berr === "large") {
      answers.problem(g, 413, "request-too-large", "Request body too large for an idempotent request",
        "requests with an Idempotency-Key may have bodies of up to " + lua_tostring(g._maxRequestBody) + " bytes");
    }
    ngx_log(ERR, "dlock: guard ", g.name, ": cannot read the request body back from its temp file");
    answers.problem(g, 500, "unreadable", "Request body unreadable", "the request body could not be read");
    return;
  }
  const fp = fingerprint(method, b);
  if (breaker.skips(g._dict, g.name, g._probeFor)) {
    stats.incr(g._dict, g.name, "short_circuited");
    answers.onRedisFailure(g, undefined);
    return;
  }
  // Scope and key both client-controlled: hashed, fixed length, never stored in clear.
  let scoped = k;
  if (g._scope !== undefined) {
    const [sv, serr] = keys.value(g._scope);
    if (sv === undefined) {
      if (serr !== undefined) {
        answers.keyFailure(g, "scope: " + serr);
        return;
      }
      // Without it, this client's key would be looked up among every other
      // scopeless client's: another one's stored response could be replayed to it.
      stats.incr(g._dict, g.name, "missing_key");
      if (g._onMissing === "reject") {
        answers.problem(g, 400, "missing-scope", "Idempotency-Key without a client identity",
          "this endpoint keeps idempotency keys per client, and this request does not say which client it is");
      }
      return;
    }
    scoped = sha1_bin(sv) + k;
  }
  const rkey = digest.key(g._prefix, scoped);
  const [tok, terr] = token.random();
  if (tok === undefined) {
    answers.onRedisFailure(g, terr);
    return;
  }
  let [what, rec, err] = claims.claim(g, rkey, tok, fp);
  if (what === "record" && rec!.state === "running") {
    if (rec!.fp !== fp) {
      answers.answer(g, rec!, fp);
    }
    stats.incr(g._dict, g.name, "waited");
    [what, rec, err] = claims.waitFor(g, rkey, tok, fp);
    if (what === "timeout") {
      stats.incr(g._dict, g.name, "timed_out");
      answers.inFlight(g);
    }
  }
  if (what === "claimed") {
    // Unless it cannot be renewed (no timer for the watchdog): dropped, and on_error decides.
    if (capture.hold(g, rkey, tok, fp)) return;
  }
  if (what === "record") {
    answers.answer(g, rec!, fp);
  }
  answers.onRedisFailure(g, err);
}

/** The guards' metatable (its __index, the methods, is set once they are). */
const guardMt: { __index?: object } = {};

const guardMethods = {
  /** In access_by_lua: replay, refuse, or let the first request with its key through. */
  access(this: Guard): void {
    if (shared.misused(this, guardMt, "access")) return;
    access(this);
  },
  /** In log_by_lua (the module-level gateway.log() does the same for every guard). */
  log(this: Guard): void {
    if (shared.misused(this, guardMt, "log")) return;
    inflight.finish(this._owner);
    capture.finish();
  },
  header_filter(this: Guard): void {
    capture.headerFilter();
  },
  body_filter(this: Guard): void {
    capture.bodyFilter();
  },
};
guardMt.__index = guardMethods;

/** Validate the options (already checked against gateway.new's names) and build the guard. */
export function create(o: gwoptions.Options, name: string): LuaMultiReturn<[Guard | undefined, string | undefined]> {
  const [f, err] = options.parse(o, name, capture.forget);
  if (f === undefined) return $multi(undefined, err);
  return $multi(lua_setmetatable(f, guardMt) as unknown as Guard, undefined);
}

// Exported by name: this module's own uses of them are locals, not lookups in its exports table.
export { parseKey };
