# moe_add_library(NAME SRCS ... DEPS ... [PUBLIC_DEPS ...]) and moe_add_test(NAME SRCS ... DEPS ... LABELS ...).
include_guard(GLOBAL)

set(MOE_WARNINGS -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers)
# GCC 12 at -O3 (Release) reports -Wrestrict inside libstdc++'s std::string (GCC bug 105329, a
# false positive): keep it a warning there so that the standard library does not break the build.
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_GREATER_EQUAL 12)
  list(APPEND MOE_WARNINGS $<$<CONFIG:Release>:-Wno-error=restrict>)
endif()
if(MOE_WERROR)
  list(APPEND MOE_WARNINGS -Werror)
endif()
set(MOE_SANITIZE_FLAGS)
if(MOE_SANITIZE)
  set(MOE_SANITIZE_FLAGS -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_compile_options(${MOE_SANITIZE_FLAGS})
  add_link_options(${MOE_SANITIZE_FLAGS})
endif()

function(moe_target_defaults target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${MOE_WARNINGS}>)
  target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${CMAKE_SOURCE_DIR}>
                                              $<BUILD_INTERFACE:${CMAKE_BINARY_DIR}>)
endfunction()

function(moe_add_library name)
  cmake_parse_arguments(ARG "" "" "SRCS;DEPS;PRIVATE_DEPS" ${ARGN})
  if(ARG_SRCS)
    add_library(${name} STATIC ${ARG_SRCS})
    moe_target_defaults(${name})
    target_link_libraries(${name} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  else()
    add_library(${name} INTERFACE)
    target_include_directories(${name} INTERFACE $<BUILD_INTERFACE:${CMAKE_SOURCE_DIR}>
                                                 $<BUILD_INTERFACE:${CMAKE_BINARY_DIR}>)
    target_link_libraries(${name} INTERFACE ${ARG_DEPS})
  endif()
endfunction()

function(moe_add_executable name)
  cmake_parse_arguments(ARG "" "" "SRCS;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SRCS})
  moe_target_defaults(${name})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS})
endfunction()

# LABELS: unit (default), integration, gpu. gpu tests must GTEST_SKIP() without a device.
function(moe_add_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "SRCS;DEPS;LABELS;ARGS" ${ARGN})
  if(NOT ARG_LABELS)
    set(ARG_LABELS unit)
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 120)
  endif()
  add_executable(${name} ${ARG_SRCS})
  moe_target_defaults(${name})
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gmock moe_test_main)
  add_test(NAME ${name} COMMAND ${name} ${ARG_ARGS})
  set_tests_properties(${name} PROPERTIES LABELS "${ARG_LABELS}" TIMEOUT ${ARG_TIMEOUT}
    ENVIRONMENT "MOE_BUILD_DIR=${CMAKE_BINARY_DIR};MOE_SOURCE_DIR=${CMAKE_SOURCE_DIR}")
endfunction()
