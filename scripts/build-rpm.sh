#!/usr/bin/env bash
# build-rpm.sh: builds the zkdeployment RPM from a release build.
#
#   scripts/build-rpm.sh [--sandbox]
#
# Builds target/release/zkdeployment (cargo build --release --locked), generates the man pages
# and shell completions from the clap definitions (examples/docs.rs: cargo run --example docs
# target/docs), then runs
# rpmbuild on packaging/zkdeployment.spec. Prints the path of the RPM on stdout (the
# zkdeployment-syncer RPM, the cron line, is built beside it).
# --sandbox builds a package without dependencies or scriptlets (for an empty dnf installroot).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
sandbox=0
[[ ${1:-} == --sandbox ]] && sandbox=1
command -v rpmbuild >/dev/null || { echo "build-rpm.sh: rpmbuild not found (apt-get install rpm)" >&2; exit 1; }
cargo build --release --locked >&2
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
rm -rf target/docs
cargo run --release --locked --example docs -- target/docs >&2
top=$PWD/target/rpm
rm -rf "$top"
mkdir -p "$top"
HOME="$top/home" rpmbuild -bb --quiet \
  --define "_topdir $top" --define "srcdir $PWD" --define "version_ $version" \
  --define "sandbox $sandbox" packaging/zkdeployment.spec >&2
find "$top/RPMS" -name "zkdeployment-$version-*.rpm" | head -1
