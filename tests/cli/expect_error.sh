# Sourced by the CLI tests that check refusals (needs $tmp, a scratch folder).
# expect_error <text> <command...>: exit 1 (not a signal), one line on stderr containing text.
fail() { echo "FAIL: $*"; exit 1; }
expect_error() {
  local want=$1; shift
  local rc=0
  "$@" 2>"$tmp/err" >/dev/null || rc=$?
  [[ $rc -eq 1 ]] || fail "exit $rc (expected 1) from: $*; stderr: $(cat "$tmp/err")"
  grep -qF -- "$want" "$tmp/err" || fail "expected '$want' from: $*; got: $(cat "$tmp/err")"
  [[ $(wc -l <"$tmp/err") -eq 1 ]] || fail "not one line: $(cat "$tmp/err")"
  echo "ok: $(cat "$tmp/err")"
}
