# `moe bench SUITE`: suites under bench/ register themselves and add their library to the
# moe_bench_suites interface target (whole-archive, so their registrations survive linking).
add_library(moe_bench_suites INTERFACE)
list(APPEND MOE_CLI_DEPS moe_bench_common moe_bench_suites)
