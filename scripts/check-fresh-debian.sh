#!/usr/bin/env bash
# Check the README's two commands on a truly fresh Debian 12 (run as root, on a Debian/Ubuntu machine):
#   1. debootstrap a Debian 12 (bookworm) root file system once, keep it as a tarball, unpack a new copy per run;
#   2. give it this machine's apt sources, pip configuration, local CA certificates, resolv.conf and hosts
#      (nothing else);
#   3. copy a clean export of this checkout (git HEAD, or CHECK_REF: commit first) to /root/deploy inside it;
#   4. enter it (own mount namespace + pivot_root) with /proc, /sys, /dev bound and a fresh /run, and run
#      `bash scripts/demo.sh`, then, with the demo's simulated host still running (the tests must not need it
#      gone), `bash scripts/test.sh ARGS` (ARGS: pytest arguments, e.g. `tests/unit tests/e2e/test_up.py`;
#      none = all);
#   5. stop the simulator and every process left inside, unmount, and say what passed and how long each phase
#      took (lines `== phase NAME: N s`).
# Environment: CHECK_DIR (default /var/tmp/deploy-fresh-debian12), CHECK_MIRROR (default: the first Debian
# bookworm URI in this machine's apt sources), CHECK_REF (default HEAD), CHECK_SKIP_DEMO=1, CHECK_SKIP_TESTS=1,
# CHECK_KEEP=1 (keep the unpacked root), DEPLOY_DEMO_FIRST (default 59): the chroot shares this machine's
# loopback, so the demo's host takes a number of its own; the tests find free numbers themselves
# (tests/sim_hosts.py), or take DEPLOY_SIM_FIRST when it is set.
set -euo pipefail
if [ "$(id -u)" != 0 ]; then
  echo "check-fresh-debian.sh: run as root (debootstrap, chroot, mounts)" >&2
  exit 2
fi
REPO=$(cd "$(dirname "$0")/.." && pwd)
DIR=${CHECK_DIR:-/var/tmp/deploy-fresh-debian12}
BASE_TAR=$DIR/bookworm-base.tar
ROOT=$DIR/root
LOGS=$DIR/logs
mkdir -p "$DIR" "$LOGS"
phase() { echo "== phase $1: $(($(date +%s) - $2)) s"; }
phase_start=$(date +%s)

