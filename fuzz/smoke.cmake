# ctest smoke pass of one fuzzer: copy the committed seeds to a scratch corpus, run RUNS mutations.
# -D FUZZER=<binary> SEEDS=<dir> WORK=<dir> RUNS=<n>
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
if(EXISTS ${SEEDS})
  file(GLOB seeds ${SEEDS}/*)
  if(seeds)
    file(COPY ${seeds} DESTINATION ${WORK})
  endif()
endif()
execute_process(COMMAND ${FUZZER} -runs=${RUNS} -max_len=4096 -timeout=10 -rss_limit_mb=2048
                        -print_final_stats=1 ${WORK}
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${FUZZER} failed (exit ${rc}); the crashing input is in the build dir (crash-*)")
endif()
