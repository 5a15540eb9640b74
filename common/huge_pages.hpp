#pragma once
// Large buffers on this kind of machine: on transparent huge pages, and kept once touched.
//
// Why: a Coach node allocates buffers of tens or hundreds of MB all the time (ZeroMQ allocates
// every received message; a migrated shard arrives as one). On the virtual machines we measured,
// writing freshly mapped 4 KiB pages runs at about 0.4 GB/s (a page fault each), which made a
// 256 MiB shard migration take about 3x its transfer time (docs/performance.md, "Rescale").
// glibc (2.35 and later) backs malloc's large allocations with transparent huge pages when the
// tunable glibc.malloc.hugetlb=1 is set, and it reads GLIBC_TUNABLES only when a process starts.
//
// Huge pages are not enough: memory a process gives back to the kernel is reported free to the
// host (virtio-balloon free page reporting) within seconds, and the host drops it; the first
// write to such a page then costs a fault in the host too, about 0.1 GB/s even with huge pages
// (docs/performance.md, "rescale_bench"). Only memory a process keeps stays fast. So a node keeps
// what it frees (keep_freed_memory): glibc serves every allocation, large ones included, from one
// heap that is never trimmed, and a freed buffer is reused as it is, already mapped. Memory that
// a node will need soon (the slices a migration brings) is touched ahead of time (warm_memory),
// while the job still trains, so that the transfer lands in pages that are already mapped.
// What is kept is bounded (trim_freed_memory): more free than in use (and than 256 MiB) goes
// back, so that what a peer made the node allocate does not stay resident.

#include <cstddef>
#include <span>

namespace coach {

/// Re-executes this program once with glibc.malloc.hugetlb=1 added to GLIBC_TUNABLES, unless it
/// is there already or COACH_HUGE_PAGES=0. Call first thing in main. Returns (and the program
/// goes on as it is) when re-executing is not possible.
void use_huge_pages(char** argv) noexcept;

/// Makes glibc keep what the process frees: one arena (every thread allocates from the main
/// heap), no mmap for large allocations, and no trimming of the heap's top below 2 GiB free.
/// The resident size then stays at its high-water mark: the price of never faulting a buffer in
/// twice. Unless COACH_KEEP_MEMORY=0. REQUIRES: called before the process starts any thread
/// (a thread takes its arena at its first allocation). Returns whether the policy is in force.
bool keep_freed_memory() noexcept;

/// Allocates a block of each size in `blocks` (all at once), touches them (one write per page)
/// and frees them again, so that the next allocations of those sizes (ZeroMQ's receive buffers
/// included) reuse pages that are already mapped. A block per expected allocation, not one of
/// their sum: a large allocation needs that much contiguous free memory, and the free memory of
/// a heap that served other buffers before is in pieces; where a free piece of a block's size
/// exists it is reused, and touching it costs no fault. Thread-safe; takes as long as faulting the
/// new pages in (seconds per GiB for memory the host has dropped): call it off the critical
/// path. Returns the bytes touched: 0 when keep_freed_memory() is not in force (freed memory
/// would go back to the kernel) or an allocation fails.
std::size_t warm_memory(std::span<const std::size_t> blocks) noexcept;

/// The bound on what a node keeps freed (issue 37, item 9: frames any peer sent stayed resident
/// until the node exited): when keep_freed_memory() is in force and more than max(`floor`, the
/// bytes in use) is free, the free pages go back to the kernel (malloc_trim), unless
/// warm_memory ran in the last `after_warm` seconds (what it warmed is about to be used). Free
/// means resident and not in use: the process's anonymous resident memory less the heap's
/// bytes in use. Call it now and then (the node agent: every heartbeat). Returns the bytes the
/// trim gave back, 0 when it did not trim.
std::size_t trim_freed_memory(std::size_t floor = std::size_t(256) << 20,
                              double after_warm = 60) noexcept;

}  // namespace coach
