# `moe bench SUITE`: suites under bench/ register themselves and add their library to the
# moe_bench_suites interface target (whole-archive, so their registrations survive linking).
add_library(moe_bench_suites INTERFACE)
list(APPEND MOE_CLI_DEPS moe_bench_common moe_bench_suites)
# `moe bench gateway` starts the benchmark's fake-backend gateway beside `moe` (and the router
# and gateway, which `moe up` depends on already). The moe target is defined after this file is
# included: defer.
cmake_language(DEFER CALL add_dependencies moe moe_bench_fake_gateway)
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/cmd_bench.cc PROPERTIES
  COMPILE_DEFINITIONS "MOE_SOURCE_DIR=\"${CMAKE_SOURCE_DIR}\"")
