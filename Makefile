# lua-resty-dlock. `make test` and `make run` install what they need on Debian 12.
SHELL := /bin/bash
DEBS := nginx libnginx-mod-http-lua lua-resty-core lua-nginx-redis lua-cjson lua-busted lua-check luajit2 redis-server openssl luarocks curl python3

.PHONY: all deps build test spec run bench bench-smoke torture clean test-docker

all: build

# Debian packages when absent (one apt-get update), then the pinned npm packages.
deps:
	@missing=""; for p in $(DEBS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null || exit 1; \
	fi
	@[ -d node_modules/typescript-to-lua ] || npm ci --no-audit --no-fund --loglevel=error

build: deps
	npx --no-install tstl -p tsconfig.json

# Type-check, dist freshness, no Lua globals, every spec; ends with "N passed, N failed".
test: deps
	@bash spec/all

# Only the busted specs (pass busted args with ARGS="--filter=...").
spec: deps
	@bash spec/runner/run $(ARGS)

run: deps
	@bash nginx/demo

bench: deps
	@bash bench/run

bench-smoke: deps
	@bash bench/run --smoke

torture: deps
	@bash bench/torture

clean:
	rm -rf /tmp/dlock-spec.* /tmp/dlock-demo.* /tmp/dlock-bench.*

# The busted specs (make spec) in the official openresty image (needs a Docker engine; CI here has none).
test-docker:
	docker build -f spec/docker/Dockerfile -t lua-resty-dlock-test .
	docker run --rm lua-resty-dlock-test
