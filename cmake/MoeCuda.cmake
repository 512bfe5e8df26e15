# MOE_ENABLE_CUDA: AUTO builds CUDA parts when nvcc is found; the CPU build is complete without it.
set(MOE_HAVE_CUDA OFF)
set(MOE_HAVE_NCCL OFF)
if(NOT MOE_ENABLE_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    # Hopper SASS (H100/H200) plus compute_80 PTX, which the driver JIT-compiles on any sm_80+
    # device (the portable target; nvcc 13 rejects sm_70 and older).
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90-real 80-virtual)
    endif()
    enable_language(CUDA)
    set(CMAKE_CUDA_STANDARD 17)
    find_package(CUDAToolkit REQUIRED)
    set(MOE_HAVE_CUDA ON)
    # NCCL: CMake 3.25 has no CUDA::nccl; this machine kind has it under /usr/local/cuda.
    find_path(MOE_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
    find_library(MOE_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64)
    if(MOE_NCCL_INCLUDE_DIR AND MOE_NCCL_LIBRARY AND NOT TARGET moe_nccl_external)
      add_library(moe_nccl_external INTERFACE)
      target_include_directories(moe_nccl_external SYSTEM INTERFACE ${MOE_NCCL_INCLUDE_DIR})
      target_link_libraries(moe_nccl_external INTERFACE ${MOE_NCCL_LIBRARY})
      set(MOE_HAVE_NCCL ON)
    endif()
  elseif(MOE_ENABLE_CUDA STREQUAL "ON")
    message(FATAL_ERROR "MOE_ENABLE_CUDA=ON but no CUDA compiler was found")
  endif()
endif()
message(STATUS "moe: CUDA parts ${MOE_HAVE_CUDA}, NCCL ${MOE_HAVE_NCCL}")

# A gpu-labelled test binary that tests/gpu/pack.sh copies to a device machine with the shared
# libraries it needs beside it: it finds them through RPATH $ORIGIN. An old-style DT_RPATH
# (--disable-new-dtags), because DT_RUNPATH would serve only the binary's direct dependencies,
# not the libraries those load in turn (libabsl_synchronization -> libabsl_spinlock_wait).
function(moe_gpu_test_rpath target)
  set_property(TARGET ${target} APPEND PROPERTY BUILD_RPATH "\$ORIGIN")
  target_link_options(${target} PRIVATE -Wl,--disable-new-dtags)
endfunction()
