#!/usr/bin/env bash
# Vendor Mermaid into the docs site (docs/assets/js/), so the diagrams draw with no CDN.
# Usage: scripts/vendor-mermaid.sh [VERSION]   (npm must be on PATH)
# The file is the npm package's dist/mermaid.min.js, unchanged, with its licence beside it.
# Mermaid 11 is the major version Material for MkDocs drives; after a change of version,
# update the version in mkdocs.yml's comment (tests/test_docs_site.py checks the two agree)
# and look at the diagrams of docs/concepts/slots.md and docs/architecture.md.
set -euo pipefail
version="${1:-11.17.2}"
cd "$(dirname "$0")/.."
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "mermaid@$version" >/dev/null && tar xzf mermaid-*.tgz)
cp "$tmp/package/dist/mermaid.min.js" docs/assets/js/mermaid.min.js
cp "$tmp/package/LICENSE" docs/assets/js/mermaid.LICENSE
echo "docs/assets/js/mermaid.min.js: mermaid@$version ($(wc -c <docs/assets/js/mermaid.min.js) bytes)"
