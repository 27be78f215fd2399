# shellcheck shell=bash
# Shared helpers for scripts/test.sh and scripts/demo.sh; source it, do not run it.
#
# ensure_packages installs the tools the scripts need on Debian/Ubuntu with
# apt-get when they are missing. It never starts or stops a system service:
# tests and the demo run their own private redis-server processes.

# apt_install PACKAGE... installs packages with apt-get, through sudo when not root.
apt_install() {
	local sudo=""
	if ! command -v apt-get >/dev/null 2>&1; then
		echo "error: need to install $*, but apt-get is not available; install it by hand" >&2
		return 1
	fi
	if [ "$(id -u)" -ne 0 ]; then
		if ! command -v sudo >/dev/null 2>&1; then
			echo "error: need to install $*, but not root and sudo is not available" >&2
			return 1
		fi
		sudo="sudo"
	fi
	echo "installing $* with apt-get" >&2
	$sudo apt-get update || return 1
	$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y "$@" || return 1
}

# ensure_redis makes sure redis-server and redis-cli are in PATH.
ensure_redis() {
	if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
		apt_install redis-server || return 1
	fi
	if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
		echo "error: redis-server and redis-cli are still not in PATH" >&2
		return 1
	fi
	echo "using $(command -v redis-server): $(redis-server --version)"
}

# ensure_cc makes sure a C compiler exists, which `go test -race` needs (cgo).
ensure_cc() {
	if ! command -v "$(go env CC)" >/dev/null 2>&1 && ! command -v gcc >/dev/null 2>&1; then
		apt_install gcc libc6-dev || return 1
	fi
}

# ensure_nats_server makes sure the distribution's nats-server program is in
# PATH. The tests run JetStream in-process (nats-server/v2 2.15); this older
# program (2.9.10 on Debian) serves only the test of the fallback for servers
# without message schedules. The tests start it themselves on a free port.
ensure_nats_server() {
	if ! command -v nats-server >/dev/null 2>&1; then
		apt_install nats-server || return 1
	fi
	if ! command -v nats-server >/dev/null 2>&1; then
		echo "error: nats-server is still not in PATH" >&2
		return 1
	fi
	echo "using $(command -v nats-server): $(nats-server --version)"
}

# ensure_prometheus makes sure Debian's prometheus and promtool programs are
# in PATH: deploy/'s tests run a real Prometheus against in-process workers
# (on free ports, in a temporary directory) and promtool's rule unit tests.
# Installing the package may register a system service; nothing here
# starts one, and the tests never talk to one.
ensure_prometheus() {
	if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
		apt_install --no-install-recommends prometheus || return 1
	fi
	if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
		echo "error: prometheus and promtool are still not in PATH" >&2
		return 1
	fi
	echo "using $(command -v prometheus): $(prometheus --version 2>&1 | head -n 1)"
}

# free_port prints a TCP port on 127.0.0.1 that nothing listens on, below
# Linux's ephemeral range (32768 and up), where outgoing connections take
# their local ports.
free_port() {
	local port
	for _ in $(seq 1 100); do
		port=$((20000 + RANDOM % 12000))
		# A connection that fails means nothing listens there.
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			echo "$port"
			return 0
		fi
	done
	echo "error: no free port found" >&2
	return 1
}

# ensure_chromium makes sure Debian's chromium is in PATH: the console's
# tests (integration/console) drive it headless from Go.
ensure_chromium() {
	if ! command -v chromium >/dev/null 2>&1; then
		apt_install chromium || return 1
	fi
	if ! command -v chromium >/dev/null 2>&1; then
		echo "error: chromium is still not in PATH" >&2
		return 1
	fi
	echo "using $(command -v chromium): $(chromium --version 2>/dev/null)"
}
