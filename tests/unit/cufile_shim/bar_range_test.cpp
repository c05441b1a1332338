// SPDX-License-Identifier: MIT
// The shim's proof that memory CUDA does not know is PCI BAR memory
// (lib/cufile_shim/bar_range.*): inside the BAR phxfs reports, and not
// this process's own memory.
#include "cufile_shim/bar_range.hpp"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <limits>

namespace phx::cufile_shim {
namespace {

constexpr std::uint64_t kBar = 256ULL << 20;

TEST(BarRange, InsideTheBar) {
  EXPECT_EQ(classify_bar_range(kBar, 4096, 4096, false), BarRange::inside);
  EXPECT_EQ(classify_bar_range(kBar, kBar - 1, 1, false), BarRange::inside);
  EXPECT_EQ(classify_bar_range(kBar, 1, kBar - 1, false), BarRange::inside);
}

TEST(BarRange, PastTheEnd) {
  EXPECT_EQ(classify_bar_range(kBar, kBar - 100, 4096, false), BarRange::past_end);
  EXPECT_EQ(classify_bar_range(kBar, 1, kBar, false), BarRange::past_end);
  EXPECT_EQ(classify_bar_range(kBar, 1, std::numeric_limits<std::size_t>::max(), false),
            BarRange::past_end);
}

TEST(BarRange, Outside) {
  EXPECT_EQ(classify_bar_range(kBar, kBar, 1, false), BarRange::outside);
  EXPECT_EQ(classify_bar_range(kBar, std::numeric_limits<std::uintptr_t>::max() - 10, 4, false),
            BarRange::outside);
  EXPECT_EQ(classify_bar_range(0, 4096, 4096, false), BarRange::outside);
}

TEST(BarRange, HostMemoryInsideTheBarIsRefused) {
  EXPECT_EQ(classify_bar_range(kBar, 4096, 4096, true), BarRange::host_memory);
  // Outside or past the end says so whether or not it is mapped.
  EXPECT_EQ(classify_bar_range(kBar, kBar, 4096, true), BarRange::outside);
  EXPECT_EQ(classify_bar_range(kBar, kBar - 1, 2, true), BarRange::past_end);
}

TEST(MappedInProcess, SeesMappingsAndHoles) {
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  void *p = ::mmap(nullptr, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  auto *bytes = static_cast<std::byte *>(p);
  const auto base = reinterpret_cast<std::uintptr_t>(p);
  ASSERT_EQ(::munmap(bytes, page), 0);             // a hole first
  ASSERT_EQ(::munmap(bytes + 2 * page, page), 0);  // and last
  EXPECT_FALSE(mapped_in_process(base, page));
  EXPECT_FALSE(mapped_in_process(base + 2 * page, page));
  EXPECT_TRUE(mapped_in_process(base + page, 1));
  EXPECT_TRUE(mapped_in_process(base, 3 * page));  // any byte mapped counts
  EXPECT_TRUE(mapped_in_process(base + page + page - 1, page + 1));
  ::munmap(bytes + page, page);
  EXPECT_FALSE(mapped_in_process(base, 3 * page));
  // The null page is never mapped; this test's own code always is.
  EXPECT_FALSE(mapped_in_process(0, page));
  EXPECT_TRUE(mapped_in_process(reinterpret_cast<std::uintptr_t>(&mapped_in_process), 1));
}

}  // namespace
}  // namespace phx::cufile_shim
