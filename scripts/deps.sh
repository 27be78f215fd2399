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
