-- nginx/lib.sh picks the nginx binary (DLOCK_NGINX) and the Lua module lines
-- its configs need, for every harness: the runner, the nginx instances specs
-- start (helpers.start_nginx, from inside a worker that has no environment),
-- the demo, bench and torture.
local h = require "helpers"

--- Run a shell snippet after sourcing nginx/lib.sh, with DLOCK_NGINX set (or
--- unset when nil); returns its stdout and whether it exited 0.
local function lib(dlock_nginx, snippet)
  local var = dlock_nginx and ("DLOCK_NGINX='" .. dlock_nginx .. "' ") or ""
  local p = io.popen("export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin; " .. var ..
    "bash -c '. " .. h.root .. "/nginx/lib.sh 2>/dev/null; " .. snippet .. "' 2>/dev/null; echo \"exit=$?\"")
  local out = p:read("*a")
  p:close()
  local body, code = out:match("^(.-)\n?exit=(%d+)\n$")
  return body, code == "0"
end

--- A stand-in binary that answers -V with the given configure arguments, as nginx does (on stderr).
local function fake_nginx(dir, configure)
  os.execute("mkdir -p " .. dir)
  local path = dir .. "/nginx"
  local f = assert(io.open(path, "w"))
  f:write("#!/bin/sh\necho 'nginx version: test' >&2\necho 'configure arguments: ", configure, "' >&2\n")
  f:close()
  os.execute("chmod 755 " .. path)
  return path
end

describe("the harness's nginx (nginx/lib.sh)", function()
  local dir = h.prefix .. "/harness"

  it("renders no load_module line for an nginx with Lua compiled in: OpenResty's own build and one from lua-nginx-module's checkout", function()
    for _, args in ipairs({
      "--prefix=/usr/local/openresty/nginx --add-module=../ngx_devel_kit-0.3.4 --add-module=../ngx_lua-0.10.28 --with-http_ssl_module",
      "--prefix=/opt/or/nginx --add-module=/opt/or/src/ngx_devel_kit --add-module=/opt/or/src/lua-nginx-module",
    }) do
      local bin = fake_nginx(dir .. "/static" .. #args, args)
      local out, ok = lib(nil, "lua_modules " .. bin)
      assert.is_true(ok, args)
      assert.equal("", out, args)
    end
  end)

  it("loads the dynamic Lua modules from the binary's --modules-path otherwise (Debian's nginx)", function()
    local bin = fake_nginx(dir .. "/debian", "--prefix=/usr/share/nginx --modules-path=/usr/lib/nginx/modules --with-http_ssl_module")
    assert.equal("load_module /usr/lib/nginx/modules/ndk_http_module.so; load_module /usr/lib/nginx/modules/ngx_http_lua_module.so;",
      (lib(nil, "lua_modules " .. bin)))
  end)

  it("takes DLOCK_NGINX as a command, a path, or an OpenResty folder (nginx/sbin/nginx), and Debian's nginx without it", function()
    local or_dir = dir .. "/openresty"
    os.execute("mkdir -p " .. or_dir .. "/nginx/sbin && ln -sfn " .. h.env.nginx .. " " .. or_dir .. "/nginx/sbin/nginx")
    assert.equal(or_dir .. "/nginx/sbin/nginx", (lib(or_dir, 'printf %s "$NGINX_BIN"')))
    assert.equal(h.env.nginx, (lib(h.env.nginx, 'printf %s "$NGINX_BIN"')))
    assert.equal("/usr/sbin/nginx", (lib("nginx", 'printf %s "$NGINX_BIN"')))
    assert.equal("/usr/sbin/nginx", (lib(nil, 'printf %s "$NGINX_BIN"')))
  end)

  it("starts the nginx of a spec (helpers.start_nginx) from the runner's binary, with the module lines that binary needs", function()
    local peer = h.start_nginx("spec-peer.conf", { WORKERS = 1 })
    local ok, err = pcall(function()
      local res = assert(h.http(peer.port, "/ping"))
      assert.equal(200, res.status)
      local p = io.popen("readlink /proc/" .. peer.pid .. "/exe")
      local exe = p:read("*l")
      p:close()
      p = io.popen("readlink -f " .. h.env.nginx)
      local want = p:read("*l")
      p:close()
      assert.equal(want, exe)
    end)
    peer.stop()
    assert(ok, err)
  end)
end)

h.check_error_logs({})
