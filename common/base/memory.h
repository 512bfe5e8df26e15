// The allocator settings of the services that move large transient buffers (the router's KV
// store queue and Put messages, the kv-store's Put parsing): freed memory stays in the heap for
// the next request instead of going back to the OS and being faulted in again.
#pragma once

#include <cstddef>

namespace moe::common {

// glibc malloc: requests below kServingMmapThreshold come from the heap (not a fresh mmap each,
// unmapped on free), and the heap keeps up to kServingTrimThreshold of free memory at its top.
// Measured on this project's 2-vCPU VM, where a first-touch page fault costs ~8 us: the router
// faulted ~3900 pages per cold 2k-token prompt with the kv-store on (the store queue's copies
// and the Puts' protobuf buffers, ~30 ms of CPU, part of it on the stepping thread), ~12 with
// these settings; the kv-store spent a third less CPU on the same Puts. RSS then stays near its
// peak (for the router: the bounded store queue, 128 MiB by default). Call once at start-up,
// before other threads allocate. No effect with another allocator.
inline constexpr size_t kServingMmapThreshold = 32u << 20;  // glibc's largest allowed
inline constexpr size_t kServingTrimThreshold = 256u << 20;
void RetainFreedMemory();

}  // namespace moe::common
