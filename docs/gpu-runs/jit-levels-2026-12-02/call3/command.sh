set -uo pipefail
mkdir -p $OUT/c; T=/tmp/vc; rm -rf $T; mkdir -p $T
for f in vc-main vc-nostamp; do python3 -c "import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], 'wb'))" .smrunC/$f.xz $T/$f; chmod +x $T/$f; done
cd $T
for run in main nostamp main2 nostamp2; do
  bin=vc-${run%2}; mkdir -p $T/h-$run
  VYRE_AUTOTUNER=off HOME=$T/h-$run timeout 140 ./$bin --only artifact --deadline-s 130 --json $OUT/c/$run.json --markdown $OUT/c/$run.md > $OUT/c/$run.txt 2>&1; echo "$run rc=$? at $SECONDS s"
  grep -E "^\| artifact_(submit_1024|cold_materialize|corpus_first|chain16)" $OUT/c/$run.md | grep "vyre-cuda\|floor" | awk -F'|' '{print $2, $4, $5}'
done
cd $OUT && tar czf c.tgz c && rm -rf c
