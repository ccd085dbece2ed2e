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

describe("the bench's reading of the machine (bench/lib/proc.js)", function()
  --- The first line of /proc/stat as the bench counts it: total, idle (+ iowait) and steal ticks.
  local function ticks()
    local f = assert(io.open("/proc/stat"))
    local line = f:read("*l")
    f:close()
    local v = {}
    for n in line:gmatch("%d+") do v[#v + 1] = tonumber(n) end
    local total = 0
    for i = 1, 8 do total = total + v[i] end
    return { total = total, idle = v[4] + v[5], steal = v[8] }
  end

  local function node(js)
    local p = io.popen("cd " .. h.root .. " && node -e '" .. js .. "' 2>&1")
    local out = p:read("*a")
    p:close()
    return out
  end

  it("reads the idle and stolen ticks from /proc/stat's fields, between a reading before and one after", function()
    local before = ticks()
    local out = node('const t = require("./bench/lib").machineTicks(); console.log(t.total, t.idle, t.steal)')
    local after = ticks()
    local total, idle, steal = out:match("^(%d+) (%d+) (%d+)")
    assert.is_not_nil(total, out)
    for name, v in pairs({ total = tonumber(total), idle = tonumber(idle), steal = tonumber(steal) }) do
      assert.is_true(before[name] <= v and v <= after[name], name .. ": " .. v .. " not within " .. before[name] .. ".." .. after[name])
    end
  end)

  it("turns two readings into the shares of the time between them that were idle and stolen", function()
    local out = node('const { machineShares } = require("./bench/lib"); ' ..
      'const s = machineShares({ total: 100, idle: 10, steal: 5 }, { total: 300, idle: 60, steal: 45 }); ' ..
      'const z = machineShares({ total: 7, idle: 1, steal: 1 }, { total: 7, idle: 1, steal: 1 }); ' ..
      'console.log(s.idle, s.steal, z.idle, z.steal)')
    assert.equal("0.25 0.2 0 0\n", out)
  end)

  --- What unstolen() made of runs whose stolen shares and errors are given in turn: the run kept, the tries, the errors counted and the runs dropped.
  local function unstolen(runs)
    return node('const { unstolen } = require("./bench/lib"); ' ..
      'const runs = ' .. runs .. '; let i = 0; const dropped = []; ' ..
      'unstolen(async () => ({ ...runs[i], n: ++i }), { max: 0.05, tries: 3, again: (r) => dropped.push(r.n) })' ..
      '.then((r) => console.log(r.n, r.tries, r.errors, dropped.join(",") || "-"))')
  end

  it("runs a measurement again while the hypervisor stole more than the share allowed, three runs at most, keeping every run's errors", function()
    -- kept at once: nothing dropped
    assert.equal("1 1 2 -\n", unstolen("[{ stealShare: 0.05, errors: 2 }, { stealShare: 0, errors: 0 }]"))
    -- the second run is clean: the first's errors still count
    assert.equal("2 2 3 1\n", unstolen("[{ stealShare: 0.3, errors: 2 }, { stealShare: 0.01, errors: 1 }, { stealShare: 0, errors: 0 }]"))
    -- stolen from every time: the third run is kept, as stolen as it is
    assert.equal("3 3 6 1,2\n", unstolen("[{ stealShare: 0.2, errors: 1 }, { stealShare: 0.4, errors: 2 }, " ..
      "{ stealShare: 0.3, errors: 3 }, { stealShare: 0, errors: 0 }]"))
  end)
end)

describe("the error-log check (spec/harness/errors.lua)", function()
  --- Append a line to the runner's error log as nginx writes one: local time, to the second.
  local function log_line(at, msg)
    local f = assert(io.open(h.prefix .. "/logs/error.log", "a"))
    f:write(os.date("%Y/%m/%d %H:%M:%S", at), " [error] 1#1: *1 ", msg, "\n")
    f:close()
  end

  it("takes a reset read in a timer within a second of a process the spec stopped for the stop's, and reports one at any other time", function()
    local reset = "recv() failed (104: Connection reset by peer), context: ngx.timer"
    local r = h.start_redis()
    local mark = h.error_log_mark()
    assert.is_true(r.stop())
    local stop = h.stops[#h.stops]
    assert.is_true(stop.to >= stop.from)
    log_line(stop.to, reset)
    assert.same({}, h.unexpected_errors(mark))
    -- The same line with no stop around it is a fault: reported with its file.
    local kept = { unpack(h.stops) }
    for i = #h.stops, 1, -1 do h.stops[i] = nil end
    local bad = h.unexpected_errors(mark)
    for i, s in ipairs(kept) do h.stops[i] = s end
    assert.equal(1, #bad)
    assert.matches("^logs/error%.log: .*" .. reset:gsub("%p", "%%%0") .. "$", bad[1])
    -- Nor does a stop excuse any other line at that time.
    local mark2 = h.error_log_mark()
    log_line(stop.to, "recv() failed (104: Connection reset by peer), client: 127.0.0.1")
    assert.equal(1, #h.unexpected_errors(mark2))
  end)
end)

h.check_error_logs({ { "recv%(%) failed %(104: Connection reset by peer%), client: 127%.0%.0%.1$", max = 1 } })
