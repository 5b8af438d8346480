// The process-wide allocator policy of commands that allocate and free the same large blocks
// over and over: the sweep's evaluations, and the live trainer's iterations (train, profile,
// validate --live), where Open MPI's non-blocking collectives malloc and free a temporary buffer
// the size of the message on every call.
#pragma once

namespace traintwin {

/// Freed memory stays in the heap instead of going back to the OS (glibc mallopt: no trimming
/// below 1 GiB free at the top of the heap, no mmap of their own for blocks below 1 GiB, 64 MiB
/// top pad), so a block freed and allocated again is not page-faulted in (and zeroed by the
/// kernel) again. The same policy as a caching allocator (PyTorch's, for one): peak memory is
/// kept, not returned. Measured on 2 Zen 5 cores: an analytical sweep takes 1.45x less CPU
/// (bench/sweep_bench); Open MPI's all-reduce of a 204 MB gradient bucket between 2 ranks
/// 88 -> 41 ms (libnbc's temporary buffer is no longer faulted in per call; with the earlier
/// 256 MiB threshold a 256 MB all-reduce still took 106 ms against 27 ms for 128 MB). Call it
/// once, at the start of a command, before the allocations it is for; forked workers inherit
/// it. No-op where the C library is not glibc.
void retain_freed_memory();

}  // namespace traintwin
