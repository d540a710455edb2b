# Sourced by scripts/*: create or reuse .venv and install hami into it.
# HAMI_EXTRAS picks the extras (default "dev": tests and tools; scripts/demo sets "" for the runtime only).
# Re-installs when pyproject.toml changed since the last install, or when the extras asked for are missing.
set -eu
root=$(cd "$(dirname "$0")/.." 2>/dev/null && pwd)
# Sourced from an interactive shell, $0 is the shell itself: then the repository is the current directory.
[ -f "$root/pyproject.toml" ] || root=$(pwd)
if [ ! -f "$root/pyproject.toml" ]; then
  echo "scripts/_venv.sh: run it from the repository root (no pyproject.toml in $root)" >&2; return 1 2>/dev/null || exit 1
fi
venv="$root/.venv"
py=${PYTHON:-python3}
extras=${HAMI_EXTRAS-dev}
stamp="$venv/.hami-installed"
if [ ! -x "$venv/bin/python" ]; then
  echo "$(basename "$0"): first run: creating $venv ..." >&2
  "$py" -m venv "$venv"
fi
have=$(cat "$stamp" 2>/dev/null || echo "none")
# The stamp holds the extras installed ("dev", or "-" for the runtime only); dev covers the runtime.
need_install=0
if [ "$have" = "none" ] || [ "$root/pyproject.toml" -nt "$stamp" ] || ! "$venv/bin/python" -c "import hami" 2>/dev/null; then
  need_install=1
elif [ -n "$extras" ] && [ "$have" != "$extras" ]; then
  need_install=1
fi
if [ "$need_install" = 1 ]; then
  [ "$have" = "dev" ] && [ -z "$extras" ] && extras=dev  # keep what is there: scripts/test needs it later
  what="hami's runtime dependencies"; target="$root"
  if [ -n "$extras" ]; then what="hami with its $extras extras (tests and tools)"; target="$root[$extras]"; fi
  echo "$(basename "$0"): installing $what into .venv (a minute or so; log: .venv/.install.log) ..." >&2
  "$venv/bin/python" -m pip install -q --upgrade pip >/dev/null 2>&1 || true
  log="$venv/.install.log"
  if ! "$venv/bin/python" -m pip install -q -e "$target" >"$log" 2>&1; then
    cat "$log" >&2; echo "scripts: installing hami failed (log above)" >&2; exit 1
  fi
  echo "${extras:--}" > "$stamp"
  echo "$(basename "$0"): .venv ready ($(du -sh "$venv" 2>/dev/null | cut -f1))" >&2
fi
export PATH="$venv/bin:$root/.ci/tools/bin:$PATH"
