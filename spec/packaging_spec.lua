-- How lua-resty-dlock ships: one version everywhere; a rockspec that lists
-- every module and that LuaRocks installs into a tree nginx loads it from; an
-- npm package whose declarations compile TypeScriptToLua code to Lua that
-- nginx runs.
local h = require "helpers"
local cjson = require "cjson.safe"

local root = h.root

local function read(path)
  local text = h.read_file(root .. "/" .. path)
  assert(text, "cannot read " .. path)
  return text
end

-- nginx starts workers with an empty environment: give commands a PATH, and a
-- HOME of their own so npm and luarocks write nothing outside the spec prefix.
local home = h.prefix .. "/home"
local function shell(cmd)
  local p = io.popen("export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=" .. home ..
    "; mkdir -p $HOME; (" .. cmd .. ") 2>&1; echo \"exit $?\"")
  local out = p:read("*a")
  p:close()
  local body, rc = out:match("^(.-)exit (%d+)\n$")
  return tonumber(rc) == 0, body or out
end

local function must(cmd)
  local ok, out = shell(cmd)
  assert(ok, cmd .. " failed:\n" .. out)
  return out
end

local VERSION = read("src/resty/dlock/version.ts"):match('export const VERSION = "([^"]+)"')

describe("the version", function()
  it("lives in src/resty/dlock/version.ts alone; every public module reports it as _VERSION", function()
    assert.matches("^%d+%.%d+%.%d+$", VERSION)
    for _, m in ipairs({ "resty.dlock", "resty.dlock.semaphore", "resty.dlock.gateway", "resty.dlock.status" }) do
      assert.equal(VERSION, require(m)._VERSION, m)
    end
    local others = must("cd " .. root .. " && grep -rln '_VERSION *= *\"' src || true")
    assert.equal("", others)
  end)

  it("is the one package.json, its lockfile, the rockspec, dist.ini and CHANGELOG's latest entry carry", function()
    local pkg = assert(cjson.decode(read("package.json")))
    assert.equal(VERSION, pkg.version, "package.json")
    local lock = assert(cjson.decode(read("package-lock.json")))
    assert.equal(VERSION, lock.version, "package-lock.json")
    assert.equal(VERSION, lock.packages[""].version, "package-lock.json")
    local rockspecs = must("cd " .. root .. " && ls *.rockspec")
    assert.equal("lua-resty-dlock-" .. VERSION .. "-1.rockspec\n", rockspecs)
    local rock = read("lua-resty-dlock-" .. VERSION .. "-1.rockspec")
    assert.matches('\nversion = "' .. VERSION:gsub("%.", "%%.") .. '%-1"\n', rock)
    assert.matches('tag = "v' .. VERSION:gsub("%.", "%%.") .. '"', rock)
    assert.equal(VERSION, read("dist.ini"):match("\nversion = (%S+)\n"), "dist.ini")
    assert.equal(VERSION, read("CHANGELOG.md"):match("\n## %[(%d[^%]]*)%]"), "CHANGELOG.md")
  end)
end)

--- The rockspec's fields, read as LuaRocks reads it (plain assignments).
local function rockspec()
  local env = {}
  local chunk = assert(loadfile(root .. "/lua-resty-dlock-" .. VERSION .. "-1.rockspec"))
  setfenv(chunk, env)
  chunk()
  return env
end

