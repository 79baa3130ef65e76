#!/usr/bin/env bash
# ansible-test sanity on the collection as a user gets it: built (ansible-galaxy collection build), installed into
# a fresh path, and tested there (ansible-test needs the collection under ansible_collections/<ns>/<name>).
#   scripts/ansible-test-sanity.sh [ansible-test sanity options, e.g. --test validate-modules]
# The install goes to a temporary directory outside any git checkout (inside one, ansible-test lists only the files
# git tracks there); ansible-test's per-test venvs live under .cache/ansible-test/home (kept between runs). Its pip bootstrap is
# scripts/ansible-test-get-pip.py (the script it downloads is out of reach here); ansible-test passes no pip
# environment variable to those venvs, so the machine's pip CA file ($PIP_CERT), if it has one, goes into that
# home's pip.conf.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/.venv/bin
home=$root/.cache/ansible-test/home
work=$(mktemp -d /tmp/ansible-test-sanity.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/build" "$home/.config/pip"
"$bin/ansible-galaxy" collection build --output-path "$work/build" "$root" >/dev/null
# install from outside the checkout, seeing no other copy: the checkout's ansible.cfg and the venv's path (make
# venv) both name the checkout itself as the collection, and galaxy would find it "already installed"
(cd "$work" && env -u ANSIBLE_CONFIG ANSIBLE_COLLECTIONS_PATH="$work/collections" ANSIBLE_COLLECTIONS_SCAN_SYS_PATH=false \
    "$bin/ansible-galaxy" collection install -p "$work/collections" "$work/build"/ddtree-sglang-*.tar.gz >/dev/null)
[ -d "$work/collections/ansible_collections/ddtree/sglang" ] || { echo "sanity: the collection was not installed" >&2; exit 1; }
pip_version=$("$bin/python" - <<'PY'
import re, pathlib, ansible_test
text = (pathlib.Path(ansible_test.__file__).parent / "_internal" / "python_requirements.py").read_text()
print(re.search(r"pip='([0-9.]+)'", text).group(1))
PY
)
mkdir -p "$home/.ansible/test/cache"
cp "$root/scripts/ansible-test-get-pip.py" "$home/.ansible/test/cache/get_pip_${pip_version//./_}.py"
if [ -n "${PIP_CERT:-}" ]; then
    printf '[global]\ncert = %s\n' "$PIP_CERT" > "$home/.config/pip/pip.conf"
else
    rm -f "$home/.config/pip/pip.conf"
fi
python=$("$bin/python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
cd "$work/collections/ansible_collections/ddtree/sglang"
echo "sanity: ddtree.sglang built, installed in $PWD, ansible-test sanity on Python $python"
PATH="$bin:$PATH" HOME="$home" "$bin/ansible-test" sanity --python "$python" --local --color no "$@"
