// What the request tracking tells the operator: a setup that hides a request's
// end, said once; a keeper that cannot run, said once per guard, worker and
// interval (a timer refused on every request would fill the error log).

import * as check from "../core/check";
import * as quiet from "../core/quiet";

const ngx_log = ngx.log;
const ERR = ngx.ERR;
const WARN = ngx.WARN;
const quiet_due_for = quiet.dueFor;
const quiet_more = quiet.more;

const warnedUnlogged = new LuaSet<string>();

/** A request of guard `name` ended without log(): once per guard and worker. */
export function unlogged(name: string): void {
  if (warnedUnlogged.has(name)) return;
  warnedUnlogged.add(name);
  ngx_log(WARN, "dlock: guard ", name, ": a request ended without log() (its final location runs none, ",
    "e.g. after error_page, try_files or X-Accel-Redirect); its lease was released late and a client abort ",
    "could not be seen: add log_by_lua_block { require(\"resty.dlock.gateway\").log() } at http level");
}

let warnedBlind = false;

/** This ngx_lua cannot tell whether a request lives: once per worker. */
export function blind(): void {
  if (warnedBlind) return;
  warnedBlind = true;
  ngx_log(WARN, "dlock: gateway: this ngx_lua does not let us see when a request is over: only log() ",
    "ends a lease, so put log_by_lua_block { require(\"resty.dlock.gateway\").log() } at http level");
}

/** Per guard, its line about a keeper that could not start. */
const keeperless: quiet.Quiets = new LuaTable();

/** The keeper could not start (no timer): requests that end without log() are not noticed meanwhile. */
export function noKeeper(name: string, err: string): void {
  const n = quiet_due_for(keeperless, name);
  if (n > 0) ngx_log(ERR, "dlock: guard ", name, ": ", check.reason(err), quiet_more(n));
}