mirror() {
  local uri
  uri=$(grep -hs -A3 '^URIs:' /etc/apt/sources.list.d/*.sources | grep -v security |
    sed -n 's/^URIs: *\([^ ]*\).*/\1/p' | head -1)
  [ -n "$uri" ] || uri=$(grep -hs '^deb .*bookworm ' /etc/apt/sources.list | grep -v security | awk '{print $2}' | head -1)
  echo "$uri"
}
MIRROR=${CHECK_MIRROR:-$(mirror)}
if [ -z "$MIRROR" ]; then
  echo "check-fresh-debian.sh: no Debian mirror in /etc/apt/sources.list*; set CHECK_MIRROR" >&2
  exit 2
fi

if [ ! -s "$BASE_TAR" ]; then
  command -v debootstrap >/dev/null || { apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null; }
  rm -rf "$DIR/base"
  echo "== debootstrap bookworm from $MIRROR (once; kept as $BASE_TAR)"
  debootstrap --arch=amd64 bookworm "$DIR/base" "$MIRROR" >"$LOGS/debootstrap.log"
  tar -C "$DIR/base" -cf "$BASE_TAR.part" . && mv "$BASE_TAR.part" "$BASE_TAR"
  rm -rf "$DIR/base"
fi
phase debootstrap "$phase_start"
phase_start=$(date +%s)

mounted=()
cleanup() {
  set +e
  if [ -x "$ROOT/root/deploy/.venv/bin/deploy" ] && [ -z "${CHECK_LEFT_RUNNING:-}" ]; then
    in_root bash -c 'cd /root/deploy && .venv/bin/deploy sim down' >/dev/null 2>&1
  fi
  # Processes still running inside the root (started by this check): each by its id.
  for proc in /proc/[0-9]*; do
    if [ "$(readlink "$proc/root" 2>/dev/null)" = "$ROOT" ] ||
      head -1 "$proc/mountinfo" 2>/dev/null | grep -q " $ROOT / "; then
      kill -9 "${proc#/proc/}" 2>/dev/null
    fi
  done
  sleep 1
  if [ ${#mounted[@]} -gt 0 ]; then umount -R "$ROOT" 2>/dev/null || umount -R -l "$ROOT"; fi
  if grep -q " $ROOT[ /]" /proc/mounts; then
    echo "check-fresh-debian.sh: still mounted under $ROOT:" >&2
    grep " $ROOT[ /]" /proc/mounts >&2
  elif [ -z "${CHECK_KEEP:-}" ]; then
    rm -rf "$ROOT"
  fi
}
trap cleanup EXIT

# A command inside the root, in a mount namespace of its own whose root *is* the new system (pivot_root, as in a
# container): a plain chroot is not enough, because `nsenter --mount` (the simulator's way into its daemons'
# namespace) resets a process's root to its namespace's root, which for a chroot is this machine's /.
in_root() {
  local pipvars=()
  while IFS= read -r line; do pipvars+=("$line"); done < <(env | grep '^PIP_' || true)
  unshare --mount --propagation private --fork -- /bin/sh -c \
    'cd "$1" && shift && pivot_root . .oldroot && umount -l /.oldroot && cd / && exec "$@"' \
    in_root "$ROOT" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb CI="${CI:-}" \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    ${DEPLOY_SIM_FIRST:+DEPLOY_SIM_FIRST="$DEPLOY_SIM_FIRST"} DEPLOY_DEMO_FIRST="${DEPLOY_DEMO_FIRST:-59}" \
    "${pipvars[@]}" "$@"
}

rm -rf "$ROOT" && mkdir -p "$ROOT"
tar -C "$ROOT" -xf "$BASE_TAR"
echo "== fresh root: $(cat "$ROOT/etc/debian_version"), python3 there: $(
  [ -e "$ROOT/usr/bin/python3" ] && echo yes || echo no), pip there: $(
  chroot "$ROOT" /usr/bin/python3 -m pip --version >/dev/null 2>&1 && echo yes || echo no)"

# This machine's package sources and pip configuration, and name resolution; nothing else of the host.
rm -f "$ROOT/etc/apt/sources.list"
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
  [ -f "$f" ] && cp "$f" "$ROOT$f"
done
[ -f /etc/pip.conf ] && cp /etc/pip.conf "$ROOT/etc/pip.conf"
if [ -f /root/.config/pip/pip.conf ]; then
  mkdir -p "$ROOT/root/.config/pip" && cp /root/.config/pip/pip.conf "$ROOT/root/.config/pip/"
fi
cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
# Certificate authorities this machine trusts locally (e.g. a TLS-inspecting egress proxy): the ca-certificates
# package that install.sh installs adds them to the bundle pip uses, as it does on this machine.
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
  mkdir -p "$ROOT/usr/local/share/ca-certificates"
  cp /usr/local/share/ca-certificates/*.crt "$ROOT/usr/local/share/ca-certificates/"
fi
cp /etc/hosts "$ROOT/etc/hosts"

# The root itself is bound onto itself first: on a real machine / is a mount point, and the simulator's
# mount namespaces (`mount --make-rprivate /`) need that.
mount --bind "$ROOT" "$ROOT" && mounted+=("$ROOT")
mount -t proc proc "$ROOT/proc"
mount --rbind /sys "$ROOT/sys" && mount --make-rslave "$ROOT/sys"
mount --rbind /dev "$ROOT/dev" && mount --make-rslave "$ROOT/dev"
mount -t tmpfs -o mode=755 tmpfs "$ROOT/run"

mkdir -p "$ROOT/root/deploy" "$ROOT/.oldroot"
REF=${CHECK_REF:-HEAD}
git -C "$REPO" archive "$REF" | tar -x -C "$ROOT/root/deploy"
echo "== checkout: $(git -C "$REPO" log -1 --format='%h %s' "$REF" | cut -c1-100)"
phase root "$phase_start"

# One of the README's commands inside the root: its output also in $LOGS/NAME.log, its exit code in $rc, its time
# as a phase line.
rc=0
readme_command() {
  local name=$1 start
  shift
  echo "== bash scripts/$name.sh${*:+ $*} (log: $LOGS/$name.log)"
  start=$(date +%s)
  set +e
  in_root bash -c "cd /root/deploy && bash scripts/$name.sh \"\$@\"" "$name.sh" "$@" 2>&1 | tee "$LOGS/$name.log"
  rc=${PIPESTATUS[0]}
  set -e
  echo "== $name.sh: exit $rc in $(($(date +%s) - start)) s"
  phase "$name" "$start"
}

demo_rc=skipped
if [ -z "${CHECK_SKIP_DEMO:-}" ]; then readme_command demo; demo_rc=$rc; fi
test_rc=skipped
if [ -z "${CHECK_SKIP_TESTS:-}" ]; then readme_command test "$@"; test_rc=$rc; fi
echo "== result: demo.sh $demo_rc, test.sh $test_rc (Debian $(cat "$ROOT/etc/debian_version"), python $(
  chroot "$ROOT" /usr/bin/python3 -c 'import platform; print(platform.python_version())' 2>/dev/null))"
[ "$demo_rc" = 0 ] || [ "$demo_rc" = skipped ] || exit 1
[ "$test_rc" = 0 ] || [ "$test_rc" = skipped ] || exit "$test_rc"
