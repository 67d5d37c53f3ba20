#!/usr/bin/env bash
cd "$(dirname "$0")/../.."
C=/tmp/vhead; rm -rf $C; mkdir -p $C
python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" .smrun/bin.tar.xz $C
export VYRE_CUDA_REQUIRE_GPU=1
mkdir -p $OUT/shrunk
hung=""
for d in a b; do
  s=$SECONDS
  VYRE_CUDA_FUZZ_REGRESSION_DIR=$PWD/.smrun/hang/$d timeout 25 $C/bin/fuzz_regressions --exact saved_cases_match_the_reference_on_the_gpu --nocapture --test-threads=1 > $OUT/replay_$d.log 2>&1
  rc=$?; echo "replay $d rc=$rc $((SECONDS-s)) s"; tail -3 $OUT/replay_$d.log
  [ $rc = 124 ] && hung="$hung $d"
done
for d in $hung; do
  f=$(ls $PWD/.smrun/hang/$d/*.case)
  VYRE_CUDA_FUZZ_SAVE_DIR=$OUT/shrunk VYRE_CUDA_FUZZ_SHRINK_HANG=$f VYRE_CUDA_FUZZ_HANG_SECONDS=${HS:-5} VYRE_CUDA_FUZZ_SHRINK_SECONDS=${SS:-380} \
    timeout $((${SS:-380}+60)) $C/bin/fuzz_regressions --exact shrink_a_hang_out_of_process --nocapture --test-threads=1 > $OUT/shrink_$d.log 2>&1
  echo "shrink $d rc=$?"; tail -3 $OUT/shrink_$d.log
  break
done
ls -la $OUT/shrunk
