# scripts/probes/mma_sync_rate.cu on the H200 (built here with -Xptxas -v, carried).
nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -Xptxas -v -Isrc -o build-gpu/mma_sync_rate scripts/probes/mma_sync_rate.cu
build-gpu/mma_sync_rate | tee $OUT/mma_sync_rate.log
