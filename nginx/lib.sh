# Shell helpers shared by the spec runner, the demo, the benchmarks and the
# torture harness: free ports, a private redis-server, nginx configs from
# templates, and stopping by pid whatever was started.

# The nginx binary: DLOCK_NGINX names it (a command, a path, or an OpenResty
# install folder such as /usr/local/openresty); Debian's nginx by default.
# Resolved to an absolute path once here, so what this shell starts and what a
# spec starts from inside nginx (whose workers get no PATH) is the same binary.
nginx_bin() { # nginx_bin NAME|PATH|FOLDER: prints the binary's absolute path
  local want=$1 c
  # A bare name is a command even where a folder of that name exists (this repository's nginx/).
  if [[ $want == */* && -d $want ]]; then
    for c in "$want/nginx/sbin/nginx" "$want/sbin/nginx" "$want/bin/openresty"; do
      [ -x "$c" ] && { echo "$c"; return 0; }
    done
    echo "DLOCK_NGINX=$want is a folder without nginx/sbin/nginx, sbin/nginx or bin/openresty" >&2
    return 1
  fi
  # sbin is searched too: nginx lives there and not every PATH has it.
  c=$(PATH=${PATH:+$PATH:}/usr/local/sbin:/usr/sbin:/sbin command -v "$want") ||
    { echo "DLOCK_NGINX=$want: no such nginx binary" >&2; return 1; }
  [[ $c == /* ]] || c=$(cd "$(dirname "$c")" && pwd)/$(basename "$c")
  echo "$c"
}
NGINX_BIN=$(nginx_bin "${DLOCK_NGINX:-nginx}") || NGINX_BIN=${DLOCK_NGINX:-nginx}

# lua_modules BIN: the main-context lines BIN needs for the Lua module. None when
# lua-nginx-module is compiled in (OpenResty, whose configure names it ngx_lua-<version>);
# otherwise load_module lines for Debian's dynamic modules, from BIN's modules path.
lua_modules() {
  local v dir
  v=$("$1" -V 2>&1) || { echo "$1 -V failed: $v" >&2; return 1; }
  if grep -Eq -- '--add-module=[^ ]*(lua-nginx-module|ngx_lua)' <<<"$v"; then return 0; fi
  dir=$(sed -n 's/.*--modules-path=\([^ ]*\).*/\1/p' <<<"$v")
  dir=${dir:-/usr/lib/nginx/modules}
  echo "load_module $dir/ndk_http_module.so; load_module $dir/ngx_http_lua_module.so;"
}

# A free loopback TCP port (nothing answers on it now), below the kernel's
# ephemeral range (32768+ here), where outgoing sockets could already hold it.
free_port() {
  local p
  while :; do
    p=$((10000 + RANDOM % 22000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return; fi
  done
}

# wait_port PORT [SECONDS]: until something accepts on 127.0.0.1:PORT.
wait_port() {
  local i
  for ((i = 0; i < ${2:-10} * 20; i++)); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.05
  done
  echo "nothing listens on 127.0.0.1:$1" >&2
  return 1
}

# start_redis PORT DIR [extra redis-server args...]: a throwaway redis-server in
# the foreground of a background job, no persistence unless asked; its pid is
# appended to DIR/pids.
start_redis() {
  local port=$1 dir=$2; shift 2
  redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
    --dir "$dir" --logfile "$dir/logs/redis-$port.log" "$@" &
  echo $! >> "$dir/pids"
  wait_port "$port" 10
}

# render_conf TEMPLATE PREFIX OUT [NAME=VALUE...]: copy TEMPLATE to OUT with
# @ROOT@, @PREFIX@, @USER@, @LUA_MODULES@ (lua_modules of NGINX_BIN) and each
# @NAME@ replaced.
render_conf() {
  local tpl=$1 prefix=$2 out=$3; shift 3
  local root user="" args=() mods
  mods=$(lua_modules "$NGINX_BIN") || return 1
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  # Workers run as nobody by default and could not read a root-owned checkout.
  [ "$(id -u)" = 0 ] && user="user root;"
  args=(-e "s|@ROOT@|$root|g" -e "s|@PREFIX@|$prefix|g" -e "s|@USER@|$user|g" -e "s|@LUA_MODULES@|$mods|g")
  local kv
  for kv in "$@"; do args+=(-e "s|@${kv%%=*}@|${kv#*=}|g"); done
  mkdir -p "$prefix/logs"
  sed "${args[@]}" "$tpl" > "$out"
}

# stop_pids FILE: stop every pid listed in FILE (TERM, then KILL after 3 s).
stop_pids() {
  local f=$1 pid i
  [ -f "$f" ] || return 0
  for pid in $(tac "$f"); do kill -CONT "$pid" 2>/dev/null; kill -TERM "$pid" 2>/dev/null; done
  for ((i = 0; i < 30; i++)); do
    local alive=0
    for pid in $(cat "$f"); do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && return 0
    sleep 0.1
  done
  for pid in $(cat "$f"); do kill -KILL "$pid" 2>/dev/null; done
  return 0
}
