# moe_add_library, moe_add_executable, moe_add_test, moe_add_fuzzer: the build's warnings and
# sanitizer flags, applied alike to every target.
include_guard(GLOBAL)

set(MOE_WARNINGS -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers)
# GCC 12 at -O3 (Release) reports -Wrestrict inside libstdc++'s std::string (GCC bug 105329, a
# false positive): keep it a warning there so that the standard library does not break the build.
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_GREATER_EQUAL 12)
  list(APPEND MOE_WARNINGS $<$<CONFIG:Release>:-Wno-error=restrict>)
endif()
# In a unity build (CMAKE_UNITY_BUILD, scripts/setup) GCC takes each batched .cc for a header and
# warns of a class with a member whose type is in that file's anonymous namespace: not a header.
if(CMAKE_UNITY_BUILD AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  list(APPEND MOE_WARNINGS -Wno-subobject-linkage)
endif()
# clang checks the ABSL_GUARDED_BY / ABSL_EXCLUSIVE_LOCKS_REQUIRED annotations (GCC ignores them).
if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  list(APPEND MOE_WARNINGS -Wthread-safety)
endif()
if(MOE_WERROR)
  list(APPEND MOE_WARNINGS -Werror)
endif()
if(MOE_SANITIZE AND MOE_TSAN)
  message(FATAL_ERROR "MOE_SANITIZE (ASan) and MOE_TSAN cannot share a build: use two build dirs")
endif()
if(MOE_FUZZ AND NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "MOE_FUZZ needs clang (libFuzzer): CC=clang CXX=clang++ cmake ... -DMOE_FUZZ=ON")
endif()
set(MOE_SANITIZE_FLAGS)
if(MOE_SANITIZE OR MOE_FUZZ)
  set(MOE_SANITIZE_FLAGS -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  # GCC 12 under ASan reports -Wmaybe-uninitialized inside Boost.Beast's parser (third-party
  # headers, a false positive): a warning there, not an error. clang has no such report.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    list(APPEND MOE_WARNINGS -Wno-error=maybe-uninitialized)
  endif()
elseif(MOE_TSAN)
  set(MOE_SANITIZE_FLAGS -fsanitize=thread -fno-omit-frame-pointer)
endif()
if(MOE_FUZZ)
  # Linked everywhere; compiled into the libraries only (moe_add_library).
  add_link_options(-fsanitize=fuzzer-no-link)
endif()
if(MOE_SANITIZE_FLAGS)
  add_compile_options(${MOE_SANITIZE_FLAGS})
  add_link_options(${MOE_SANITIZE_FLAGS})
  # Sanitizer builds exist to run the tests once, on 2 cores in CI: most code compiles at -O0 with
  # line tables only (stack traces keep file:line; the ASan build's CPU time fell from 34.2 to 26.6
  # minutes against -O1), and the libraries the tests spend their CPU in (moe_add_library HOT: a
  # model forward's kernels, model, engine, sampler and tokenizer; the constrained-decoding
  # grammar; the gateway's JSON and HTTP parsing; chat templates) at MOE_SANITIZE_HOT_OPT: at -O0
  # the structured-outputs e2e test took 639 s and the gateway_http fuzzer's smoke pass 185 s.
  # Both come after the build type's flags, so they win.
  set(MOE_SANITIZE_OPT "-O0" CACHE STRING "Optimisation of a sanitizer build's code")
  set(MOE_SANITIZE_HOT_OPT "-O1" CACHE STRING "Optimisation of a sanitizer build's HOT libraries")
  add_compile_options(${MOE_SANITIZE_OPT} $<$<CXX_COMPILER_ID:Clang>:-gline-tables-only>
                      $<$<CXX_COMPILER_ID:GNU>:-g1>)
endif()

# RelWithDebInfo keeps line tables only by default (-g1: file:line in backtraces, perf and gdb's
# `bt`; no variable locations): with full -g a heavy TU (gateway_test.cc) compiled in 19.3 CPU-s
# against 13.2 at -O2 -g1, and the CI build's minutes are a budget. -DMOE_DEBUG_INFO=full for a
# gdb session that prints variables.
set(MOE_DEBUG_INFO "lines" CACHE STRING "RelWithDebInfo's debug info: lines (-g1) or full (-g)")
set_property(CACHE MOE_DEBUG_INFO PROPERTY STRINGS lines full)
if(MOE_DEBUG_INFO STREQUAL "lines" AND NOT MOE_SANITIZE_FLAGS)
  add_compile_options($<$<AND:$<CONFIG:RelWithDebInfo>,$<COMPILE_LANGUAGE:C,CXX>>:-g1>)
endif()

# The linker: lld where it is installed (scripts/setup installs it). The ASan build links ~110
# test executables; one (moe_gateway_test) linked in 0.77 s with lld against 2.62 s with GNU ld.
# -DMOE_LINKER=default keeps the compiler's own.
set(MOE_LINKER "lld" CACHE STRING "The linker: lld, or default (the compiler's)")
set_property(CACHE MOE_LINKER PROPERTY STRINGS lld default)
if(MOE_LINKER STREQUAL "lld")
  find_program(MOE_LD_LLD ld.lld)
  if(MOE_LD_LLD)
    add_link_options($<$<LINK_LANGUAGE:C,CXX>:-fuse-ld=lld>)
  else()
    message(STATUS "MOE_LINKER=lld but no ld.lld: the compiler's default linker")
  endif()
endif()

function(moe_target_defaults target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${MOE_WARNINGS}>)
  target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${CMAKE_SOURCE_DIR}>
                                              $<BUILD_INTERFACE:${CMAKE_BINARY_DIR}>)
endfunction()

# moe_add_library(NAME [HOT] SRCS ... DEPS ... PRIVATE_DEPS ...): HOT marks a library the tests
# spend their CPU in, optimised (MOE_SANITIZE_HOT_OPT) even in a sanitizer build.
function(moe_add_library name)
  cmake_parse_arguments(ARG "HOT" "" "SRCS;DEPS;PRIVATE_DEPS" ${ARGN})
  if(ARG_SRCS)
    add_library(${name} STATIC ${ARG_SRCS})
    moe_target_defaults(${name})
    if(ARG_HOT AND MOE_SANITIZE_FLAGS)
      target_compile_options(${name} PRIVATE ${MOE_SANITIZE_HOT_OPT})
    endif()
    # Coverage feedback for the fuzzers from every library they link (the libFuzzer main only
    # on fuzzers). Tests and service mains, which no fuzzer links, compile without it: a test
    # TU took 11.5 s with it against 9.7 s without (clang 14, ASan, -O0).
    if(MOE_FUZZ)
      target_compile_options(${name} PRIVATE -fsanitize=fuzzer-no-link)
    endif()
    target_link_libraries(${name} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  else()
    add_library(${name} INTERFACE)
    target_include_directories(${name} INTERFACE $<BUILD_INTERFACE:${CMAKE_SOURCE_DIR}>
                                                 $<BUILD_INTERFACE:${CMAKE_BINARY_DIR}>)
    target_link_libraries(${name} INTERFACE ${ARG_DEPS})
  endif()
endfunction()

function(moe_add_executable name)
  cmake_parse_arguments(ARG "" "SMOKE_RUNS" "SRCS;DEPS" ${ARGN})
  if(NOT ARG_SMOKE_RUNS)
    set(ARG_SMOKE_RUNS ${MOE_FUZZ_SMOKE_RUNS})
  endif()
  add_executable(${name} ${ARG_SRCS})
  moe_target_defaults(${name})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS})
