// Did a request's backend perhaps go on after nginx was done with it? A guard
// that took a key for the request must then keep it to its ttl (unrenewed),
// not release it beside a backend still at work.

import * as vars from "./vars";

const ngx_ = ngx;
const str_find = string.find;
const str_gmatch = string.gmatch;
const var_get = vars.get;

/** A try in $upstream_status and the like: ", " between tries, " : " between upstream groups. */
const TRY = "[^%s,:]+";

/**
 * Did an upstream time out once nginx had connected to it (a 504 whose
 * $upstream_connect_time is a time)? A connect that timed out is a 504 too,
 * and "-": no backend got the request.
 */
function timedOutConnected(statuses: string): boolean {
  const nextStatus = str_gmatch(statuses, TRY) as unknown as (this: void) => string | undefined;
  const nextTime = str_gmatch(var_get("upstream_connect_time") ?? "", TRY) as unknown as (this: void) => string | undefined;
  let s = nextStatus();
  while (s !== undefined) {
    const t = nextTime();
    if (s === "504" && t !== undefined && t !== "-") return true;
    s = nextStatus();
  }
  return false;
}

/**
 * In the log phase: may the backend still be running the request, so that its
 * key must be kept? Yes when an upstream timed out once connected (a 504 in
 * $upstream_status, whatever error_page made of the answer, also when the
 * next upstream answered): nginx closed the connection, the application
 * behind it goes on.
 * Yes when the client went away while an upstream worked. A connection nginx
 * closed itself (444, after the upstream answered: error_page to return 444) is
 * no client's abort. A client that gave up a download counts as one even when
 * the upstream had sent it whole: nginx's byte counts include FastCGI's and
 * gRPC's framing (and the proxy's variables are gone by the log phase), so a
 * response cut short cannot be told from a whole one for every upstream.
 */
export function aborted(): boolean {
  const tried = var_get("upstream_status");
  if (tried !== undefined && str_find(tried, "504", 1, true)[0] !== undefined && timedOutConnected(tried)) return true;
  if (var_get("request_completion") === "OK" || ngx_.status === 444) return false;
  const upstream = var_get("upstream_addr");
  return upstream !== undefined && upstream !== "";
}
