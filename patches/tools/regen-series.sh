#!/usr/bin/env bash
# Regenerate patches/sglang/0.5.23/{series,*.patch} from a workspace made by
#   patches/tools/series.py workspace DIR
# (pristine commit tagged `pristine`, then one commit per patch; each commit
# message is that patch's header). Usage: patches/tools/regen-series.sh DIR
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ "$#" -ne 1 ]; then
  echo "usage: $0 WORKSPACE_DIR" >&2
  exit 2
fi
python3 "$here/series.py" regen "$1"
python3 "$here/series.py" check
