#!/usr/bin/env bash
# build-rpm.sh: builds the zkdeployment RPM from a release build.
#
#   scripts/build-rpm.sh [--sandbox] [--dev]
#
# Builds target/release/zkdeployment (cargo build --release --locked), generates the man pages
# and shell completions from the clap definitions (examples/docs.rs: cargo run --example docs
# target/docs), then runs
# rpmbuild on packaging/zkdeployment.spec. Prints the path of the RPM on stdout (the
# zkdeployment-syncer RPM, the cron line, is built beside it).
# --sandbox builds a package without dependencies or scriptlets (for an empty dnf installroot).
# --dev packs a stripped copy of the debug build (cargo build --locked) instead of the release
# build: the same files, built in seconds once the tests are built. scripts/test.sh uses it, so
# that the tests check the package without a second, optimized build of every crate.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
sandbox=0
profile=release
for arg in "$@"; do
  case $arg in
    --sandbox) sandbox=1 ;;
    --dev) profile=debug ;;
    *) echo "build-rpm.sh: unknown argument: $arg (usage: build-rpm.sh [--sandbox] [--dev])" >&2; exit 2 ;;
  esac
done
command -v rpmbuild >/dev/null || { echo "build-rpm.sh: rpmbuild not found (apt-get install rpm)" >&2; exit 1; }
cargo_profile=()
[[ $profile == release ]] && cargo_profile=(--release)
cargo build "${cargo_profile[@]}" --locked >&2
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
rm -rf target/docs
cargo run "${cargo_profile[@]}" --locked --example docs -- target/docs >&2
binary=$PWD/target/release/zkdeployment
if [[ $profile == debug ]]; then
  mkdir -p target/rpm-dev
  strip -o target/rpm-dev/zkdeployment target/debug/zkdeployment
  binary=$PWD/target/rpm-dev/zkdeployment
fi
top=$PWD/target/rpm
rm -rf "$top"
mkdir -p "$top"
HOME="$top/home" rpmbuild -bb --quiet \
  --define "_topdir $top" --define "srcdir $PWD" --define "version_ $version" \
  --define "sandbox $sandbox" --define "binary_ $binary" packaging/zkdeployment.spec >&2
find "$top/RPMS" -name "zkdeployment-$version-*.rpm" | head -1
