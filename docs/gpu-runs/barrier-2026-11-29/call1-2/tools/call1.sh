#!/usr/bin/env bash
# call 1: attribute the hang (CSE on/off), then shrink it
set -uo pipefail
B=$PWD/.expbin/fuzz_regressions; chmod +x $B
H=docs/gpu-runs/views-2026-11-29/hang
export VYRE_CUDA_REQUIRE_GPU=1
nvidia-smi -L > $OUT/smi.txt 2>&1
for mode in on off; do
  for c in 4f2d46484763c667 62d2925671e25f53; do
    d=$(mktemp -d); cp $H/gpu-hang-$c.case $d/
    s=$SECONDS
    if [ $mode = on ]; then export CSE_EXPERIMENT_ON=1; else unset CSE_EXPERIMENT_ON; fi
    VYRE_CUDA_FUZZ_REGRESSION_DIR=$d timeout ${T:-40} $B saved_cases_match_the_reference_on_the_gpu --nocapture --test-threads=1 > $OUT/replay-$mode-$c.log 2>&1
    echo "$mode $c rc=$? $((SECONDS-s))s" | tee -a $OUT/replay.txt
  done
done
# shrink whichever hangs first
for line in $(grep -n 'rc=124' $OUT/replay.txt | head -1 | tr ' ' ':'); do :; done
first=$(grep 'rc=124' $OUT/replay.txt | head -1)
if [ -n "$first" ]; then
  mode=$(echo $first | cut -d' ' -f1); c=$(echo $first | cut -d' ' -f2)
  if [ $mode = on ]; then export CSE_EXPERIMENT_ON=1; else unset CSE_EXPERIMENT_ON; fi
  mkdir -p $OUT/shrunk
  VYRE_CUDA_FUZZ_SAVE_DIR=$OUT/shrunk VYRE_CUDA_FUZZ_SHRINK_HANG=$H/gpu-hang-$c.case VYRE_CUDA_FUZZ_SHRINK_SECONDS=${SS:-330} VYRE_CUDA_FUZZ_HANG_SECONDS=6 \
    timeout 400 $B shrink_a_hang_out_of_process --nocapture --test-threads=1 > $OUT/shrink.log 2>&1
  echo "shrink rc=$?" >> $OUT/replay.txt
fi
