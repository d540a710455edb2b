# Sourced by scripts/*: create or reuse .venv and install hami with its dev extras.
# Re-installs only when pyproject.toml changed since the last install.
set -eu
root=$(cd "$(dirname "$0")/.." 2>/dev/null && pwd)
# Sourced from an interactive shell, $0 is the shell itself: then the repository is the current directory.
[ -f "$root/pyproject.toml" ] || root=$(pwd)
if [ ! -f "$root/pyproject.toml" ]; then
  echo "scripts/_venv.sh: run it from the repository root (no pyproject.toml in $root)" >&2; return 1 2>/dev/null || exit 1
fi
venv="$root/.venv"
py=${PYTHON:-python3}
if [ ! -x "$venv/bin/python" ]; then
  "$py" -m venv "$venv"
fi
stamp="$venv/.hami-installed"
if [ ! -f "$stamp" ] || [ "$root/pyproject.toml" -nt "$stamp" ] || ! "$venv/bin/python" -c "import hami" 2>/dev/null; then
  "$venv/bin/python" -m pip install -q --upgrade pip >/dev/null 2>&1 || true
  log="$venv/.install.log"
  if ! "$venv/bin/python" -m pip install -q -e "$root[dev]" >"$log" 2>&1; then
    cat "$log" >&2; echo "scripts: installing hami and its dev extras failed (log above)" >&2; exit 1
  fi
  touch "$stamp"
fi
export PATH="$venv/bin:$root/.ci/tools/bin:$PATH"
