#!/usr/bin/env bash
# Re-run shard 8 of seed 0x17c0de2080 (first 3000 programs) as 12 explicit-seed slices.
cd "$(dirname "$0")/../.."
C=/tmp/vhead; rm -rf $C; mkdir -p $C
python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" .smrun/bin.tar.xz $C
L=$OUT/s8; mkdir -p $L/saved
export VYRE_CUDA_REQUIRE_GPU=1
for k in $(seq 0 11); do
  VYRE_CUDA_FUZZ_SEEDS=$(cat .smrun/shard8/seeds_$k.txt) VYRE_CUDA_FUZZ_THREADS=2 VYRE_CUDA_FUZZ_SHAPE=complete \
  VYRE_CUDA_FUZZ_SAVE_DIR=$L/saved VYRE_CUDA_FUZZ_SHRINK_TOTAL_SECONDS=20 \
    timeout ${T:-300} $C/bin/gpu_fuzz --nocapture --test-threads=1 > $L/slice_$k.log 2>&1 &
done
wait
for k in $(seq 0 11); do echo "slice $k: $(grep -h '^fuzz: ' $L/slice_$k.log | grep -v 'last backend\|worker time\|device\|generator' | tr '\n' ' ')"; done
ls $L/saved