endfunction()

# LABELS: unit (default), integration, gpu, chaos, deploy, image, llamacpp; tsan as well for the
# tests of code that synchronises through std::atomic / std::mutex, which TSan can see (Debian's
# abseil and gRPC are not instrumented). gpu tests must GTEST_SKIP() without a device.
function(moe_add_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "SRCS;DEPS;LABELS;ARGS" ${ARGN})
  if(NOT ARG_LABELS)
    set(ARG_LABELS unit)
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 120)
  endif()
  if(MOE_SANITIZE_FLAGS)
    # Sanitized code runs 2-10x slower (and CI runs these tests two at a time on 2 cores).
    math(EXPR ARG_TIMEOUT "${ARG_TIMEOUT} * 3")
  endif()
  add_executable(${name} ${ARG_SRCS})
  moe_target_defaults(${name})
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  # The test's own code at -O1 (the libraries it tests keep the build's level): gateway_test.cc
  # compiled in 10.3 CPU-s at -O1 -g1 against 13.2 at -O2 -g1, and test TUs are about half of
  # the build's compile time.
  if(NOT MOE_SANITIZE_FLAGS)
    target_compile_options(${name} PRIVATE $<$<CONFIG:Release,RelWithDebInfo>:-O1>)
  endif()
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gmock moe_test_main)
  add_test(NAME ${name} COMMAND ${name} ${ARG_ARGS})
  set(env MOE_BUILD_DIR=${CMAKE_BINARY_DIR} MOE_SOURCE_DIR=${CMAKE_SOURCE_DIR} ${MOE_SANITIZER_TEST_ENV})
  set_tests_properties(${name} PROPERTIES LABELS "${ARG_LABELS}" TIMEOUT ${ARG_TIMEOUT}
    ENVIRONMENT "${env}")
  if("tsan" IN_LIST ARG_LABELS)
    set_property(GLOBAL APPEND PROPERTY MOE_TSAN_TESTS ${name})
  endif()
