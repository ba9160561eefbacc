#!/usr/bin/env bash
# rpm-sandbox.sh: a real dnf (the yum of RHEL 8/9) working in an isolated installroot, with a
# local repository of small demo RPMs, without touching the host's packages.
#
#   scripts/rpm-sandbox.sh DIR NAME:VERSION[:INSTDIR] ...
#   scripts/rpm-sandbox.sh --over REPO DIR
#
# Builds each package (noarch, no dependencies, no scriptlets) with rpmbuild into DIR/repo,
# runs createrepo_c, and writes DIR/bin/yum: a wrapper running
#   dnf --installroot=DIR/root --config=DIR/dnf.conf --releasever=8 --noplugins --refresh ...
# that also appends its arguments to DIR/calls.log, and DIR/bin/rpm (rpm on the sandbox's
# database). `--over REPO DIR` makes only the sandbox, over an existing repository directory
# REPO (the tests build their own packages once and give every test a fresh sandbox over them:
# tests/support/rpm.rs).
# Each package installs INSTDIR/bin/zookeeper-deploy (INSTDIR defaults to /opt/NAME), a deploy
# script that behaves like a real one: `zookeeper-deploy [-r SUBTYPE] PATH N` writes the marker
# $ZKDEPLOYMENT_ROOT/etc/<app>/<marker>.N.deployed (and logs to INSTDIR/deploy.log);
# `-u PATH N` removes it. Prints the path of the yum wrapper.
# Needs rpm (rpmbuild), dnf and createrepo-c; root, or `unshare -r`.
set -euo pipefail

# sandbox DIR REPO: dnf.conf, the yum and rpm wrappers, and an empty installroot in DIR, over
# the repository directory REPO.
sandbox() {
  local dir=$1 repo=$2 dnf
  dnf=$(command -v dnf) || { echo "rpm-sandbox.sh: dnf is not on PATH" >&2; exit 1; }
  mkdir -p "$dir"/{bin,home,reposdir,root}
  # Debian's rpm sets %_dbpath to ~/.rpmdb; pin the RHEL location through a fixed HOME.
  printf '%%_dbpath /var/lib/rpm\n' > "$dir/home/.rpmmacros"
  cat > "$dir/dnf.conf" <<CONF
[main]
gpgcheck=0
repo_gpgcheck=0
localpkg_gpgcheck=0
installonly_limit=3
clean_requirements_on_remove=True
best=False
skip_if_unavailable=False
install_weak_deps=False
keepcache=False
plugins=0
# inside the installroot
cachedir=/var/cache/dnf
logdir=/var/log
reposdir=$dir/reposdir

[local]
name=zkdeployment packages
baseurl=file://$repo
enabled=1
gpgcheck=0
metadata_expire=0
CONF
  cat > "$dir/bin/yum" <<WRAPPER
#!/bin/sh
# yum -> the real dnf on the installroot $dir/root (scripts/rpm-sandbox.sh)
printf '%s\n' "\$*" >> '$dir/calls.log'
HOME='$dir/home'; export HOME
if [ "\$(id -u)" -eq 0 ]; then pre=; else pre="unshare -r"; fi
exec \$pre '$dnf' --installroot='$dir/root' --config='$dir/dnf.conf' --releasever=8 \\
  --noplugins --refresh --setopt=reposdir='$dir/reposdir' "\$@"
WRAPPER
  cat > "$dir/bin/rpm" <<WRAPPER
#!/bin/sh
# rpm on the sandbox's database (scripts/rpm-sandbox.sh)
HOME='$dir/home'; export HOME
exec rpm --root '$dir/root' --dbpath /var/lib/rpm "\$@"
WRAPPER
  chmod 0755 "$dir/bin/yum" "$dir/bin/rpm"
}

absolute() {
  case $1 in /?*) ;; *) echo "rpm-sandbox.sh: $2 must be an absolute path" >&2; exit 1 ;; esac
}

if [[ ${1:-} == --over ]]; then
  repo=${2:?usage: rpm-sandbox.sh --over REPO DIR}
  dir=${3:?usage: rpm-sandbox.sh --over REPO DIR}
  absolute "$repo" REPO
  absolute "$dir" DIR
  sandbox "$dir" "$repo"
  exit 0
fi

dir=${1:?usage: rpm-sandbox.sh DIR NAME:VERSION[:INSTDIR] ...}
shift
absolute "$dir" DIR
rm -rf "$dir"
mkdir -p "$dir"/{buildhome,repo,build}

cat > "$dir/pkg.spec" <<'SPEC'
Name:           %{pkgname}
Version:        %{pkgver}
Release:        1
Summary:        zkdeployment demo package %{pkgname}
License:        MIT
BuildArch:      noarch
AutoReqProv:    no

%description
Demo application for zkdeployment: installs %{instdir}/bin/zookeeper-deploy.

%prep
%build

%install
mkdir -p %{buildroot}%{instdir}/bin
cat > %{buildroot}%{instdir}/bin/zookeeper-deploy <<'SCRIPT'
#!/bin/sh
# Demo deploy script: "starts" instance N of the application node PATH by writing the marker
# the agent looks for, and logs what it did.
here=$(cd "$(dirname "$0")/.." && pwd)
rpm=$(basename "$here")
app=$(printf %%s "$rpm" | sed -E 's/-[0-9]+(\.[0-9]+)*$//')
undeploy=no
[ "$1" = -u ] && { undeploy=yes; shift; }
[ "$1" = -r ] && shift 2
path=$1 n=$2
marker=$(printf %%s "$path" | sed -e 's,^/,,' -e 's/%%/%%25/g' -e 's/,/%%2C/g' -e 's,/,\,,g')
etc="${ZKDEPLOYMENT_ROOT%%/}/etc/$app"
if [ "$undeploy" = yes ]; then
  rm -f "$etc/$marker.$n.deployed"
  echo "$(date '+%%F %%T') stopped $path instance $n" >> "$here/deploy.log"
  echo "%{name}-%{version}: stopped $path instance $n"
else
  mkdir -p "$etc" && : > "$etc/$marker.$n.deployed"
  echo "$(date '+%%F %%T') started $path instance $n (version $ZKDEPLOYMENT_VERSION)" >> "$here/deploy.log"
  echo "%{name}-%{version}: started $path instance $n"
fi
SCRIPT
chmod 0755 %{buildroot}%{instdir}/bin/zookeeper-deploy

%files
%dir %{instdir}
%dir %{instdir}/bin
%{instdir}/bin/zookeeper-deploy
SPEC

for spec in "$@"; do
  IFS=: read -r name version instdir <<<"$spec"
  instdir=${instdir:-/opt/$name}
  HOME="$dir/buildhome" rpmbuild -bb --quiet --define "_topdir $dir/build" \
    --define "pkgname $name" --define "pkgver $version" --define "instdir $instdir" \
    "$dir/pkg.spec" >"$dir/build.log" 2>&1 || { cat "$dir/build.log" >&2; exit 1; }
done
cp "$dir"/build/RPMS/noarch/*.rpm "$dir/repo/"
createrepo_c -q "$dir/repo" >/dev/null

sandbox "$dir" "$dir/repo"
echo "$dir/bin/yum"
