// What a request the guard does not let through is sent: the stored response
// (a replay), or an RFC 9457 problem saying why not. Each ends the request.

import * as giveback from "../giveback";
import * as stats from "../stats";
import * as breaker from "../breaker";
import * as keys from "../key";
import type * as claims from "./claim";
import type * as options from "./options";

const lua_tostring = tostring;
const lua_pairs = pairs;
const HTTP_OK = ngx.HTTP_OK;
const ngx_header = ngx.header;
const req_get_method = ngx.req.get_method;
const ngx_exit = ngx.exit;
const ngx_print = ngx.print;
const ngx_send_headers = ngx.send_headers;
const ngx_ = ngx;
const str_gsub = string.gsub;
const str_lower = string.lower;
const str_format = string.format;
const str_byte = string.byte;
const str_gmatch = string.gmatch;
const given_back = giveback.refused;

type Guard = options.Guard;

/** Problem types (RFC 9457 `type`), one per refusal. */
// A URN: no page of ours to point at, and clients match the string, not its content.
const TYPE = "urn:resty-dlock:idempotency:";

function jsonStr(s: string): string {
  const [q] = str_gsub(s, "[%c\"\\]", (c: string) => str_format("\\u%04x", str_byte(c)));
  return "\"" + q + "\"";
}

/**
 * An RFC 9457 problem details answer, and the end of the request. Unless
 * Redis failed (kind "unavailable"), the guards the request passed before
 * give back what they took (giveback.ts): it never ran.
 */
function problem(g: Guard, status: number, kind: string, title: string, detail: string, retryAfter?: number): never {
  if (kind !== "unavailable") given_back();
  ngx_.status = status;
  ngx_header.set("Content-Type", "application/problem+json");
  if (retryAfter !== undefined) {
    ngx_header.set("Retry-After", retryAfter);
  }
  if (g._headers !== undefined) {
    for (const [k, v] of lua_pairs(g._headers)) {
      ngx_header.set(k, v);
    }
  }
  const body = str_format("{\"type\":%s,\"title\":%s,\"status\":%d,\"detail\":%s}\n",
    jsonStr(TYPE + kind), jsonStr(title), status, jsonStr(detail));
  ngx_header.set("Content-Length", body.length);
  ngx_print(body);
  return ngx_exit(HTTP_OK);
}

/** Answer with the stored response. */
function replay(g: Guard, rec: claims.Rec): never {
  stats.incr(g._dict, g.name, "replayed");
  ngx_.status = rec.status;
  // Header lines "name: value\n", a name repeated for each of its values (Set-Cookie...),
  // as the backend wrote it (records of earlier releases: in lower case).
  // One name in two spellings is one header (ngx.header would let the second replace the first).
  const multi = new LuaTable<string, string[]>();
  const spelt = new LuaTable<string, string>();
  for (const [n, v] of str_gmatch(rec.headers, "([^:\n]+): ([^\n]*)\n")) {
    const lower = str_lower(n as string);
    let list = multi.get(lower);
    if (list === undefined) {
      list = [];
      multi.set(lower, list);
      spelt.set(lower, n as string);
    }
    list.push(v as string);
  }
  for (const [lower, list] of lua_pairs(multi)) {
    const name = spelt.get(lower)!;
    if (list.length === 1) {
      ngx_header.set(name, list[0]!);
    } else {
      ngx_header.set(name, list as unknown as string);
    }
  }
  // None stored: none sent. Unset, nginx would add its default_type to the replay.
  if (!multi.has("content-type")) ngx_header.delete("Content-Type");
  ngx_header.set("Idempotent-Replayed", "true");
  if (rec.status === 204 || rec.status === 304) {
    // RFC 9110: a 204 has no Content-Length, and a 304's would describe the
    // representation, not this empty answer; ngx.exit on its own would add "0".
    ngx_send_headers();
    return ngx_exit(HTTP_OK);
  }
  // A HEAD response's own (stored) Content-Length stands, or none: its body was never sent.
  if (!multi.has("content-length") && req_get_method() !== "HEAD") ngx_header.set("Content-Length", rec.body.length);
  ngx_print(rec.body);
  return ngx_exit(HTTP_OK);
}

/** A completed record for this request: replay it, or say why it cannot be. */
export function answer(g: Guard, rec: claims.Rec, fp: string): never {
  if (rec.fp !== fp) {
    stats.incr(g._dict, g.name, "mismatch");
    return problem(g, 422, "mismatch", "Idempotency-Key reused with another request",
      "this key was first used with another method, path, query or body");
  }
  if (rec.state === "done") {
    return replay(g, rec);
  }
  // Completed, but its response was not kept (larger than max_body): the
  // operation ran, so it must not run again; tell the client so, for good.
  stats.incr(g._dict, g.name, "replayed");
  ngx_header.set("Idempotent-Replayed", "true");
  return problem(g, 409, "not-replayable", "Request already processed, its response is not replayable",
    "the first request with this key completed with status " + lua_tostring(rec.status) +
    "; its response was too large to store, so it cannot be replayed");
}

export function inFlight(g: Guard): never {
  stats.incr(g._dict, g.name, "conflict");
  return problem(g, 409, "in-flight", "A request with this Idempotency-Key is being processed",
    "retry after the first request with this key has completed", 1);
}

/** A key (or scope) that cannot be computed: on_error, never a pass as if it were missing. */
export function keyFailure(g: Guard, problemText: string): void {
  stats.incr(g._dict, g.name, "key_errors");
  keys.failed(g.name, problemText, g._errorWhat);
  if (g._onError === "allow") return;
  problem(g, g._errorStatus, "unavailable", "Idempotency keys cannot be checked right now",
    "the idempotency key of this request could not be computed; retry later with the same key");
}

export function onRedisFailure(g: Guard, err: string | undefined): void {
  if (err !== undefined) breaker.redisFailed(g, err);
  // on_error = "allow" runs it without protection against a second execution: counted, logged above.
  if (breaker.failedOpen(g)) return;
  problem(g, g._errorStatus, "unavailable", "Idempotency keys cannot be checked right now",
    "the store of idempotency keys is unavailable; retry later with the same key");
}

// Exported by name: this module's own uses of them are locals, not lookups in its exports table.
export { problem };