endfunction()

# The target `moe_tests_tsan` builds only the tests labelled tsan (the TSan stage of scripts/test
# runs nothing else): call once, after every add_subdirectory.
function(moe_add_tsan_target)
  get_property(tests GLOBAL PROPERTY MOE_TSAN_TESTS)
  add_custom_target(moe_tests_tsan DEPENDS ${tests})
endfunction()

# Sanitizer runtime options for every test (and the processes it starts, which inherit them);
# MOE_SANITIZED=1 tells a test it runs sanitized (tests/e2e/services.mjs waits longer).
set(MOE_SANITIZER_TEST_ENV)
if(MOE_SANITIZE OR MOE_FUZZ)
  set(MOE_SANITIZER_TEST_ENV MOE_SANITIZED=1 ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
      LSAN_OPTIONS=print_suppressions=0:suppressions=${CMAKE_SOURCE_DIR}/tools/sanitizers/lsan.supp
      UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1)
elseif(MOE_TSAN)
  set(MOE_SANITIZER_TEST_ENV MOE_SANITIZED=1
      TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=${CMAKE_SOURCE_DIR}/tools/sanitizers/tsan.supp)
endif()

# moe_add_fuzzer(NAME SRCS ... DEPS ... [SMOKE_RUNS n]): a libFuzzer binary in <build>/fuzz and a
# ctest smoke pass (label fuzz): the committed seed corpus plus MOE_FUZZ_SMOKE_RUNS mutations (or
# SMOKE_RUNS, for a fuzzer whose engine is slow: asr, tts).
# scripts/fuzz runs the long pass. Only with -DMOE_FUZZ=ON.
set(MOE_FUZZ_SMOKE_RUNS 20000 CACHE STRING "libFuzzer -runs for each fuzzer's ctest smoke pass")
function(moe_add_fuzzer name)
  cmake_parse_arguments(ARG "" "SMOKE_RUNS" "SRCS;DEPS" ${ARGN})
  if(NOT ARG_SMOKE_RUNS)
    set(ARG_SMOKE_RUNS ${MOE_FUZZ_SMOKE_RUNS})
  endif()
  add_executable(${name} ${ARG_SRCS})
  moe_target_defaults(${name})
  target_compile_options(${name} PRIVATE -fsanitize=fuzzer)
  target_link_options(${name} PRIVATE -fsanitize=fuzzer)
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/fuzz)
  target_link_libraries(${name} PRIVATE ${ARG_DEPS})
  set(corpus ${CMAKE_CURRENT_SOURCE_DIR}/corpus/${name})
  # A scratch copy of the seeds: libFuzzer writes what it finds into the first corpus dir.
  add_test(NAME ${name}_smoke COMMAND ${CMAKE_COMMAND}
    -DFUZZER=$<TARGET_FILE:${name}> -DSEEDS=${corpus} -DWORK=${CMAKE_BINARY_DIR}/fuzz/work/${name}
    -DRUNS=${ARG_SMOKE_RUNS} -P ${CMAKE_SOURCE_DIR}/fuzz/smoke.cmake)
  set_tests_properties(${name}_smoke PROPERTIES LABELS fuzz TIMEOUT 300
    ENVIRONMENT "MOE_SOURCE_DIR=${CMAKE_SOURCE_DIR};${MOE_SANITIZER_TEST_ENV}")
endfunction()
