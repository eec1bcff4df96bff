// The single knob for compute threads.
//
// Core runs its kernels on an OpenMP team of ComputeThreads() threads. The
// default is the number of CPUs this process may use (affinity mask and cgroup
// CPU quota), never the host's core count, so a container limited to 2 CPUs
// on a 64-core host uses 2 threads.
#pragma once

namespace attn {

// CPUs this process may run on: min(sched affinity count, ceil(cgroup quota)).
// Always >= 1. Read once and cached.
int AvailableCpus();

// Sets the number of compute threads for all later calls, from any thread.
// n <= 0 restores the default (AvailableCpus()). Thread-safe.
void SetComputeThreads(int n);

// Current number of compute threads. Thread-safe.
int ComputeThreads();

}  // namespace attn
