#pragma once
// Large buffers on transparent huge pages.
//
// Why: a Coach node allocates buffers of tens or hundreds of MB all the time (ZeroMQ allocates
// every received message; a migrated shard arrives as one). On the virtual machines we measured,
// writing freshly mapped 4 KiB pages runs at about 0.4 GB/s (a page fault each), which made a
// 256 MiB shard migration take about 3x its transfer time (docs/performance.md, "Rescale").
// glibc (2.35 and later) backs malloc's large allocations with transparent huge pages when the
// tunable glibc.malloc.hugetlb=1 is set, and it reads GLIBC_TUNABLES only when a process starts.

namespace coach {

/// Re-executes this program once with glibc.malloc.hugetlb=1 added to GLIBC_TUNABLES, unless it
/// is there already or COACH_HUGE_PAGES=0. Call first thing in main. Returns (and the program
/// goes on as it is) when re-executing is not possible.
void use_huge_pages(char** argv) noexcept;

}  // namespace coach
