// SPDX-License-Identifier: MIT
// phx-load --verify: a loaded checkpoint equal to its files passes; one
// changed byte in one tensor is reported with the tensor and the offset.
#include <gtest/gtest.h>

#include "phoenix/safetensors.hpp"
#include "safetensors_test_files.hpp"
#include "test_support.hpp"
#include "verify.hpp"

namespace st = phx::safetensors;

TEST(SafetensorsVerify, DetectsAChangedByte) {
  const phx::test::TempDir dir;
  (void)phx::test::write_safetensors(dir / "a.safetensors",
                                     {{"x", "F32", {1000}, phx::test::tensor_bytes(4000, 1)},
                                      {"y", "I16", {3, 5}, phx::test::tensor_bytes(30, 2)}},
                                     11);
  (void)phx::test::write_safetensors(dir / "b.safetensors",
                                     {{"z", "U8", {77}, phx::test::tensor_bytes(77, 3)}});
  st::LoadOptions o;
  o.engine = phx::Engine::host;
  const auto loaded = st::load(st::open_checkpoint(dir.path()), o);

  const phx::load_tool::VerifyResult good = phx::load_tool::verify(*loaded);
  EXPECT_EQ(good.tensors, 3U);
  EXPECT_EQ(good.bytes, 4000U + 30U + 77U);
  EXPECT_TRUE(good.mismatches.empty());

  // Host-engine tensors are plain host memory: corrupt one byte of y.
  loaded->at("y").data[17] ^= std::byte{0x40};
  const phx::load_tool::VerifyResult bad = phx::load_tool::verify(*loaded);
  ASSERT_EQ(bad.mismatches.size(), 1U);
  EXPECT_EQ(bad.mismatches[0], "y: first difference at byte 17");
}
