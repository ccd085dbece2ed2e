// Opt-in ("lua-resty-dlock/ngx" in compilerOptions.types): the ngx global as
// lua-resty-dlock itself declares it (shared dicts, timers, cosockets,
// ngx.var, ngx.say, ngx.exit, ngx.log...). Leave it out when your project
// declares ngx its own way: two global ngx declarations clash.
/// <reference path="../types/ngx.d.ts" />
