#!/usr/bin/env bash
# Upstream check: the project's tests and strict nbval against the NEWEST releases of jax, jaxlib,
# flax, optax, numpy, matplotlib and the book toolchain (jupyter-book 1.x, nbval, nbclient), instead
# of the pins in requirements.txt. Readers on Colab get new releases before our pins move; this
# finds the breakage first.
#
#   bash .github/upstream.sh               # uses python3; PYTHON=python3.12 bash ... to choose
#
# It builds .venv-upstream from scratch, then writes _build/upstream-report/ (git ignores _build/):
#   versions.txt         pip freeze of what was tested
#   unit-tests.log       pytest tests (every test, with the newest releases)
#   notebooks/NAME.log   strict nbval output for each FAILING notebook: the cell diffs
#   book.log             jupyter-book build -W -n --keep-going
#   summary.md           one line per check
# The exit status is 1 if anything failed. The workflow .github/workflows/upstream.yml runs this
# weekly and uploads that folder as an artifact.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

PYTHON="${PYTHON:-python3}"
VENV=.venv-upstream
REPORT=_build/upstream-report
PY="$VENV/bin/python"
NBVAL=(--nbval --nbval-sanitize-with tests/nbval_sanitize.cfg --nbval-cell-timeout=120)

rm -rf "$VENV" "$REPORT"
mkdir -p "$REPORT/notebooks"
"$PYTHON" -m venv "$VENV"
"$PY" -m pip install --quiet --upgrade pip
# No version pins: whatever PyPI serves today. Only the book toolchain's major version is held
# (Jupyter Book 2 is a different program), and the lint tools and jupytext stay at the project's
# pins, because a new lint rule or a new header in the chapters' Markdown pairs is not upstream
# breakage.
mapfile -t LINT_PINS < <(grep -E '^(ruff|actionlint[a-z-]*|jupytext)==' requirements.txt)
"$PY" -m pip install --quiet --upgrade \
  jax jaxlib flax optax numpy matplotlib \
  "jupyter-book<2" sphinx-mathjax-offline nbval nbclient nbformat ipykernel \
  pytest hypothesis libcst pyyaml "${LINT_PINS[@]}" || exit 1
"$PY" -m pip install --quiet -e . || exit 1
"$PY" -m pip freeze --exclude-editable > "$REPORT/versions.txt"

status=0
summary=("# Upstream check, $(date -u +%Y-%m-%d)" "" \
  "$(grep -iE '^(jax|jaxlib|flax|optax|numpy|matplotlib|jupyter-book|sphinx|nbval|myst-nb)==' \
    "$REPORT/versions.txt" | tr '\n' ' ')" "")

record() { # record NAME EXIT_STATUS
  if [ "$2" -eq 0 ]; then summary+=("- pass: $1"); else summary+=("- FAIL: $1"); status=1; fi
  echo "${summary[-1]}"
}

# The oracle tests compare rnnlib.legacy with the real Flax 0.6.11, which lives in its own pinned
# environment (old releases, so not part of the upstream question); build it as `make test` does.
make .venv-flax06/.stamp > "$REPORT/flax06-env.log" 2>&1 || record "build .venv-flax06" 1
"$PY" -m pytest tests -p no:cacheprovider > "$REPORT/unit-tests.log" 2>&1
result=$?
record "pytest tests ($(tail -n 1 "$REPORT/unit-tests.log"))" "$result"

while IFS= read -r notebook; do
  log="$REPORT/notebooks/$(basename "$notebook" .ipynb).log"
  "$PY" -m pytest "$notebook" "${NBVAL[@]}" -p no:cacheprovider > "$log" 2>&1
  result=$?
  [ "$result" -eq 0 ] && rm "$log"
  record "strict nbval $notebook" "$result"
done < <(find book -name '*.ipynb' -not -path '*/_build/*' -not -path '*/.ipynb_checkpoints/*' | sort)

build_dir="$(mktemp -d)"
"$VENV/bin/jupyter-book" build . -W -n --keep-going --path-output "$build_dir" > "$REPORT/book.log" 2>&1
record "jupyter-book build -W -n --keep-going" $?
rm -rf "$build_dir"

printf '%s\n' "${summary[@]}" > "$REPORT/summary.md"
echo "report: $REPORT/summary.md"
exit "$status"
