# scripts/probes/l2_bandwidth.cu on the H200 (built here, carried): random 32 KiB bulk copies into shared memory from spans that fit L2 and from 4 GiB, with fewer SMs, and in multicast clusters.
nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -Isrc -o build-gpu/l2_bandwidth scripts/probes/l2_bandwidth.cu
build-gpu/l2_bandwidth | tee $OUT/l2_bandwidth.log
