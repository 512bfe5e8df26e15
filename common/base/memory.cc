#include "common/base/memory.h"

#include <malloc.h>

namespace moe::common {

void RetainFreedMemory() {
#if defined(__GLIBC__)
  // Setting either also turns off glibc's dynamic threshold adjustment.
  mallopt(M_MMAP_THRESHOLD, static_cast<int>(kServingMmapThreshold));
  mallopt(M_TRIM_THRESHOLD, static_cast<int>(kServingTrimThreshold));
#endif
}

}  // namespace moe::common
