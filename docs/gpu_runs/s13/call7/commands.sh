FLASHMSA_LIBRARY=build-ab/touch.so OUT=$OUT/p1 scripts/profile.sh decode1 --source   # touch.so = b5bd463 (branch tried/param-touch)
