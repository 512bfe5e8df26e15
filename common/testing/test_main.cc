// The main of every unit and integration test binary (moe_add_test links it instead of
// gtest_main): the environment is read here, never in the code under test.
//   MOE_KERNELS_ISA=avx512_bf16|avx512|avx2|portable  runs the kernels on that path
#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/kernels/kernels.h"
#include "gtest/gtest.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (absl::Status s = moe::kernels::SelectIsaFromEnvironment(std::getenv("MOE_KERNELS_ISA"));
      !s.ok()) {
    std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
    return 2;
  }
  return RUN_ALL_TESTS();
}