describe("the LuaRocks rockspec", function()
  it("lists every module of dist/ under its require name, and nothing else", function()
    local want = {}
    for path in must("cd " .. root .. " && find dist -name '*.lua' | sort"):gmatch("[^\n]+") do
      want[path:gsub("^dist/", ""):gsub("%.lua$", ""):gsub("/", ".")] = path
    end
    assert.is_not_nil(want["resty.dlock.version"])
    local spec = rockspec()
    assert.equal("builtin", spec.build.type)
    local missing = {}
    for name, path in pairs(want) do
      if spec.build.modules[name] ~= path then missing[#missing + 1] = ('["%s"] = "%s",'):format(name, path) end
    end
    table.sort(missing)
    assert.same({}, missing, "add to build.modules of the rockspec:\n" .. table.concat(missing, "\n"))
    for name, path in pairs(spec.build.modules) do
      assert.equal(want[name], path, "the rockspec lists " .. name .. ", which dist/ does not have")
    end
  end)

  it("installs with luarocks make into a tree that nginx loads resty.dlock from, without dist/, " ..
     "and that takes and releases a lock in Redis", function()
    local tree = h.prefix .. "/rocks"
    must("cd " .. root .. " && luarocks make --lua-version=5.1 --tree " .. tree .. " lua-resty-dlock-" .. VERSION .. "-1.rockspec")
    local lib = tree .. "/share/lua/5.1"
    local n = h.start_nginx("spec-installed.conf", { LUA_PATH = lib .. "/?.lua" })
    finally(n.stop)
    local key = h.unique("rock")
    local res = assert(h.http(n.port, "/lock?key=" .. key))
    assert.equal(200, res.status, res.body .. n.error_log())
    local source, path, outcome = res.body:match("^([^\n]*)\n([^\n]*)\n([^\n]*)\n$")
    assert.equal(lib .. "/resty/dlock.lua", source)
    assert.is_nil(path:find(root, 1, true), "the checkout is on the path: " .. path)
    assert.equal(VERSION .. " busy true", outcome)
    assert.equal(0, h.cmd(nil, "exists", "installed:" .. key))
  end)
end)

describe("the npm package", function()
  local dir = h.prefix .. "/npm"
  local project = dir .. "/consumer"
  local tarball = dir .. "/lua-resty-dlock-" .. VERSION .. ".tgz"

  --- npm pack, and a TypeScriptToLua project (spec/consumer) that installs the tarball.
  setup(function()
    must("mkdir -p " .. project .. " && cd " .. root .. " && npm pack --silent --pack-destination " .. dir)
    must("cp " .. root .. "/spec/consumer/* " .. project .. " && cd " .. project ..
      " && echo '{ \"name\": \"consumer\", \"private\": true }' > package.json" ..
      " && npm install --offline --no-audit --no-fund --cache " .. dir .. "/cache " .. tarball)
    -- The compiler and the Lua declarations the project would have as devDependencies.
    must("mkdir -p " .. project .. "/node_modules/@typescript-to-lua")
    for _, p in ipairs({ "typescript", "typescript-to-lua", "lua-types", "@typescript-to-lua/language-extensions" }) do
      must("ln -sfn $(readlink -f " .. root .. "/node_modules/" .. p .. ") " .. project .. "/node_modules/" .. p)
    end
  end)

  it("holds dist/ and the declarations, and no sources, specs or build files", function()
    local files = must("tar -tzf " .. tarball .. " | sort")
    for _, f in ipairs({ "package/dist/resty/dlock.lua", "package/dist/resty/dlock/version.lua",
                         "package/api/index.d.ts", "package/api/ngx.d.ts", "package/types/ngx.d.ts",
                         "package/package.json", "package/README.md", "package/CHANGELOG.md", "package/LICENSE" }) do
      assert.truthy(("\n" .. files):find("\n" .. f .. "\n", 1, true), f .. " is not in the tarball")
    end
    for f in files:gmatch("[^\n]+") do
      assert.is_nil(f:match("^package/src/") or f:match("^package/spec/") or f:match("^package/bench/") or
        f:match("^package/nginx/") or f:match("tsconfig"), f)
    end
    local lua = must("tar -tzf " .. tarball .. " | grep '^package/dist/.*\\.lua$' | wc -l"):match("%d+")
    assert.equal(must("cd " .. root .. " && find dist -name '*.lua' | wc -l"):match("%d+"), lua)
  end)

  it("compiles `import * as dlock from \"resty.dlock\"` and its calls to Lua that requires resty.dlock " ..
     "and calls methods with ':'", function()
    must("cd " .. project .. " && node node_modules/typescript-to-lua/dist/tstl.js -p tsconfig.json")
    local lua = assert(h.read_file(project .. "/example.lua"))
    assert.matches('local dlock = require("resty.dlock")', lua, 1, true)
    assert.matches('dlock.new({dict = "dlock", redis = {host = "127.0.0.1", port = port}})', lua, 1, true)
    assert.matches("locks:acquire(key, {ttl = 5000, wait = 0})", lua, 1, true)
    assert.matches("lease:release()", lua, 1, true)
    assert.matches('local rate = require("resty.dlock.rate")', lua, 1, true)
    assert.matches("lim:incoming(key, true)", lua, 1, true)
    assert.is_nil(lua:find("__TS__", 1, true))
  end)

  it("declares every option of the redis table the Lua side takes, and no other", function()
    local dts = read("api/index.d.ts")
    local declared = {}
    for _, name in ipairs({ "RedisCommon", "Replicated", "NoTopology", "StandaloneRedis" }) do
      local body = assert(dts:match("interface " .. name .. "[^{]*(%b{})"), name)
      for option in body:gmatch("\n%s*([%w_]+)%??:") do declared[option] = true end
    end
    local schema = {}
    for _, spec in ipairs(require("resty.dlock.redis.client").REDIS) do schema[spec.name] = true end
    for option in pairs(schema) do assert.is_true(declared[option], option .. " is not declared in api/index.d.ts") end
    for option in pairs(declared) do assert.is_true(schema[option], option .. " is declared but not an option of redis") end
  end)

  it("refuses to type-check an option of the wrong type (ttl = \"5\")", function()
    local ok, out = shell("cd " .. project .. " && node node_modules/typescript/bin/tsc -p tsconfig.wrong.json --noEmit")
    assert.is_false(ok)
    assert.matches("wrong-option.ts(4,51): error TS2322: Type 'string' is not assignable to type 'number'.", out, 1, true)
    assert.equal(1, select(2, out:gsub("error TS", "")), out)
  end)

  it("refuses to type-check a guard's fleet without on_error = \"local\"", function()
    local ok, out = shell("cd " .. project .. " && node node_modules/typescript/bin/tsc -p tsconfig.wrong-fleet.json --noEmit")
    assert.is_false(ok)
    assert.matches("wrong-fleet.ts(4,14): error TS2322: ", out, 1, true)
    assert.matches("Types of property 'fleet' are incompatible.", out, 1, true)
    assert.equal(1, select(2, out:gsub("error TS", "")), out)
  end)

  it("runs in nginx from the project's node_modules: the compiled example takes and releases a lock", function()
    must("cd " .. project .. " && test -f example.lua || node node_modules/typescript-to-lua/dist/tstl.js -p tsconfig.json")
    -- start_nginx hands values to bash unquoted: the ';' between path entries is escaped.
    local n = h.start_nginx("spec-installed.conf",
      { LUA_PATH = project .. "/?.lua\\;" .. project .. "/node_modules/lua-resty-dlock/dist/?.lua" })
    finally(n.stop)
    local key = h.unique("npm")
    local res = assert(h.http(n.port, "/example?key=" .. key))
    assert.equal(200, res.status, res.body .. n.error_log())
    assert.equal(VERSION .. " busy true true 2 0 9\n", res.body)
    res = assert(h.http(n.port, "/lock?key=" .. key))
    assert.equal(project .. "/node_modules/lua-resty-dlock/dist/resty/dlock.lua", res.body:match("^([^\n]*)"))
  end)
end)

h.check_error_logs()
