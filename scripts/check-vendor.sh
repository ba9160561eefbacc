#!/usr/bin/env bash
# check-vendor.sh: checks that vendor/zookeeper-client is the crates.io release plus the
# patches in vendor/patches, and nothing else.
#
#   scripts/check-vendor.sh [DIR]
#
# Copies DIR (default vendor/zookeeper-client), takes the patches back out of the copy in
# reverse order (`git apply -R`, no fuzz: a patch that no longer applies exactly fails), then
# compares the copy with vendor/zookeeper-client-0.11.2.sha256, the checksums of every file of
# the published crate that the copy keeps (vendor/README.md lists what it leaves out): the
# same files, the same content. When cargo's registry holds the published crate
# (~/.cargo/registry/src/*/zookeeper-client-0.11.2), the checksums are checked against it too.
# Exits 0 when everything matches, 1 naming the first difference otherwise.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir=${1:-$root/vendor/zookeeper-client}
sums=$root/vendor/zookeeper-client-0.11.2.sha256
patches=$root/vendor/patches
# Files of the published crate the vendored copy leaves out.
left_out='^\./(\.cargo-ok|\.gitignore|\.rustfmt\.toml|Cargo\.lock|Cargo\.toml\.orig|Makefile|\.github/.*|tests/.*)$'

fail() { echo "check-vendor.sh: $*" >&2; exit 1; }
[[ -d $dir ]] || fail "$dir: no such directory"
[[ -f $sums ]] || fail "$sums: missing"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The file list and checksums of a directory, in the form of the checksum list.
listing() {
  (cd "$1" && find . -type f | grep -Ev "$left_out" | sed 's|^\./||' | LC_ALL=C sort |
    while IFS= read -r f; do sha256sum -- "$f"; done)
}
# The checksum list sorted the same way (sha256sum's two spaces kept).
expected() { LC_ALL=C sort -k2 "$sums"; }

cp -a "$dir" "$work/copy"
mapfile -t list < <(find "$patches" -maxdepth 1 -name '*.patch' | LC_ALL=C sort -r)
[[ ${#list[@]} -gt 0 ]] || fail "no patch in $patches"
for p in "${list[@]}"; do
  (cd "$work/copy" && git apply -R --whitespace=nowarn "$p" 2>"$work/err") ||
    fail "$(basename "$p") does not come out of $dir cleanly: $(head -3 "$work/err")"
done
if ! diff <(expected) <(listing "$work/copy") >"$work/diff"; then
  fail "$dir without the patches differs from the published crate (< published, > vendored):
$(head -20 "$work/diff")"
fi
echo "check-vendor.sh: $dir is zookeeper-client 0.11.2 plus ${#list[@]} patches"

for registry in "$HOME"/.cargo/registry/src/*/zookeeper-client-0.11.2; do
  [[ -d $registry ]] || continue
  diff <(expected) <(listing "$registry") >"$work/diff" ||
    fail "the checksum list differs from $registry (< list, > registry):
$(head -20 "$work/diff")"
  echo "check-vendor.sh: the checksum list matches $registry"
done
