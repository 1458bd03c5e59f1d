#!/usr/bin/env bash
# The issue 9 campaign: every Byzantine kind under the four documented fault mixes (docs/simulator.md,
# "Issue 9 campaign"), seeds FROM..TO of each (kind, mix), release CLI.
#
#   sim-bft/scripts/campaign.sh BIN FROM TO DURATION OUTDIR [MIXES] [KINDS] [SIGNATURES]
#
# BIN is a release `sim-bft` binary (copy it first if you keep building), DURATION the fault phase
# and the liveness bound (e.g. 20s), OUTDIR receives summary.log (one line per kind, mix and
# signature scheme) and failures.log (each failing seed with its violations and its replay line).
# MIXES defaults to "A B C D", KINDS to every kind (21). SIGNATURES (issue 28): `mixed` (the
# default) runs every seed with the simulator-only `sim` signatures and a fixed share, the first
# quarter of the seeds (at least one), again with ed25519, which alone covers attacks on the
# signature scheme itself; `sim` or `ed25519` runs every seed with that scheme only. Exit status
# 0 when every run passed.
set -u
BIN=$1 FROM=$2 TO=$3 DUR=$4 OUT=$5
MIXES=${6:-"A B C D"}
KINDS=${7:-"silent replay corrupt equivocate bogus-view-change corrupt-state-transfer lying-time tick-flood bad-signatures bad-digests state-request-flood slow-state-source future-flood starve-client repropose time-omit time-replay time-own fat-view-change amplify withhold-commits"}
SIGS=${8:-mixed}
ED_TO=$(( FROM + (TO - FROM + 3) / 4 ))
case $SIGS in
  mixed) RUNS="sim:$FROM..$TO ed25519:$FROM..$ED_TO" ;;
  sim|ed25519) RUNS="$SIGS:$FROM..$TO" ;;
  *) echo "unknown SIGNATURES $SIGS (mixed, sim, ed25519)" >&2; exit 2 ;;
esac
mkdir -p "$OUT"
mix_knobs() {
  case $1 in
    A) echo "--replicas 4 --byzantine 1 --drop-rate 0.05 --reorder-rate 0.1 --crash 2 --clock-skew 200ms --partition one-way --ledger kv" ;;
    B) echo "--replicas 4 --byzantine 1 --drop-rate 0.03 --duplicate-rate 0.05 --drift-ppm 200 --crash 1 --crash-at-view-change 0.3 --partition symmetric --ledger orders" ;;
    C) echo "--replicas 7 --byzantine 2 --drop-rate 0.05 --reorder-rate 0.1 --crash 2 --clock-skew 200ms --partition isolate --ledger demo" ;;
    D) echo "--replicas 10 --byzantine 3 --drop-rate 0.02 --crash 1 --crash-at-view-change 0.2 --ledger kv" ;;
    *) echo "unknown mix $1" >&2; exit 2 ;;
  esac
}
status=0
for mix in $MIXES; do
  for kind in $KINDS; do
    for run in $RUNS; do
      sigs=${run%%:*} seeds=${run#*:}
      # shellcheck disable=SC2046
      out=$("$BIN" run --seeds "$seeds" $(mix_knobs "$mix") --byzantine-kind "$kind" \
        --signatures "$sigs" --duration "$DUR" --liveness "$DUR" -q 2>/dev/null)
      rc=$?
      last=$(printf '%s\n' "$out" | tail -1)
      echo "$(date -u +%H:%M:%S) mix=$mix kind=$kind signatures=$sigs seeds=$seeds rc=$rc :: $last" | tee -a "$OUT/summary.log"
      if [ $rc -ne 0 ]; then
        status=1
        printf 'mix=%s kind=%s signatures=%s\n%s\n' "$mix" "$kind" "$sigs" "$(printf '%s\n' "$out" | grep -v ': ok (trace')" >> "$OUT/failures.log"
      fi
    done
  done
done
exit $status
