timeout 60 build-probe/icache_probe 2>&1 | tee $OUT/icache_probe.log   # scripts/icache_probe.cu
