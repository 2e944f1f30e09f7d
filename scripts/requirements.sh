# Installs what building and testing bgtaskd need when it is missing. Sourced by scripts/test and scripts/demo.
# Needs root (or sudo) only when something must be installed.

say() { printf '%s\n' "$*" >&2; }

as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        say "bgtask: need root to run: $*"
        say "bgtask: run this script as root, or install the packages above yourself."
        exit 1
    fi
}

# Debian packages that building bgtaskd and running the demo need, printed as " name name": the libsystemd
# headers (CSystemd), pkg-config to find them, and timeout(1), which bounds the demo's private daemon.
missing_build_packages() {
    pkg-config --exists libsystemd 2>/dev/null || printf ' libsystemd-dev'
    command -v pkg-config >/dev/null 2>&1 || printf ' pkg-config'
    command -v timeout >/dev/null 2>&1 || printf ' coreutils'
}

# Installs the Debian packages named in $1 (a space-separated list); nothing, and no root, when it is empty.
install_packages() {
    [ -n "$1" ] || return 0
    say "bgtask: installing$1"
    as_root apt-get update -qq
    # shellcheck disable=SC2086 # the list is meant to split into words
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $1 >/dev/null
}

# What building and the demo need (scripts/demo).
ensure_build_packages() {
    install_packages "$(missing_build_packages)"
}

# What building and the whole test suite need (scripts/test): the build's packages and the tools the tests drive.
ensure_packages() {
    missing="$(missing_build_packages)"
    command -v setpriv >/dev/null 2>&1 || missing="$missing util-linux"
    command -v systemd-notify >/dev/null 2>&1 || missing="$missing systemd"
    # systemd-analyze verify looks the units' Documentation= man pages up with man(1).
    command -v man >/dev/null 2>&1 || missing="$missing man-db"
    command -v python3 >/dev/null 2>&1 || missing="$missing python3"
    # The condition tests: a private D-Bus bus with stand-ins for UPower, NetworkManager and logind written against
    # the distribution's Python D-Bus and GLib bindings, and network namespaces driven with ip (nsenter and unshare
    # come with util-linux, above).
    command -v dbus-daemon >/dev/null 2>&1 || missing="$missing dbus-daemon"
    /usr/bin/python3 -c 'import dbus, dbus.mainloop.glib, gi' 2>/dev/null || missing="$missing python3-dbus python3-gi"
    command -v ip >/dev/null 2>&1 || missing="$missing iproute2"
    install_packages "$missing"
}

# Python's varlink package: the independent Varlink client of the interoperability tests.
ensure_python_varlink() {
    python3 -c 'import varlink' 2>/dev/null && return 0
    say "bgtask: installing the Python varlink package (test-only)"
    python3 -m pip --version >/dev/null 2>&1 || as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-pip >/dev/null
    # A distribution's own python refuses plain pip installs (PEP 668); the package is test-only and pure Python.
    python3 -m pip install --quiet varlink 2>/dev/null \
        || python3 -m pip install --quiet --break-system-packages varlink \
        || { say "bgtask: could not install the Python varlink package"; exit 1; }
}

ensure_swift() {
    command -v swift >/dev/null 2>&1 && return 0
    for candidate in /opt/swift/usr/bin /usr/share/swift/usr/bin; do
        if [ -x "$candidate/swift" ]; then
            PATH="$candidate:$PATH"
            export PATH
            return 0
        fi
    done
    say "bgtask: no Swift toolchain found: install Swift 6 (https://www.swift.org/install/linux/) and put it on PATH"
    exit 1
}
