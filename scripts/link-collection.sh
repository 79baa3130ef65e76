#!/usr/bin/env bash
# The checkout as the installed collection ddtree.sglang, for runs from the checkout:
#   .collections/ansible_collections/ddtree/sglang -> the repository root
# ansible.cfg's collections_path names .collections, so `ansible-playbook site.yml` (and every play the tools run)
# finds the roles, modules and plugins by their FQCN (ddtree.sglang.*) in the checkout itself, edits included.
# Idempotent: an existing correct link is left alone; anything else in its place is an error.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$root/.collections/ansible_collections/ddtree
link=$dir/sglang
mkdir -p "$dir"
if [ -L "$link" ] && [ "$(readlink "$link")" = "../../.." ]; then
    exit 0
fi
if [ -e "$link" ] || [ -L "$link" ]; then
    echo "link-collection: $link exists and is not the link ../../.. (remove it)" >&2
    exit 1
fi
ln -s ../../.. "$link"
echo "link-collection: $link -> $root"
