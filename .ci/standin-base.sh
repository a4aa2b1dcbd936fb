#!/usr/bin/env bash
# Makes the Dockerfile's base image, node:20-bookworm-slim, available to the local Docker engine.
# When it is neither there nor pullable (a CI machine without registry access), builds a stand-in
# with the same name: Debian bookworm (debootstrap --variant=minbase, from the machine's apt
# mirror), this machine's Node.js 20 and npm in the official image's layout (/usr/local/bin,
# /usr/local/lib/node_modules/npm), and the "node" user and group (uid/gid 1000). npm inside a
# build trusts the CAs this machine trusts: the file $NODE_EXTRA_CA_CERTS names is copied into the
# stand-in and named by its NODE_EXTRA_CA_CERTS (the stand-in's only difference that matters).
# Debian packages downloaded once are kept in ${MRTR_STANDIN_CACHE:-~/.cache/mrtr-standin}.
# Needs root, docker, debootstrap. Prints what it did; exits non-zero when it cannot make the base.
set -euo pipefail

IMAGE=node:20-bookworm-slim

if docker image inspect "$IMAGE" >/dev/null 2>&1; then
  echo "$IMAGE: present"
  exit 0
fi
if timeout 120 docker pull -q "$IMAGE" >/dev/null 2>&1; then
  echo "$IMAGE: pulled"
  exit 0
fi
echo "$IMAGE: cannot be pulled; building a stand-in"

node_bin=$(readlink -f "$(command -v node)")
major=$("$node_bin" -p 'process.versions.node.split(".")[0]')
[ "$major" = 20 ] || { echo "the stand-in needs this machine's node to be 20.x, not $("$node_bin" --version)" >&2; exit 1; }
npm_dir=""
for d in "$(dirname "$node_bin")/../lib/node_modules/npm" /usr/local/lib/node_modules/npm /usr/lib/node_modules/npm; do
  [ -f "$d/bin/npm-cli.js" ] && { npm_dir=$(readlink -f "$d"); break; }
done
[ -n "$npm_dir" ] || { echo "npm not found next to $node_bin" >&2; exit 1; }

# The Debian mirror apt uses here (deb822 "URIs:" or one-line "deb" entries), else deb.debian.org.
mirror=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null |
  grep -oE '(https?://[^ ]*/debian)/?( |$)' | grep -v security | head -n1 | tr -d ' ' || true)
mirror=${mirror:-http://deb.debian.org/debian}

cache=${MRTR_STANDIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mrtr-standin}
mkdir -p "$cache/debs"
root=$(mktemp -d /tmp/mrtr-standin.XXXXXX)
trap 'rm -rf "$root"' EXIT

echo "debootstrap bookworm from $mirror"
debootstrap --variant=minbase --cache-dir="$(readlink -f "$cache/debs")" bookworm "$root" "$mirror" >"$root.log" 2>&1 ||
  { tail -n 30 "$root.log" >&2; rm -f "$root.log"; exit 1; }
rm -f "$root.log"

# Node.js and npm where the official image has them.
install -m 0755 "$node_bin" "$root/usr/local/bin/node"
mkdir -p "$root/usr/local/lib/node_modules"
cp -a "$npm_dir" "$root/usr/local/lib/node_modules/npm"
ln -s ../lib/node_modules/npm/bin/npm-cli.js "$root/usr/local/bin/npm"
ln -s ../lib/node_modules/npm/bin/npx-cli.js "$root/usr/local/bin/npx"

# The official image's user: node, uid and gid 1000, home /home/node.
chroot "$root" groupadd --gid 1000 node
chroot "$root" useradd --uid 1000 --gid node --shell /bin/bash --create-home node

changes=(--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
  --change "ENV NODE_VERSION=$("$node_bin" -p process.versions.node)"
  --change 'CMD ["node"]')
if [ -n "${NODE_EXTRA_CA_CERTS:-}" ] && [ -f "$NODE_EXTRA_CA_CERTS" ]; then
  install -D -m 0644 "$NODE_EXTRA_CA_CERTS" "$root/etc/ssl/certs/standin-extra-ca.pem"
  changes+=(--change 'ENV NODE_EXTRA_CA_CERTS=/etc/ssl/certs/standin-extra-ca.pem')
fi

# What a slim image leaves out.
rm -rf "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* \
  "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/usr/share/locale/*

tar -C "$root" --numeric-owner -c . | docker import "${changes[@]}" \
  --message "stand-in for $IMAGE: debootstrap bookworm + node $("$node_bin" --version)" - "$IMAGE" >/dev/null
echo "$IMAGE: stand-in built ($(docker image inspect -f '{{.Size}}' "$IMAGE" | awk '{printf "%d MB", $1/1e6}'))"
