// What a worker does as it starts (dlock.init_worker(), from
// init_worker_by_lua), besides crash recovery's sweep: things a reload must
// not leave undone, such as the probe of a breaker the workers before it
// opened (their timers went with them, and an idle guard gets no request to
// start one).

const lua_pcall = pcall;
const ngx_log = ngx.log;
const ERR = ngx.ERR;

const hooks: ((this: void) => void)[] = [];

/** Run fn in every worker as it starts (registered before the workers fork, in init_by_lua). */
export function onStart(fn: (this: void) => void): void {
  hooks.push(fn);
}

/** The worker starts: every hook, one failing not stopping the others. */
export function started(): void {
  for (const i of $range(1, hooks.length)) {
    const [ok, err] = lua_pcall(hooks[i - 1]!);
    if (!ok) ngx_log(ERR, "dlock: at worker start: ", err);
  }
}
