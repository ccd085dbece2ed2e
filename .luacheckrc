-- luacheck for every Lua file of the repository (make test runs it; spec/all):
-- dist/, the emitted Lua, is checked as a hand-written lua-resty module would
-- be; spec/ and bench/ as the Lua of the harness that runs inside nginx.
std = "ngx_lua"
max_line_length = false
-- nginx hands a timer `premature`, and a method gets `self`, used or not.
unused_args = false
-- A leading underscore marks a value left unused on purpose (a slot of a reply).
ignore = { "21[123]/_.*" }
exclude_files = { "node_modules/**", "bench/peer/**" }
files["spec/**/*_spec.lua"] = { std = "+busted" }
