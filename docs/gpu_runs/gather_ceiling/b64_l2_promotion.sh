timeout 250 build-probe/gather_ceiling 3 2>&1 | tee $OUT/gather_ceiling.log   # build-probe/gather_ceiling from scripts/gather_ceiling.cu at ca69aeb (TMA load rows)
