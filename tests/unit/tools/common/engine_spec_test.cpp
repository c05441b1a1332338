// SPDX-License-Identifier: MIT
// The engine table phx-breakdown and phx-e2e share, and Memory's copy-out
// for --verify, with host memory standing in for device addresses (the host
// engine's registration views the same bytes, as the pcibar provider's
// host view does for BAR offsets).
#include "common/engine_spec.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "common/host_buffer.hpp"
#include "common/pattern.hpp"

namespace phxtools {
namespace {

TEST(EngineSpec, TableNamesLibphoenixEngines) {
  ASSERT_EQ(libphoenix_engines().size(), 4U);
  const EngineSpec *direct = find_libphoenix_engine("direct");
  ASSERT_NE(direct, nullptr);
  EXPECT_STREQ(direct->name, "direct");
  EXPECT_EQ(direct->engine, phx::Engine::direct);
  EXPECT_TRUE(direct->gpu_memory);
  // The old spellings find the same rows.
  EXPECT_EQ(find_libphoenix_engine("phoenix"), direct);
  EXPECT_EQ(find_libphoenix_engine("gds"), find_libphoenix_engine("cufile"));
  const EngineSpec *host = find_libphoenix_engine("host");
  ASSERT_NE(host, nullptr);
  EXPECT_FALSE(host->gpu_memory);
  EXPECT_EQ(find_libphoenix_engine("posix"), nullptr);
}

TEST(EngineSpec, HostEngineIsAvailableAndGpuEnginesNeedAGpu) {
  EXPECT_EQ(unavailable_reason(*find_libphoenix_engine("host"), 0), std::nullopt);
  if (!gpu::probe(0).usable) {
    const auto why = unavailable_reason(*find_libphoenix_engine("compat"), 0);
    ASSERT_TRUE(why.has_value());
    EXPECT_FALSE(why->empty());
  }
}

TEST(Memory, HostMemoryCopiesOutItsBytes) {
  const Memory memory(*find_libphoenix_engine("host"), 0, 8192);
  EXPECT_STREQ(memory.kind(), "host");
  fill_pattern({static_cast<std::byte *>(memory.data()), 8192}, 4096);
  std::vector<std::byte> out(100);
  memory.copy_out(nullptr, 1000, out);
  EXPECT_EQ(find_mismatch(out, 4096 + 1000), std::nullopt);
  EXPECT_THROW(memory.copy_out(nullptr, 8100, out), std::out_of_range);
}

TEST(Memory, DeviceAddressesAreReadThroughTheRegistration) {
  const HostBuffer backing(3 * 4096);
  fill_pattern(backing.span(), 0);
  const auto addr = reinterpret_cast<std::uintptr_t>(backing.data());
  const EngineSpec &host = *find_libphoenix_engine("host");
  const Memory memory(host, 0, 2 * 4096, addr + 4096);
  EXPECT_STREQ(memory.kind(), "device-addr");
  EXPECT_EQ(memory.data(), backing.data() + 4096);

  std::vector<std::byte> out(300);
  EXPECT_THROW(memory.copy_out(nullptr, 0, out), std::logic_error);
  phx::Device device = phx::Device::open(0, phx::Engine::host);
  {
    // A registration that starts before the memory still covers it.
    const phx::Registration reg = device.register_memory(backing.data(), 3 * 4096);
    memory.copy_out(&reg, 10, out);
    EXPECT_EQ(find_mismatch(out, 4096 + 10), std::nullopt);
  }
  const phx::Registration part = device.register_memory(backing.data() + 4096, 4096);
  memory.copy_out(&part, 4096 - 300, out);
  EXPECT_EQ(find_mismatch(out, 2 * 4096 - 300), std::nullopt);
  EXPECT_THROW(memory.copy_out(&part, 4096, out), std::logic_error);  // past the registration
}

}  // namespace
}  // namespace phxtools
