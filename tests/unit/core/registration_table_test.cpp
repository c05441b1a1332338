// SPDX-License-Identifier: MIT
#include "core/registration_table.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <random>
#include <thread>
#include <vector>

namespace phx::detail {
namespace {

std::shared_ptr<Mapping> add(RegistrationTable &table, std::uintptr_t address, std::size_t size) {
  if (table.reserve(address, size) != 0) {
    return nullptr;
  }
  auto mapping =
      std::make_shared<Mapping>(address, size, reinterpret_cast<std::byte *>(address + 0x1000));
  table.publish(mapping);
  return mapping;
}

TEST(RegistrationTable, FindsContainingRangeOnly) {
  RegistrationTable table;
  ASSERT_TRUE(add(table, 0x10000, 0x1000));
  ASSERT_TRUE(add(table, 0x20000, 0x2000));
  EXPECT_TRUE(table.find(0x10000, 0x1000));
  EXPECT_TRUE(table.find(0x10fff, 1));
  EXPECT_FALSE(table.find(0x10fff, 2));        // runs past the end
  EXPECT_FALSE(table.find(0x11000, 1));        // just after
  EXPECT_FALSE(table.find(0xffff, 1));         // just before
  EXPECT_FALSE(table.find(0x1f000, 0x2000));   // spans a gap
  EXPECT_FALSE(table.find(0x10000, 0x11000));  // spans two registrations
  auto m = table.find(0x21000, 0x1000);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->device_address(), 0x20000U);
}

TEST(RegistrationTable, UnknownPointerIsNotFound) {
  RegistrationTable table;
  EXPECT_FALSE(table.find(0x1234, 1));
  ASSERT_TRUE(add(table, 0x10000, 0x1000));
  EXPECT_FALSE(table.find(0, 1));
  EXPECT_FALSE(table.find(UINTPTR_MAX, 1));
}

TEST(RegistrationTable, SameRangeTwiceIsEexist) {
  RegistrationTable table;
  ASSERT_TRUE(add(table, 0x10000, 0x1000));
  EXPECT_EQ(table.reserve(0x10000, 0x1000), EEXIST);
}

TEST(RegistrationTable, OverlapsAreEinval) {
  RegistrationTable table;
  ASSERT_TRUE(add(table, 0x10000, 0x2000));
  EXPECT_EQ(table.reserve(0x10000, 0x1000), EINVAL);  // same start, other size
  EXPECT_EQ(table.reserve(0x11000, 0x1000), EINVAL);  // inside
  EXPECT_EQ(table.reserve(0xf000, 0x2000), EINVAL);   // over the start
  EXPECT_EQ(table.reserve(0x11fff, 0x10), EINVAL);    // over the end
  EXPECT_EQ(table.reserve(0x8000, 0x10000), EINVAL);  // around it
  EXPECT_EQ(table.reserve(0xf000, 0x1000), 0);        // adjacent below
  EXPECT_EQ(table.reserve(0x12000, 0x1000), 0);       // adjacent above
}

TEST(RegistrationTable, EmptyAndWrappingRangesAreEinval) {
  RegistrationTable table;
  EXPECT_EQ(table.reserve(0x1000, 0), EINVAL);
  EXPECT_EQ(table.reserve(UINTPTR_MAX - 10, 100), EINVAL);
}

TEST(RegistrationTable, ReservedButUnpublishedIsInvisibleAndCancellable) {
  RegistrationTable table;
  ASSERT_EQ(table.reserve(0x10000, 0x1000), 0);
  EXPECT_FALSE(table.find(0x10000, 1));
  EXPECT_EQ(table.reserve(0x10000, 0x1000), EEXIST);
  EXPECT_FALSE(table.remove(0x10000, 0x1000));  // not removable before it exists
  table.cancel(0x10000);
  EXPECT_EQ(table.reserve(0x10000, 0x1000), 0);
}

TEST(RegistrationTable, RemoveNeedsExactRange) {
  RegistrationTable table;
  auto m = add(table, 0x10000, 0x2000);
  ASSERT_TRUE(m);
  EXPECT_FALSE(table.remove(0x10000, 0x1000));
  EXPECT_FALSE(table.remove(0x11000, 0x1000));
  EXPECT_FALSE(table.remove(0x10000, 0x2000, reinterpret_cast<Mapping *>(0x1)));
  EXPECT_EQ(table.remove(0x10000, 0x2000, m.get()), m);
  EXPECT_FALSE(table.find(0x10000, 1));
  EXPECT_EQ(table.size(), 0U);
}

TEST(RegistrationTable, RemovedMappingStaysAliveForItsHolders) {
  RegistrationTable table;
  auto held = add(table, 0x10000, 0x1000);
  auto in_flight = table.find(0x10000, 0x1000);
  held.reset();
  auto removed = table.remove(0x10000, 0x1000);
  ASSERT_TRUE(removed);
  removed.reset();
  ASSERT_TRUE(in_flight);
  EXPECT_EQ(in_flight->size(), 0x1000U);
}

TEST(RegistrationTable, ClearReturnsEverything) {
  RegistrationTable table;
  for (std::uintptr_t i = 0; i < 100; ++i) {
    ASSERT_TRUE(add(table, 0x100000 + i * 0x1000, 0x1000));
  }
  EXPECT_EQ(table.clear().size(), 100U);
  EXPECT_EQ(table.size(), 0U);
}

// Many threads register, look up and deregister disjoint and contended
// ranges; every lookup must find exactly its own registration.
TEST(RegistrationTable, ConcurrentUse) {
  RegistrationTable table;
  constexpr int kThreads = 8;
  constexpr int kRounds = 2000;
  std::atomic<int> wrong{0};
  std::atomic<int> contended_wins{0};
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(static_cast<std::uint64_t>(t));
      for (int i = 0; i < kRounds; ++i) {
        const std::uintptr_t own =
            0x1000000 * static_cast<std::uintptr_t>(t + 1) + (rng() % 64) * 0x10000;
        if (auto m = add(table, own, 0x10000)) {
          auto found = table.find(own + 0x8000, 0x100);
          if (found != m) {
            wrong.fetch_add(1);
          }
          if (table.remove(own, 0x10000) != m) {
            wrong.fetch_add(1);
          }
        } else {
          wrong.fetch_add(1);  // own ranges never collide
        }
        // All threads fight over one shared range.
        if (auto shared = add(table, 0x500, 0x100)) {
          contended_wins.fetch_add(1);
          (void)table.remove(0x500, 0x100, shared.get());
        }
      }
    });
  }
  for (auto &th : threads) {
    th.join();
  }
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GT(contended_wins.load(), 0);
  EXPECT_EQ(table.size(), 0U);
}

}  // namespace
}  // namespace phx::detail
